# tab:owt2_llama1b_timing row 'Tucker [32,128,64]'.
# Separated K,V with latent RoPE (eq. eq_tuckerRope), pre- = post-softmax ranks (r1, r2, r3).
include("owt2_llama1b_base.py")

attn = 'tucker'
tucker_ranks = (32, 128, 64)
shared_kv = False   # separated K,V: caches x U3 and x U~3 (64 + 64 values per token per layer)
out_dir = 'out-owt2-llama1b-tucker_32_128_64'
