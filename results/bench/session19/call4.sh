#!/bin/bash
# session 19 call 4: the final tree (VEC_AHEAD on, 32-bit tile offsets): graph_merged vs graph_mega, VEC_AHEAD off,
# CUDA tests, sample.py's loop from a 3,500-token prompt
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c4; mkdir -p $D
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 110 $B --modes graph_merged,graph_mega --name final > $D/final.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.VEC_AHEAD=False --name late > $D/late.log 2>&1
timeout 70 $B --modes graph_mega --name final2 > $D/final2.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_final.txt 2>&1
(cd $OUT && tar czf c4.tgz c4)
cd $R && timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and (tucker-1 or mha-1 or gqa-3 or timed or generate)" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
(cd $OUT && tar czf c4.tgz c4)
cd $R && timeout 120 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64 --modes graph_merged,graph_mega --batches 1 --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --out_dir $D --name generate_long > $D/generate_long.log 2>&1
cd $OUT && tar czf c4.tgz c4
