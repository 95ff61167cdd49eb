# tab_gpt2 row 'GQA [nG=2]' on enwiki.
include("enwiki_base.py")

attn = 'gqa'
n_kv_head = 2
out_dir = 'out-enwiki-gqa2'
