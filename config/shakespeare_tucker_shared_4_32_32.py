# tab_shake row 'Tucker shared K,V [4,32,32]': ranks (r1, r2, r3) pre- and post-softmax, U~3 = U3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (4, 32, 32)
shared_kv = True
out_dir = 'out-shakespeare-tucker_shared_4_32_32'
