# tab_gpt2 row 'MLA [GQA, nG=2 equiv.]' on enwiki: full d x d query (q_rank None), dcK=128,
# separated K,V. The paper reports it w/o RoPE only; here also w/ RoPE, decoupled (the model's
# default) and latent (--mla_rope=latent).
include("enwiki_base.py")

attn = 'mla'
q_rank = None
kv_rank = 128
shared_kv = False
out_dir = 'out-enwiki-mla_gqa2_equiv'
