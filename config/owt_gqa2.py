# tab_gpt2 row 'GQA [nG=2]'.
include("owt_base.py")

attn = 'gqa'
n_kv_head = 2
out_dir = 'out-owt-gqa2'
