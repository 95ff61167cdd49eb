#!/bin/bash
# session 20 call 3: CUDA tests after decode_linear.PRODUCT_2D and MLP_COPIES=4 became defaults; the barrier stamps
# with each program's SM (dumped); MLP_UNITS=8 and TILE_LM=8192 against the defaults
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c3; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --batches 1 --contexts 4096 --out_dir $D"
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 --dump $D > $D/barriers.txt 2>&1
timeout 90 $B --variants $V --modes graph_merged,graph_mega --name final > $D/final.log 2>&1
timeout 50 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --knob decode_mega.MLP_UNITS=8 --name units8 > $D/units8.log 2>&1
timeout 50 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --knob decode_mega.TILE_LM=8192 --name lm8k > $D/lm8k.log 2>&1
timeout 50 $B --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --name final_b > $D/final_b.log 2>&1
(cd $OUT && tar czf c3.tgz c3)
cd $R && timeout 150 python3 -m pytest -q -rs tests/test_decode_linear.py tests/test_decode.py -k cuda > $D/tests_linear.log 2>&1; echo "tests rc $?" >> $D/tests_linear.log
(cd $OUT && tar czf c3.tgz c3)
cd $R && timeout 170 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and (timed or tucker-1-defaults or mha-1-defaults or MLP_COPIES or PRODUCT_2D or generate)" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c3.tgz c3
