# GPT-2 124M as the paper trains it (tab_UCM_trainings, GPT2 column): d=768, nH=12, dH=64, AdamW at lr 1e-4
# with cosine annealing, weight decay 0.1. Included by shakespeare_base.py and owt_base.py, which add the
# dataset, context, batch and schedule length. Parameters: 124.4M (123.6M without the position embedding); the
# paper's hyperparameter table says "117M", the figure OpenAI published for this shape.
# Not in the paper, so nanoGPT's choices (the paper's GPT-2 is "based on NanoGPT"): no biases, min_lr = lr / 10,
# beta2 0.95, gradient clipping at 1.0, dropout 0, learned positions for "w/o RoPE" (the paper's appendix calls
# them "the standard cosine position embedding": --pos_emb=sinusoidal; the "w/ RoPE" half is --pos_emb=rope).
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
pos_emb = 'learned'

learning_rate = 1e-4
min_lr = 1e-5
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
decay_lr = True
