# tab_shake row 'Tucker shared K,V [6,32,32]': ranks (r1, r2, r3) pre- and post-softmax, U~3 = U3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (6, 32, 32)
shared_kv = True
out_dir = 'out-shakespeare-tucker_shared_6_32_32'
