#!/bin/bash
# session 36 call 6: more of the one-launch cases under the tightened check (call 5 ran 12 of 34), the variants
# whose paths differ most, within the device budget left: batch 1 MLA, MLA shared, MHA RoPE, Tucker RoPE, MQA,
# Tucker shared; the wide step at 32 for MQA, MLA shared, Tucker RoPE, Tucker shared.
export PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
M=tests/test_decode_mega.py::test_cuda_one_launch_matches_the_phases_and_the_model
W=tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model
timeout 250 python3 -m pytest -v -rs -p no:cacheprovider --durations=12 "${M}[mla-1-defaults]" "${M}[mla_shared-1-defaults]" \
  "${M}[mha_rope-1-defaults]" "${M}[tucker_rope-1-defaults]" "${W}[mqa-32]" "${W}[mla_shared-32]" "${W}[tucker_rope-32]" \
  "${W}[tucker_shared-32]" "${M}[mqa-1-defaults]" "${M}[tucker_shared-1-defaults]" > $D/test_one_launch.txt 2>&1
echo "one_launch rc $?" >> $D/rc.txt
(cd $OUT && tar czf c6.tgz c6)
