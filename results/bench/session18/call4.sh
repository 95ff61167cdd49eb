#!/bin/bash
# session 18 call 4: after the review's mends: the CUDA tests of decode_mega (the one-launch step against the phases
# and the model, fused and unfused MLP, W_proj^T ahead, batches 1, 3, 4), profile_mega phase by phase and by stamps
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
timeout 240 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
timeout 60 python3 -m scripts.profile_mega --variants tucker_8_64_64,mha --context 4096 > $D/phases.txt 2>&1
timeout 60 python3 -m scripts.profile_mega --variants tucker_8_64_64 --context 4096 --knob decode_mega.FUSED_MLP=False > $D/phases_unfused.txt 2>&1
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers.txt 2>&1
cd $OUT && tar czf c4.tgz c4
