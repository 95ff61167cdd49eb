# tab_shake row 'Tucker separated [6,64,64]': ranks (r1, r2, r3) pre- and post-softmax, separate U3 / U~3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (6, 64, 64)
shared_kv = False
out_dir = 'out-shakespeare-tucker_6_64_64'
