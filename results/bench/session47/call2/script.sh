#!/usr/bin/env bash
# Session 47 call 2: decode_mega's and decode_wide's CUDA tests on today's tree (four processes at once on the one
# H200), the stage-check test mended after call 1, and train.py's evaluation progress on the GPU (call 1 ran out of
# time before it).
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; mkdir -p $O
P="python3 -m pytest -q -rs -p no:cacheprovider --durations=5"
W="tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model"
$P tests/test_decode_mega.py -k "cuda and not sass" > $O/mega.log 2>&1 & M=$!
$P "$W[tucker-32]" "$W[tucker_shared-32]" "$W[mha-8]" "$W[gqa-8]" "$W[mqa-32]" "$W[tucker-8]" \
   tests/test_decode_wide.py::test_cuda_wide_timed_step_stamps_every_barrier_in_order > $O/wide1.log 2>&1 & W1=$!
$P "$W[mla_shared-32]" "$W[mla-8]" "$W[tucker_rope-32]" "$W[mha_rope-8]" "$W[tucker_shared_rope-32]" "$W[mla_latent-8]" \
   > $O/wide2.log 2>&1 & W2=$!
$P tests/test_gpu_smoke.py tests/test_decode_mega.py -k "sass or gpu_session or refuse" > $O/smoke_sass.log 2>&1; S=$?
python3 -m data.shakespeare.prepare --input $TUCKER_SHAKESPEARE_TXT --tokenizer $TUCKER_GPT2_TIKTOKEN --out_dir /tmp/shk > $O/prep.log 2>&1
python3 - > $O/eval_progress.log 2>&1 <<'PY'
import evaluate, train
evaluate.PROGRESS_EVERY_S = 0.0  # every batch reported (the default: every 30 s)
train.main(["config/shakespeare_tucker.py", "--data_dir=/tmp/shk", "--out_dir=/tmp/ev", "--max_iters=2", "--eval_interval=2",
            "--eval_full_val=True", "--eval_iters=2", "--block_size=64", "--batch_size=64", "--compile=False"])
PY
echo "eval_progress rc=$? lines=$(grep -c '^evaluating' $O/eval_progress.log)" >> $O/eval_progress.log
echo "smoke_sass=$S" > $O/rc.txt
wait $W1; echo "wide1=$?" >> $O/rc.txt; wait $W2; echo "wide2=$?" >> $O/rc.txt; wait $M; echo "mega=$?" >> $O/rc.txt
for f in $O/*.log; do echo "$f: $(tail -1 $f)"; done >> $O/rc.txt
