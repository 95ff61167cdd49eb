# tab_gpt2 row 'MLA shared K,V [dcK,dcQ=128]'. With --pos_emb=rope: decoupled RoPE (DeepSeek-V2),
# the model's default.
include("owt_base.py")

attn = 'mla'
q_rank = 128
kv_rank = 128
shared_kv = True
out_dir = 'out-owt-mla_shared128'
