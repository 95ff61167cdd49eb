# tab_gpt2 row 'MLA [GQA, nG=2 equiv.]' (w/o RoPE only): full d x d query (q_rank None, the paper's
# dcQ=768), dcK=128, separated K,V; expresses the same ranks of W as GQA nG=2.
include("owt_base.py")

attn = 'mla'
q_rank = None
kv_rank = 128
shared_kv = False
out_dir = 'out-owt-mla_gqa2_equiv'
