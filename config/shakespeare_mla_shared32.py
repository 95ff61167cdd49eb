# tab_shake row 'MLA shared K,V [dcK=32]': query rank dcQ = dcK = 32, one down-projection W_DKV
# for K and V. With --pos_emb=rope: decoupled RoPE (DeepSeek-V2), the model's default.
include("shakespeare_base.py")

attn = 'mla'
q_rank = 32
kv_rank = 32
shared_kv = True
out_dir = 'out-shakespeare-mla_shared32'
