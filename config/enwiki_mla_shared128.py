# tab_gpt2 row 'MLA shared K,V [dcK,dcQ=128]' on enwiki. W/ RoPE: decoupled (DeepSeek-V2, the
# paper's setup), or latent RoPE with --mla_rope=latent.
include("enwiki_base.py")

attn = 'mla'
q_rank = 128
kv_rank = 128
shared_kv = True
out_dir = 'out-enwiki-mla_shared128'
