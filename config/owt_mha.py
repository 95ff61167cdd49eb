# tab_gpt2 row 'MHA' (w/ RoPE: 'MHA (Full RoPE)').
include("owt_base.py")

attn = 'mha'
out_dir = 'out-owt-mha'
