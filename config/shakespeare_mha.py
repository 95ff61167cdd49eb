# tab_shake row 'MHA'.
include("shakespeare_base.py")

attn = 'mha'
out_dir = 'out-shakespeare-mha'
