#!/bin/bash
# session 39 call 1: generate's weight fingerprint (note_weight_changes, bumps version counters after writes
# that made none: torch's fused AdamW, p.data) and the review's mends on CUDA: the CUDA tests of the files changed;
# the fingerprint's own time on GPT-2 124M (bf16 and fp32, median of 50); model.generate end to end (500 tokens, batch 1,
# graph and mega) against the session's starting tree (.carry/base, eb3ed2d) in the same call, alternating.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $D/gpu.txt 2>&1
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py tests/test_sample.py tests/test_checkpoint.py \
  -k "cuda or version_bump or fingerprint or max_new or stop_at_eot or bf16_checkpoint or checkpoint_file" > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
timeout 60 python3 - > $D/fingerprint.txt 2>&1 <<'PY'
import statistics, time, torch
from model import GPT, GPTConfig
for dtype in (torch.bfloat16, torch.float32):
    for attn in (dict(attn="mha"), dict(attn="tucker", tucker_ranks=(8, 64, 64))):
        m = GPT(GPTConfig(**attn)).to("cuda", dtype).eval()
        m.note_weight_changes()
        ts = []
        for _ in range(50):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            m.note_weight_changes()
            torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
        n = sum(p.numel() for p in m.parameters())
        print(f"{attn['attn']} {dtype}: {len(list(m.parameters()))} tensors, {n/1e6:.1f}M values: note_weight_changes "
              f"median {statistics.median(ts)*1e3:.3f} ms (min {min(ts)*1e3:.3f}, max {max(ts)*1e3:.3f})")
PY
echo "fingerprint rc $?" >> $D/rc.txt
ARGS="--variants mha,tucker_8_64_64 --modes graph --batches 1 --contexts 1024 --generate 500 --generate_modes graph,mega"
for k in 1 2; do
  for tree in new base; do
    if [ $tree = new ]; then dir=.; else dir=.carry/base; fi
    (cd $dir && timeout 100 python3 -m scripts.bench_decode $ARGS --out_dir $D --name gen_${tree}_$k > $D/gen_${tree}_$k.txt 2>&1)
    echo "gen_${tree}_$k rc $?" >> $D/rc.txt
  done
done
(cd $OUT && tar czf c1.tgz c1)
