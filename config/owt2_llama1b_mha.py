# tab:owt2_llama1b_timing row 'MHA'.
include("owt2_llama1b_base.py")

attn = 'mha'
out_dir = 'out-owt2-llama1b-mha'
