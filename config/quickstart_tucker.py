# Quick start (README's first command): a small Tucker GPT on tiny Shakespeare that trains in
# a few minutes on a laptop CPU (seconds on a GPU), then `python sample.py --out_dir=out-quickstart-tucker`.
# Not a paper row: the paper's runs are config/shakespeare_*.py (GPT-2 124M).
include("shakespeare_base.py")

out_dir = 'out-quickstart-tucker'
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
batch_size = 8
attn = 'tucker'
tucker_ranks = (4, 64, 32)   # [r1, r2, r3]: 4 head combinations, query rank 64, key/value rank 32
pos_emb = 'rope'             # latent RoPE in the r3 = 32 key latent
learning_rate = 2e-3
min_lr = 2e-4
max_iters = 200
lr_decay_iters = 200
warmup_iters = 20
eval_interval = 100
eval_full_val = False
eval_iters = 10
log_interval = 20
always_save_checkpoint = True
