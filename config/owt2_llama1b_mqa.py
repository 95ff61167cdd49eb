# tab:owt2_llama1b_timing row 'MQA [nG=1]'.
include("owt2_llama1b_base.py")

attn = 'gqa'
n_kv_head = 1
out_dir = 'out-owt2-llama1b-mqa'
