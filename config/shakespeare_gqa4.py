# tab_shake row 'GQA [nG=4]': 4 key/value head(s) shared by 12 query heads.
include("shakespeare_base.py")

attn = 'gqa'
n_kv_head = 4
out_dir = 'out-shakespeare-gqa4'
