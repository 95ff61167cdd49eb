# tab_gpt2 row 'Tucker [8,128,64]' on enwiki: ranks (r1, r2, r3) pre- and post-softmax, separated K,V
# (w/ RoPE: latent RoPE).
include("enwiki_base.py")

attn = 'tucker'
tucker_ranks = (8, 128, 64)
shared_kv = False
out_dir = 'out-enwiki-tucker_8_128_64'
