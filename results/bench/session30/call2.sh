#!/bin/bash
# session 30 call 2: the CUDA tests call 1's limits did not reach (the last 4 of test_decode_wide and of
# test_decode_mega, the last 2 of test_master_adamw), time-stamped.
export PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%H:%M:%S)" "$l"; done; }
M=tests/test_decode_mega.py::test_cuda_
W=tests/test_decode_wide.py::test_cuda_wide_
timeout 400 python3 -m pytest -v -rs -p no:cacheprovider \
  "${W}one_launch_matches_the_phases_and_the_model[mha_rope-8]" \
  "${W}one_launch_matches_the_phases_and_the_model[tucker_shared_rope-32]" \
  "${W}one_launch_matches_the_phases_and_the_model[mla_latent-8]" \
  "${W}timed_step_stamps_every_barrier_in_order" \
  "${M}one_launch_matches_the_phases_and_the_model[tucker-1-MLP_PROJ_AHEAD=False]" \
  "${M}timed_step_stamps_every_barrier_in_order" "${M}generate_with_the_step_kernel" \
  "${M}more_programs_than_resident_are_refused" \
  tests/test_master_adamw.py::test_cuda_capture_with_a_float_lr_is_refused \
  tests/test_master_adamw.py::test_cuda_train_py_master_weights_graphed_plain_and_autocast \
  --durations=12 2>&1 | stamp > $D/tests.txt
echo "rc ${PIPESTATUS[0]}" >> $D/tests.txt
cd $OUT && tar czf c2.tgz c2
