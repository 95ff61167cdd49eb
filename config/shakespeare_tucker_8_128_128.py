# tab_shake row 'Tucker separated [8,128,128]': ranks (r1, r2, r3) pre- and post-softmax, separate U3 / U~3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (8, 128, 128)
shared_kv = False
out_dir = 'out-shakespeare-tucker_8_128_128'
