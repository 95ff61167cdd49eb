# Base for tab_gpt2's rows (the paper's GPT-2 124M OpenWebText table) on the English Wikipedia
# subset, in a regime that separates the variants (issue 15): data/enwiki/prepare.py, 42.25M train
# tokens, 1.08M val. One fixed protocol for every row; every enwiki_<method>.py includes this file
# and sets only the attention keys and out_dir. The "w/ RoPE" half is --pos_emb=rope (MLA rows:
# decoupled RoPE, or --mla_rope=latent; Tucker: latent RoPE).
#
# N=1024, 32 sequences per step, 1,300 iterations (42.6M tokens: about one pass over train),
# AdamW lr 6e-4 with 100 warmup iterations and cosine decay to 6e-5 at the last iteration, weight
# decay 0.1, betas (0.9, 0.95), clip 1.0, bf16, torch.compile.
# Evaluation every 250 iterations and at the last one: the train loss on 40 random batches, the val
# loss on the whole val split in order (1,058 windows = 34 batches of 32, fewer than 40 random
# batches and deterministic). The reported number is the final whole-split val loss
# (summary.json's final_val_loss, scripts/paper_tables.py: Table.reported_loss).

out_dir = 'out-enwiki'
eval_interval = 250
eval_iters = 40
eval_full_val = True
log_interval = 10
always_save_checkpoint = True   # the final model is what the conversion study reads (sweep: --save-checkpoints)

wandb_log = False
wandb_project = 'tucker-enwiki'

dataset = 'enwiki'
batch_size = 32
gradient_accumulation_steps = 1
block_size = 1024

include("gpt2_124m.py")   # d=768, nH=12, 12 layers, no biases, learned positions; AdamW betas, wd, clip

learning_rate = 6e-4
min_lr = 6e-5
max_iters = 1300
lr_decay_iters = 1300
warmup_iters = 100

dtype = 'bfloat16'
compile = True
