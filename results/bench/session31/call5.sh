#!/bin/bash
# session 31 call 5: the rest of the CUDA tests on the session's final tree (decode code unchanged since they last
# passed): the flash-decoding kernel and the decode step's linear kernel, then the one-launch wide step, time-stamped.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%H:%M:%S)" "$l"; done; }
timeout 200 python3 -m pytest -v -rs -p no:cacheprovider tests/test_decode_attention.py tests/test_decode_linear.py -k cuda \
  --durations=8 2>&1 | stamp > $D/test_decode_kernels.txt; echo "rc ${PIPESTATUS[0]}" >> $D/test_decode_kernels.txt
timeout 220 python3 -m pytest -v -rs -p no:cacheprovider tests/test_decode_wide.py -k cuda 2>&1 \
  | stamp > $D/test_decode_wide.txt; echo "rc ${PIPESTATUS[0]}" >> $D/test_decode_wide.txt
cd $OUT && tar czf c5.tgz c5
