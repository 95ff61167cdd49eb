#!/usr/bin/env bash
# Session 47 call 1: the CUDA tests of every file but decode_mega / decode_wide (call 2) on today's tree, in groups at
# once (one H200); gpu_session.sh's stage check on a GPU machine; train.py's evaluation progress on the GPU.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c1; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $O/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $O/gpu.txt 2>&1
P="python3 -m pytest -q -rs -p no:cacheprovider --durations=10"
$P tests/test_decode.py tests/test_decode_attention.py tests/test_decode_linear.py -k cuda > $O/group_b.log 2>&1 & B=$!
$P tests/test_graph_step.py tests/test_train.py tests/test_fused_loss.py tests/test_fused_norm.py tests/test_fused_gelu.py \
   tests/test_fused_mla_rope.py tests/test_fused_sample.py tests/test_master_adamw.py tests/test_model.py \
   tests/test_chunked_loss.py tests/test_gpu_clock.py tests/test_gpu_smoke.py tests/test_convert.py tests/test_eval.py \
   tests/test_bench_decode_kernel.py tests/test_kernels_compile.py tests/test_data.py tests/test_bench_rope.py \
   -k "cuda or gpu" > $O/group_c.log 2>&1
C=$?
$P tests/test_sample.py > $O/group_d.log 2>&1; D=$?
# gpu_session.sh on a GPU machine: a misspelt stage refused before anything runs (exit 2), a known one runs
{ OUT=$O/gs WORK=$O/gsw bash scripts/gpu_session.sh tests_step decod; echo "rc=$?"; ls $O/gs $O/gsw 2>&1; } > $O/gpu_session_check.log 2>&1
# train.py's progress lines on the GPU: the interval set to 0 through a wrapper (every batch reported)
python3 -m data.shakespeare.prepare --input $TUCKER_SHAKESPEARE_TXT --tokenizer $TUCKER_GPT2_TIKTOKEN --out_dir /tmp/shk > $O/prep.log 2>&1
python3 - > $O/eval_progress.log 2>&1 <<'PY'
import evaluate, train
evaluate.PROGRESS_EVERY_S = 0.0
train.main(["config/shakespeare_tucker.py", "--data_dir=/tmp/shk", "--out_dir=/tmp/ev", "--max_iters=2", "--eval_interval=2",
            "--eval_full_val=True", "--eval_iters=2", "--block_size=64", "--batch_size=64", "--compile=False"])
PY
echo "eval_progress rc=$? lines=$(grep -c '^evaluating' $O/eval_progress.log)" >> $O/eval_progress.log
wait $B; B=$?
echo "b=$B c=$C d=$D" > $O/rc.txt
for f in $O/group_*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt
rm -rf $O/gs $O/gsw
