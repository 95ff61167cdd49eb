#!/bin/bash
# session 17 call 11: sample.py's loop (model.generate, 500 greedy tokens) from a 3,500-token prompt, decode='graph'
# against decode='mega' (the contexts 3,500-4,000, where the one-launch step leads)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c11; mkdir -p $D
timeout 400 python3 -m scripts.bench_decode --variants mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged,graph_mega --batches 1 --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --out_dir $D --name generate_long > $D/generate_long.log 2>&1
cd $OUT && tar czf c11.tgz c11
