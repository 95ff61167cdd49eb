#!/bin/bash
# session 20 call 5: decode_mega.MLP_L2 1 / 2 and one program of 8 warps an SM against the defaults (batch 1, 4k)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c5; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
B="python3 -m scripts.bench_decode --batches 1 --contexts 4096 --out_dir $D --variants mha,tucker_8_64_64,tucker_shared_8_64_64"
timeout 70 $B --modes graph_merged,graph_mega --name base > $D/base.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_L2=1 --name l2_1 > $D/l2_1.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_L2=2 --name l2_2 > $D/l2_2.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.NUM_WARPS=8 --knob decode_mega.PROGRAMS_PER_SM=1 --name w8 > $D/w8.log 2>&1
timeout 50 $B --modes graph_merged,graph_mega --name base2 > $D/base2.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_L2=1 --name l2_1b > $D/l2_1b.log 2>&1
timeout 50 $B --modes graph_mega --knob decode_mega.MLP_L2=2 --name l2_2b > $D/l2_2b.log 2>&1
(cd $OUT && tar czf c5.tgz c5)
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.MLP_L2=2 > $D/barriers_l2_2.txt 2>&1
(cd $OUT && tar czf c5.tgz c5)
cd $R && timeout 60 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and MLP_L2" > $D/tests.log 2>&1; echo "tests rc $?" >> $D/tests.log
cd $OUT && tar czf c5.tgz c5
