# tab_shake row 'Tucker separated [6,32,32]': ranks (r1, r2, r3) pre- and post-softmax, separate U3 / U~3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (6, 32, 32)
shared_kv = False
out_dir = 'out-shakespeare-tucker_6_32_32'
