# tab_shake row 'GQA [nG=2]': 2 key/value head(s) shared by 12 query heads.
include("shakespeare_base.py")

attn = 'gqa'
n_kv_head = 2
out_dir = 'out-shakespeare-gqa2'
