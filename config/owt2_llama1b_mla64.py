# tab:owt2_llama1b_timing row 'MLA [dcK,dcQ=64]'.
# Shared or separated K,V? Separated, from the paper's own columns. Its KV Cache column puts
# MLA [dc=128] at 16.7, the same as GQA [nG=2] (2 x 2 x 64 = 256 values per token per layer): so
# MLA caches 2 dc = 256 values, c_K and c_V. In bf16 bytes, separated KV at dc=128 is
# 2*128 * 16 layers * 4096 * 2 B = 33.6 MB and shared KV 16.8 MB; but the column prints MHA at 268
# (bf16 MHA is 2*2048*16*4096*2 B = 536.9 MB), i.e. the column counts millions of cached values
# (= MB at 1 byte each), and 16.7 = 2*128*16*4096 / 1e6 = 16.78 truncated is separated K,V.
# The Attn Params column (also millions) agrees: dc=32 prints 73.4 = 16 x (d^2 + 6 d dc) / 1e6
# (separated; shared would be d^2 + 5 d dc: 72.4). Latent RoPE (rotation inside the dc latent).
include("owt2_llama1b_base.py")

attn = 'mla'
q_rank = 64
kv_rank = 64
shared_kv = False
mla_rope = 'latent'
out_dir = 'out-owt2-llama1b-mla64'
