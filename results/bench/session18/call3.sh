#!/bin/bash
# session 18 call 3: the final tree (fused MLP by default): CUDA tests, graph_merged vs graph_mega, two tile knobs,
# sample.py's loop from a 3,500-token prompt, the barrier profile
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 100 $B --modes graph_merged,graph_mega --name final > $D/final.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_UNITS=8 --name units8 > $D/units8.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.TILE_LM=8192 --name tilelm8k > $D/tilelm8k.log 2>&1
timeout 50 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_final.txt 2>&1
timeout 150 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 1 --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --out_dir $D --name generate_long > $D/generate_long.log 2>&1
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py tests/test_decode.py -k cuda > $D/tests_cuda.log 2>&1; echo "tests rc $?" >> $D/tests_cuda.log
cd $OUT && tar czf c3.tgz c3
