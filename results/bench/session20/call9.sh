#!/bin/bash
# session 20 call 9: the LLaMA-3 1B rows at batch 1 / 4k (graph_merged) with decode_linear's products in the weights'
# layout (the default since 80f96d0) and without; the GPT-2 batch-32 rows at 16k (decode_linear does not serve them)
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c9; mkdir -p $D
B="python3 -m scripts.bench_decode --suite llama1b --modes graph_merged --batches 1 --contexts 4096 --out_dir $D"
timeout 150 $B --name llama_2d > $D/llama_2d.log 2>&1
timeout 130 $B --knob decode_linear.PRODUCT_2D=False --name llama_3d > $D/llama_3d.log 2>&1
(cd $OUT && tar czf c9.tgz c9)
timeout 150 python3 -m scripts.bench_decode --variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name b32 > $D/b32.log 2>&1
cd $OUT && tar czf c9.tgz c9
