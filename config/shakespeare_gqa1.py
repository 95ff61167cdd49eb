# tab_shake row 'GQA [nG=1]' (= MQA): 1 key/value head(s) shared by 12 query heads.
include("shakespeare_base.py")

attn = 'gqa'
n_kv_head = 1
out_dir = 'out-shakespeare-gqa1'
