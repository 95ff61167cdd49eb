#!/bin/bash
# session 40 call 3: pos_emb='sinusoidal' on CUDA (train compiled; with master weights; with the graphed step), then
# sample.py greedy in each decode mode (eager, graph, one launch: the same text); torchrun with more processes than GPUs
# (one error line, train.py's setup).
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
python3 -m data.shakespeare.prepare > $D/prepare.txt 2>&1; echo "prepare rc $?" >> $D/rc.txt
Q="config/quickstart_tucker.py --pos_emb=sinusoidal --max_iters=60 --lr_decay_iters=60 --eval_interval=30"
timeout 150 python3 train.py $Q --compile=True --out_dir=$D/run > $D/train.txt 2>&1; echo "train rc $?" >> $D/rc.txt
timeout 120 python3 train.py $Q --master_weights=True --out_dir=$D/run_master > $D/train_master.txt 2>&1
echo "train_master rc $?" >> $D/rc.txt
timeout 120 python3 train.py $Q --graph_step=True --out_dir=$D/run_graph > $D/train_graph.txt 2>&1
echo "train_graph rc $?" >> $D/rc.txt
for mode in eager graph mega; do
  timeout 90 python3 sample.py --out_dir=$D/run --start="ROMEO:" --temperature=0 --num_samples=2 --max_new_tokens=100 \
      --decode=$mode > $D/sample_$mode.txt 2> $D/sample_$mode.err; echo "sample_$mode rc $?" >> $D/rc.txt
done
cmp $D/sample_eager.txt $D/sample_graph.txt && echo "graph = eager" >> $D/rc.txt
cmp $D/sample_eager.txt $D/sample_mega.txt && echo "mega = eager" >> $D/rc.txt
python3 - >> $D/rc.txt 2>&1 <<'PY'
import json, os
for r in ("run", "run_master", "run_graph"):
    p = os.path.join(os.environ["OUT"], "c3", r)
    s = json.load(open(os.path.join(p, "summary.json")))
    import torch
    ck = torch.load(os.path.join(p, "ckpt.pt"), map_location="cpu", weights_only=False)
    from model import sinusoidal_table
    w = ck["model"]["transformer.wpe.weight"]
    print(r, "best val", round(s["best_val_loss"], 4), "wpe", w.dtype, "== table:", torch.equal(w.float(), sinusoidal_table(*w.shape)))
PY
timeout 90 python3 -m torch.distributed.run --standalone --nproc_per_node=2 train.py $Q --gradient_accumulation_steps=2 --out_dir=$D/run_ddp \
    > $D/torchrun.txt 2>&1; echo "torchrun rc $? (expected non-zero)" >> $D/rc.txt
grep -n '^error' $D/torchrun.txt >> $D/rc.txt
rm -f $D/run*/ckpt.pt
(cd $OUT && tar czf c3.tgz c3)
