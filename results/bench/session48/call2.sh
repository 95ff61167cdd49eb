#!/usr/bin/env bash
# Session 48 call 2: the user paths after the dtype default and the kernels' sizing to the GPU (83391e0+): gpu_smoke.sh
# (mega8 new: sample.py --decode=mega at batch 8, decode_wide's step), is_bf16_supported(including_emulation=False) and
# configurator.default_dtype under torch 2.11, train/sample CUDA tests; decode_wide's step at one program an SM
# (what a GPU of 100 KB an SM runs) against two on this H200, batch 32 at 16k, alternating.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; mkdir -p $O
B="python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 32 --contexts 16384"
: > $O/rc.txt
for run in two_1 one_1 two_2; do  # alone on the GPU, before the rest
  knob=""; [ "${run%_*}" = one ] && knob="--knob decode_wide.PROGRAMS_PER_SM=1"
  timeout 150 $B $knob --out_dir $O/$run > $O/$run.log 2>&1; echo "$run=$?" >> $O/rc.txt
done
OUT=$O bash scripts/gpu_smoke.sh > $O/smoke.log 2>&1 & S=$!
python3 - > $O/dtype.log 2>&1 <<'PY'
import torch
from configurator import default_dtype
print("is_bf16_supported()", torch.cuda.is_bf16_supported(), "including_emulation=False",
      torch.cuda.is_bf16_supported(including_emulation=False), "default_dtype(cuda)", default_dtype(torch.device("cuda")),
      "cc", torch.cuda.get_device_capability())
PY
python3 -m pytest -q -rs -p no:cacheprovider --durations=5 tests/test_train.py tests/test_sample.py tests/test_configurator.py \
    -k "cuda or gpu or default_dtype" > $O/tests.log 2>&1; echo "tests=$?" >> $O/rc.txt
wait $S; echo "smoke=$?" >> $O/rc.txt
cat $O/smoke/rc.txt >> $O/rc.txt 2>/dev/null
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt
