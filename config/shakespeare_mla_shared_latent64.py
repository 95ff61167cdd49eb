# tab_shake row 'MLA shared K,V; latent RoPE [dcK=64]': as shakespeare_mla_shared64.py, but with
# --pos_emb=rope the rotation acts in the dcK latent (paper eq. eq_mla_coupled_rope).
# Without RoPE this is the same model as shakespeare_mla_shared64.py (the paper's numbers agree).
include("shakespeare_base.py")

attn = 'mla'
q_rank = 64
kv_rank = 64
shared_kv = True
mla_rope = 'latent'
out_dir = 'out-shakespeare-mla_shared_latent64'
