#!/usr/bin/env bash
# session 45 call 1: the audits' test files' CUDA cases, loop_gap end to end (its --iters check and '-' cells),
# and the user paths (scripts/gpu_smoke.sh) on the session's tree
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c1; mkdir -p $C
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $C/env.txt 2>&1
p() { echo "$*" >> $C/progress.txt; }
timeout 150 python3 -m scripts.loop_gap --variant mha --shape 4x256 --tiny --warmup 3 --iters 1 > $C/loop_gap_iters1.log 2>&1
p "loop_gap --iters 1 rc=$? (2 expected: refused)"
timeout 200 python3 -m scripts.loop_gap --variant tucker_8_64_64 --against mha --shape 4x256 --tiny --warmup 3 --iters 3 --rounds 2 --out_dir $C/loop_gap > $C/loop_gap.log 2>&1
p "loop_gap tiny rc=$?"
timeout 420 python3 -m pytest -q -rs -p no:cacheprovider tests/test_train.py tests/test_model.py tests/test_arch.py -k "cuda or gpu" > $C/tests_train_model_arch.log 2>&1
p "train/model/arch cuda rc=$?"; tail -1 $C/tests_train_model_arch.log >> $C/progress.txt
timeout 420 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py -k "cuda or gpu or graph" > $C/tests_decode.log 2>&1
p "decode cuda rc=$?"; tail -1 $C/tests_decode.log >> $C/progress.txt
echo 0 > $C/rc.txt
