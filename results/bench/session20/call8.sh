#!/bin/bash
# session 20 call 8: the final tree: every batch-1 variant at 4k and 16k (graph_merged, graph_mega), twice at 4k;
# sample.py's loop from a 3,500-token prompt; stamps; CUDA tests of decode_mega
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c8; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --batches 1 --out_dir $D"
timeout 110 $B --variants $V --contexts 4096,16384 --modes graph_merged,graph_mega --name final > $D/final.log 2>&1
timeout 60 $B --variants $V --contexts 4096 --modes graph_merged,graph_mega --name final2 > $D/final2.log 2>&1
(cd $OUT && tar czf c8.tgz c8)
timeout 100 $B --variants mha,tucker_8_64_64 --modes graph_merged,graph_mega --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --name generate_long > $D/generate_long.log 2>&1
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_final.txt 2>&1
(cd $OUT && tar czf c8.tgz c8)
cd $R && timeout 215 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and (defaults or MLP_PROJ_AHEAD or timed or generate)" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c8.tgz c8
