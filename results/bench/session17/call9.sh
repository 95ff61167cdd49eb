#!/bin/bash
# session 17 call 9: the reread's mend (_barrier_tile): CUDA tests, and graph_mega against graph_merged again
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c9; mkdir -p $D
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
timeout 150 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 1 --contexts 4096,16384 --out_dir $D --name mega_final > $D/mega_final.log 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers_final.txt 2>&1
timeout 60 python3 -m scripts.profile_mega --variants tucker_8_64_64 --context 4096 > $D/phases_final.txt 2>&1
cd $OUT && tar czf c9.tgz c9
