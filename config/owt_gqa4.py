# tab_gpt2 row 'GQA [nG=4]'.
include("owt_base.py")

attn = 'gqa'
n_kv_head = 4
out_dir = 'out-owt-gqa4'
