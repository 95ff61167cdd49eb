#!/bin/bash
# session 39 call 4: the final mechanism (fused optimizer steps and graph_step replays counted, no fingerprint) on
# CUDA: its CUDA tests; then model.generate end to end (500 tokens, batch 1, graph and mega) against the session's
# starting tree (.carry/base, eb3ed2d) in the same call, alternating three rounds (call 1 saw the fingerprint's
# tree 2-7% slower).
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py tests/test_graph_step.py tests/test_master_adamw.py \
  -k "cuda or version_bump or fused_step" > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
ARGS="--variants mha,tucker_8_64_64 --modes graph --batches 1 --contexts 1024 --generate 500 --generate_modes graph,mega"
for k in 1 2 3; do
  for tree in base new; do
    if [ $tree = new ]; then dir=.; else dir=.carry/base; fi
    (cd $dir && timeout 100 python3 -m scripts.bench_decode $ARGS --out_dir $D --name gen_${tree}_$k > $D/gen_${tree}_$k.txt 2>&1)
    echo "gen_${tree}_$k rc $?" >> $D/rc.txt
  done
done
python3 - $D > $D/gen_summary.txt <<'PY'
import json, sys, statistics
D = sys.argv[1]
rows = {}
for tree in ("base", "new"):
    for k in (1, 2, 3):
        try:
            for g in json.load(open(f"{D}/gen_{tree}_{k}.json"))["generate"]:
                rows.setdefault((g.get("variant"), g["generate_mode"], tree), []).append(g["tokens_per_s"])
        except Exception as e:
            print("missing", tree, k, e)
for (v, m, tree), ts in sorted(rows.items()):
    print(f"{v} {m} {tree}: tokens/s {[round(t) for t in ts]}, median {statistics.median(ts):.0f}")
PY
(cd $OUT && tar czf c4.tgz c4)
