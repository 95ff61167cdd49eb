#!/bin/bash
# session 19 call 2: MLP_L2 (the layer's MLP weights into L2 during B1) on/off, LM_L2 2/4, same machine; stamps; CUDA tests
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c2; mkdir -p $D
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --out_dir $D"
timeout 100 $B --modes graph_merged,graph_mega --knob decode_mega.MLP_L2=False --name nol2 > $D/nol2.log 2>&1
timeout 70 $B --modes graph_mega --name l2 > $D/l2.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.LM_L2=2 --name lm2 > $D/lm2.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.LM_L2=4 --name lm4 > $D/lm4.log 2>&1
timeout 70 $B --modes graph_mega --knob decode_mega.MLP_L2=False --name nol2b > $D/nol2b.log 2>&1
timeout 100 $B --modes graph_merged,graph_mega --name l2b > $D/l2b.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64,mha --context 4096 > $D/barriers_l2.txt 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.LM_L2=2 > $D/barriers_lm2.txt 2>&1
cd $OUT && tar czf c2.tgz c2
timeout 170 python3 -m pytest -q -rs tests/test_decode_mega.py -k "one_launch and (tucker-1-defaults or L2 or VEC_AHEAD or gqa-3-defaults)" > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c2.tgz c2
