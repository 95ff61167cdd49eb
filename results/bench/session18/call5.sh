#!/bin/bash
# session 18 call 5: the one-launch step at 2 and 4 sequences (sample.py --num_samples 2 or 4 with --decode=mega)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
timeout 200 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64 --batches 2,4 --contexts 4096,16384 --modes graph_merged,graph_mega --out_dir $D --name batch24 > $D/batch24.log 2>&1
cd $OUT && tar czf c5.tgz c5
