#!/bin/bash
# session 19 call 3: decode_mega's MLP row in chunks (MLP_CHUNK 256, default) against one padded block (0), same machine;
# stamps; CUDA tests
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c3; mkdir -p $D
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 100 $B --modes graph_merged,graph_mega --knob decode_mega.MLP_CHUNK=0 --name block > $D/block.log 2>&1
timeout 70 $B --modes graph_mega --name chunks > $D/chunks.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_CHUNK=0 --name block2 > $D/block2.log 2>&1
timeout 100 $B --modes graph_merged,graph_mega --name chunks2 > $D/chunks2.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_chunks.txt 2>&1
(cd $OUT && tar czf c3.tgz c3)
cd $R && timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and (tucker-1 or gqa-3 or timed or generate)" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c3.tgz c3
