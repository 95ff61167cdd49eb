# tab_shake row 'MLA separated K,V [dcK=64]': query rank dcQ = dcK = 64, own down-projections
# for K and V. With --pos_emb=rope: decoupled RoPE (DeepSeek-V2), the model's default.
include("shakespeare_base.py")

attn = 'mla'
q_rank = 64
kv_rank = 64
shared_kv = False
out_dir = 'out-shakespeare-mla_sep64'
