#!/bin/bash
# session 40 call 6: the paper's other reading of its "w/o RoPE" GPT-2 ("the standard cosine position embedding"):
# pos_emb='sinusoidal' (new, a fixed table) on the Shakespeare protocol of results/shakespeare (the committed runs:
# learned positions), MHA and Tucker [8,64,64], seed 2 (the third seed, as the table's seed rows have), two runs at once on the one GPU.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
python3 -m data.shakespeare.prepare > $D/prepare.txt 2>&1; echo "prepare rc $?" >> $D/rc.txt
timeout 500 python3 -m scripts.sweep shakespeare --rows mha,tucker_8_64_64 --rope off --seeds 2 --jobs 2 \
    --results_dir $D/sin --progress 60 -- --eval_interval=50 --patience=6 --eval_iters=10 --compile=False \
    --pos_emb=sinusoidal > $D/sweep.txt 2>&1
echo "sweep rc $?" >> $D/rc.txt
python3 - > $D/summary.txt 2>&1 <<'PY'
import json, pathlib, os
for run in sorted(pathlib.Path(os.environ["OUT"], "c6", "sin").iterdir()):
    try:
        s = json.loads((run / "summary.json").read_text())
        print(run.name, "best", s.get("best_val_loss"), "at", s.get("best_iter"), "finished", s.get("finished"),
              "pos_emb", s["config"].get("pos_emb"), "wall", s.get("wall_s"))
    except Exception as e:
        vals = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines() if '"val_loss"' in l]
        best = min(vals, key=lambda r: r["val_loss"]) if vals else None
        print(run.name, "unfinished:", type(e).__name__, "best so far", best and (best["val_loss"], best["iter"]))
PY
(cd $OUT && tar czf c6.tgz c6)
