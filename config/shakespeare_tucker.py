# Short name used in the README: tab_shake row 'Tucker separated [8,64,64]'.
# Same model and training as shakespeare_tucker_8_64_64.py (the sweep uses that file).
include("shakespeare_tucker_8_64_64.py")

out_dir = 'out-shakespeare-tucker'
