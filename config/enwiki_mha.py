# tab_gpt2 row 'MHA' on enwiki (w/ RoPE: --pos_emb=rope).
include("enwiki_base.py")

attn = 'mha'
out_dir = 'out-enwiki-mha'
