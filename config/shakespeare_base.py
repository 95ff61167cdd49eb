# Base for the Shakespeare ablation (paper: tab_shake; hyperparameters: tab_UCM_trainings,
# GPT2 column, Shakespeare entries). GPT-2 124M shapes, N=256, batch 64, 10k iterations,
# lr 1e-4 with cosine decay and 0.5% warmup. Every shakespeare_<method>.py includes this
# file and sets only the attention keys and out_dir.
# Positions: learned embedding here ("w/o RoPE"); the "w/ RoPE" half of the table is
# the same file run with --pos_emb=rope.

out_dir = 'out-shakespeare'
eval_interval = 100       # 100 evaluations over the run; best_val_loss is what the table reports
eval_full_val = True      # the val split is small: evaluate all of it, deterministically
eval_iters = 10           # random batches for the train-split loss (val uses the whole split)
log_interval = 10
always_save_checkpoint = False  # keep only the best checkpoint (small data, overfits late)

wandb_log = False
wandb_project = 'tucker-shakespeare'

dataset = 'shakespeare'   # tiktoken GPT-2 BPE, see data/shakespeare/prepare.py
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256

include("gpt2_124m.py")   # model shapes and AdamW settings shared with the other GPT-2 table

# cosine annealing with 0.5% warmup
max_iters = 10000
lr_decay_iters = 10000
warmup_iters = 50     # 0.5% of 10000
