#!/bin/bash
# session 22 call 2: decode_wide's B1 in groups of rows a warp each (ATTN_GROUPS=4, default) against decode_mega's
# splits (ATTN_GROUPS=1), batch 32 and 8 at 16k; rows a step 128 with groups; the barrier profile; MHA twice.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
timeout 120 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c2.tgz c2)
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --out_dir $D"
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 90 $B --variants tucker_8_64_64,tucker_shared_8_64_64,mqa --batches 8,32 --name groups4 > $D/groups4.log 2>&1
(cd $OUT && tar czf c2.tgz c2)
timeout 90 $B --variants tucker_8_64_64,tucker_shared_8_64_64,mqa --batches 8,32 --knob decode_wide.ATTN_GROUPS=1 --name groups1 > $D/groups1.log 2>&1
echo "groups done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c2.tgz c2)
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --batches 32 --knob decode_wide.BLOCK_N=128 --name groups4_rows128 > $D/groups4_rows128.log 2>&1
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --batches 32 --knob decode_wide.ATTN_GROUPS=2 --name groups2 > $D/groups2.log 2>&1
(cd $OUT && tar czf c2.tgz c2)
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 > $D/barriers.txt 2>&1
echo "profile done $(( $(date +%s) - T0 ))s" >> $D/times.txt
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --batches 32 --name groups4_repeat > $D/groups4_repeat.log 2>&1
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1
echo "all done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c2.tgz c2)
