#!/bin/bash
# session 17 call 3: decode_linear's tensor-core kernel for 5..64 rows (the batch-8/32 decode step's matmuls with
# their norms, GELU and residual adds, PDL) against cuBLAS + add_norm (DOT_ROWS=0: the tree before), same machine
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
timeout 240 python3 -m pytest -q -rs -x tests/test_decode_linear.py -k cuda > $D/tests_linear.log 2>&1; echo "tests rc $?" >> $D/tests_linear.log
timeout 150 python3 -m pytest -q -rs -x tests/test_decode.py -k cuda > $D/tests_decode.log 2>&1; echo "tests rc $?" >> $D/tests_decode.log
V=mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64
timeout 170 python3 -m scripts.bench_decode --variants $V --modes graph_merged --batches 8,32 --contexts 4096,16384 --knob decode_linear.DOT_ROWS=0 --out_dir $D --name dot_base > $D/dot_base.log 2>&1
timeout 170 python3 -m scripts.bench_decode --variants $V --modes graph_merged --batches 8,32 --contexts 4096,16384 --out_dir $D --name dot_new > $D/dot_new.log 2>&1
cd $OUT && tar czf c3.tgz c3
