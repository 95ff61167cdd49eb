# tab_shake row 'MLA separated K,V [dcK=128]': query rank dcQ = dcK = 128, own down-projections
# for K and V. With --pos_emb=rope: decoupled RoPE (DeepSeek-V2), the model's default.
include("shakespeare_base.py")

attn = 'mla'
q_rank = 128
kv_rank = 128
shared_kv = False
out_dir = 'out-shakespeare-mla_sep128'
