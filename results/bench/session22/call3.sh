#!/bin/bash
# session 22 call 3: the groups' partials merged in B1 and the epilogue loads hoisted (this tree) against call 2's tree
# (.carry/base = 42b0576) at the same group settings; GROUPS_MERGED=False; MHA twice; CUDA tests; barrier profile.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
timeout 120 python3 -m pytest -q -rs tests/test_decode_wide.py -k cuda > $D/tests_wide.log 2>&1; echo "rc $? $(( $(date +%s) - T0 ))s" >> $D/tests_wide.log
(cd $OUT && tar czf c3.tgz c3)
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --batches 32"
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64,mqa --out_dir $D --name new > $D/new.log 2>&1
(cd .carry/base && timeout 60 $B --variants tucker_8_64_64 --knob decode_wide.ATTN_GROUPS=2 --out_dir $D --name base_tucker > $D/base_tucker.log 2>&1)
(cd .carry/base && timeout 60 $B --variants tucker_shared_8_64_64 --knob decode_wide.BLOCK_N=128 --out_dir $D --name base_shared > $D/base_shared.log 2>&1)
echo "ab done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c3.tgz c3)
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --knob decode_wide.GROUPS_MERGED=False --out_dir $D --name unmerged > $D/unmerged.log 2>&1
timeout 60 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --out_dir $D --name new_repeat > $D/new_repeat.log 2>&1
(cd $OUT && tar czf c3.tgz c3)
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,tucker_shared_8_64_64 --batch 32 --context 16384 > $D/barriers.txt 2>&1
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha2 > $D/mha2.log 2>&1
echo "all done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c3.tgz c3)
