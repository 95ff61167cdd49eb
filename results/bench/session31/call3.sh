#!/bin/bash
# session 31 call 3: CUDA tests of the final tree (e58a841: the review mend of MLA's decoupled-RoPE path came after
# session 30's GPU calls): fused_mla_rope's, the 5 of test_decode_mega session 30 did not reach (passed in session 28),
# then graph_step's, train.py's, the fused loss / norm / GELU kernels' and the decode step's, time-stamped.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%H:%M:%S)" "$l"; done; }
timeout 170 python3 -m pytest -v -rs -p no:cacheprovider tests/test_fused_mla_rope.py -k cuda --durations=8 2>&1 \
  | stamp > $D/test_fused_mla_rope.txt; echo "rc ${PIPESTATUS[0]}" >> $D/test_fused_mla_rope.txt
M=tests/test_decode_mega.py::test_cuda_one_launch_matches_the_phases_and_the_model
timeout 140 python3 -m pytest -v -rs -p no:cacheprovider "${M}[tucker_shared-3-defaults]" "${M}[mha-4-FUSED_MLP=False]" \
  "${M}[tucker-1-PRODUCT_2D=False]" "${M}[mha-4-PRODUCT_2D=False]" "${M}[tucker_shared-3-MLP_COPIES=1]" 2>&1 \
  | stamp > $D/test_decode_mega.txt; echo "rc ${PIPESTATUS[0]}" >> $D/test_decode_mega.txt
timeout 200 python3 -m pytest -v -rs -p no:cacheprovider tests/test_graph_step.py tests/test_train.py tests/test_fused_loss.py \
  tests/test_fused_norm.py tests/test_fused_gelu.py tests/test_decode.py -k cuda --durations=8 2>&1 \
  | stamp > $D/test_rest.txt; echo "rc ${PIPESTATUS[0]}" >> $D/test_rest.txt
cd $OUT && tar czf c3.tgz c3
