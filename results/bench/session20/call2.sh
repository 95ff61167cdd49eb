#!/bin/bash
# session 20 call 2: the defaults after PRODUCT_2D (decode_mega), every batch-1 variant at 4k and 16k; decode_linear's
# PRODUCT_2D (the default path's products) A/B; MLP_COPIES=4 again; barrier stamps; sample.py's loop
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c2; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
V=mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --batches 1 --out_dir $D"
timeout 120 $B --variants $V --contexts 4096,16384 --modes graph_merged,graph_mega --name final > $D/final.log 2>&1
timeout 70 $B --variants $V --contexts 4096 --modes graph_merged --knob decode_linear.PRODUCT_2D=True --name dl2d > $D/dl2d.log 2>&1
timeout 60 $B --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --contexts 4096 --modes graph_mega --knob decode_mega.MLP_COPIES=4 --name copies4 > $D/copies4.log 2>&1
timeout 60 $B --variants $V --contexts 4096 --modes graph_merged,graph_mega --name final2 > $D/final2.log 2>&1
timeout 60 $B --variants $V --contexts 4096 --modes graph_merged --knob decode_linear.PRODUCT_2D=True --name dl2d_2 > $D/dl2d_2.log 2>&1
timeout 50 $B --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --contexts 4096 --modes graph_mega --knob decode_mega.MLP_COPIES=4 --name copies4_2 > $D/copies4_2.log 2>&1
(cd $OUT && tar czf c2.tgz c2)
timeout 45 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_final.txt 2>&1
(cd $OUT && tar czf c2.tgz c2)
timeout 100 $B --variants mha,tucker_8_64_64 --modes graph_merged,graph_mega --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph,mega --name generate_long > $D/generate_long.log 2>&1
cd $OUT && tar czf c2.tgz c2
