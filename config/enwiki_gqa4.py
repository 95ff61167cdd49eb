# tab_gpt2 row 'GQA [nG=4]' on enwiki.
include("enwiki_base.py")

attn = 'gqa'
n_kv_head = 4
out_dir = 'out-enwiki-gqa4'
