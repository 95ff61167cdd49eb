#!/bin/bash
# session 20 call 1: decode_mega's PRODUCT_2D (the GEMV tiles' products in the weights' own layout) and MLP_COPIES
# against the defaults, batch 1, 4k; the barrier stamps; the CUDA tests of both knobs
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
R=$PWD; D=$OUT/c1; mkdir -p $D; git log --oneline -1 > $D/commit.txt 2>&1
V=mha,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096 --out_dir $D"
K=decode_mega.PRODUCT_2D=True
timeout 80 $B --modes graph_merged,graph_mega --name base > $D/base.log 2>&1
timeout 60 $B --modes graph_mega --knob $K --name p2d > $D/p2d.log 2>&1
timeout 60 $B --modes graph_mega --knob $K --knob decode_mega.MLP_COPIES=4 --name p2d_c4 > $D/p2d_c4.log 2>&1
timeout 60 $B --modes graph_mega --knob decode_mega.MLP_COPIES=4 --name c4 > $D/c4.log 2>&1
timeout 60 $B --modes graph_merged,graph_mega --name base2 > $D/base2.log 2>&1
timeout 60 $B --modes graph_mega --knob $K --name p2d2 > $D/p2d2.log 2>&1
(cd $OUT && tar czf c1.tgz c1)
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob $K > $D/barriers_p2d.txt 2>&1
(cd $OUT && tar czf c1.tgz c1)
cd $R && timeout 100 python3 -m pytest -q -rs tests/test_decode_mega.py -k "cuda and (PRODUCT_2D or MLP_COPIES)" > $D/tests.log 2>&1; echo "tests rc $?" >> $D/tests.log
cd $OUT && tar czf c1.tgz c1
