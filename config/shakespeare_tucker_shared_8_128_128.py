# tab_shake row 'Tucker shared K,V [8,128,128]': ranks (r1, r2, r3) pre- and post-softmax, U~3 = U3.
include("shakespeare_base.py")

attn = 'tucker'
tucker_ranks = (8, 128, 128)
shared_kv = True
out_dir = 'out-shakespeare-tucker_shared_8_128_128'
