#!/bin/bash
# session 24 call 4: fused_mla_rope's kernels alone, GPU time by the profiler (ROWS x NUM_WARPS against inductor's torch
# form and a copy); then the training step at the fastest setting against the default (ROWS 4, 4 warps), same call.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
timeout 170 python3 -m scripts.bench_mla_rope --out_dir $D > $D/log_kernels.txt 2>&1
echo "rc $?" >> $D/log_kernels.txt
BEST=$(python3 - <<'PY'
import json, collections
rows = json.load(open("/dev/stdin" if False else __import__("os").environ["OUT"] + "/c4/bench_mla_rope.json"))["rows"]
tot = collections.defaultdict(float)
for r in rows:
    if r["name"].startswith("kernels"):
        tot[r["name"]] += r["fwd_ms"] + r["bwd_ms"]
name = min(tot, key=tot.get)
print(" ".join("--knob fused_mla_rope." + kv for kv in name.split()[1:]))
PY
)
echo "best: $BEST" > $D/best.txt
timeout 250 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope on \
    --variants mla_shared128 --precompile 2 --time_budget 230 --out_dir $D --name mla_default > $D/log_default.txt 2>&1
echo "rc $?" >> $D/log_default.txt
if [ -n "$BEST" ] && [ "$BEST" != "--knob fused_mla_rope.ROWS=4 --knob fused_mla_rope.NUM_WARPS=4" ]; then
  timeout 200 python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope on \
      --variants mla_shared128 $BEST --precompile 2 --time_budget 180 --out_dir $D --name mla_best > $D/log_best.txt 2>&1
  echo "rc $?" >> $D/log_best.txt
fi
(cd $OUT && tar czf c4.tgz c4)
