#!/bin/bash
# session 37 call 2: the 12 one-launch cases session 36 left unrun under the tightened check_one_launch (cache
# compared, logits at 1.5e-2, phases at 5e-3): Tucker's knob variants at batch 1, MHA without PRODUCT_2D at 4,
# Tucker shared with one MLP copy at 3, GQA (learned, RoPE) at 1, the wide step at 8 for MHA, GQA, Tucker.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
M=tests/test_decode_mega.py::test_cuda_one_launch_matches_the_phases_and_the_model
W=tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model
timeout 420 python3 -m pytest -v -rs -p no:cacheprovider --durations=14 "${M}[gqa-1-defaults]" "${M}[gqa_rope-1-defaults]" \
  "${M}[mha-4-PRODUCT_2D=False]" "${M}[tucker-1-FUSED_MLP=False]" "${M}[tucker-1-MLP_PROJ_AHEAD=False]" \
  "${M}[tucker-1-MLP_PROJ_AHEAD=True]" "${M}[tucker-1-PRODUCT_2D=False]" "${M}[tucker-1-VEC_AHEAD=False]" \
  "${M}[tucker_shared-3-MLP_COPIES=1]" "${W}[gqa-8]" "${W}[mha-8]" "${W}[tucker-8]" > $D/test_one_launch.txt 2>&1
echo "one_launch rc $?" >> $D/rc.txt
(cd $OUT && tar czf c2.tgz c2)
