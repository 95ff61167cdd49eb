# tab:owt2_llama1b_timing row 'GQA [nG=2]'.
include("owt2_llama1b_base.py")

attn = 'gqa'
n_kv_head = 2
out_dir = 'out-owt2-llama1b-gqa2'
