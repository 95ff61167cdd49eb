#!/usr/bin/env bash
# Session 49 call 1: the pre-Ampere shared-memory accounting (pipelines_loads, program_reserve) and
# MegaDecoder.program_count on the H200: the CUDA tests of the files they touch, then bench_decode's one launch at
# batch 32 (Tucker, Tucker shared, 16k) beside MHA's default step, as before.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; mkdir -p $O
git log --oneline -1 > $O/commit.txt 2>&1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $O/gpu.txt 2>&1
python3 - > $O/props.txt 2>&1 << 'PY'
import torch, decode_attention as da
d = torch.device("cuda")
print(torch.cuda.get_device_name(), torch.cuda.get_device_capability(), da.shared_memory(d), da.pipelines_loads(d),
      da.program_reserve(d))
PY
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/test_decode_wide.py tests/test_fused_mla_rope.py \
    tests/test_decode_attention.py -k "cuda or shared_memory or pipelines or program_count" > $O/tests.log 2>&1
echo "tests=$?" > $O/rc.txt
timeout 200 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $O --name mha > $O/mha.log 2>&1; echo "mha=$?" >> $O/rc.txt
timeout 200 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega \
    --batches 32 --contexts 16384 --out_dir $O --name wide > $O/wide.log 2>&1; echo "wide=$?" >> $O/rc.txt
