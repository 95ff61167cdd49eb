# tab_shake row 'MLA shared K,V; latent RoPE [dcK=32]': as shakespeare_mla_shared32.py, but with
# --pos_emb=rope the rotation acts in the dcK latent (paper eq. eq_mla_coupled_rope).
# Without RoPE this is the same model as shakespeare_mla_shared32.py (the paper's numbers agree).
include("shakespeare_base.py")

attn = 'mla'
q_rank = 32
kv_rank = 32
shared_kv = True
mla_rope = 'latent'
out_dir = 'out-shakespeare-mla_shared_latent32'
