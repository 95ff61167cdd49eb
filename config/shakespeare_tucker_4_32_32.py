# tab_shake row 'Tucker separated [4,32,32]': ranks (r1, r2, r3) pre- and post-softmax, separate U3 / U~3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (4, 32, 32)
shared_kv = False
out_dir = 'out-shakespeare-tucker_4_32_32'
