# tab:owt2_llama1b_timing row 'GQA [nG=8] (the LLaMA-3 1B default, the paper's baseline)'.
include("owt2_llama1b_base.py")

attn = 'gqa'
n_kv_head = 8
out_dir = 'out-owt2-llama1b-gqa8'
