# Base for GPT-2 124M on OpenWebText (paper: tab_gpt2; hyperparameters: tab_UCM_trainings,
# GPT2 column). N=1024, 480 sequences per optimizer step (~0.5M tokens), 600k iterations,
# lr 1e-4 with cosine decay and 0.5% warmup. Every owt_<method>.py includes this file and
# sets only the attention keys and out_dir. The "w/ RoPE" half is --pos_emb=rope.

out_dir = 'out-owt'
eval_interval = 1000
eval_iters = 200
eval_full_val = False     # val split is ~4M tokens: sample eval_iters batches instead
log_interval = 10
always_save_checkpoint = True   # long runs: always keep a checkpoint to resume from

wandb_log = False
wandb_project = 'tucker-owt'

dataset = 'openwebtext'
# 12 x 40 = 480 sequences per step on one GPU; train.py divides the accumulation steps
# by the number of DDP ranks, so the global batch stays 480 under torchrun.
batch_size = 12
gradient_accumulation_steps = 40
block_size = 1024

include("gpt2_124m.py")   # model shapes and AdamW settings shared with the other GPT-2 table

# cosine annealing with 0.5% warmup
max_iters = 600000
lr_decay_iters = 600000
warmup_iters = 3000   # 0.5% of 600000
