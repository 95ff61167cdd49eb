#!/bin/bash
# session 18 call 7: the fused MLP over a row held as two blocks of columns (MLP_SPLIT_ROW: 768 = 512 + 256, no
# padding), its W_proj^T tile ahead or not, against one padded block of 1,024 (the tree before), same machine
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c7; mkdir -p $D
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --modes graph_mega --out_dir $D"
timeout 60 $B --knob decode_mega.MLP_SPLIT_ROW=False --name padded > $D/padded.log 2>&1
timeout 60 $B --name split > $D/split.log 2>&1
timeout 60 $B --knob decode_mega.MLP_PROJ_AHEAD=True --name split_ahead > $D/split_ahead.log 2>&1
timeout 60 $B --knob decode_mega.MLP_SPLIT_ROW=False --name padded2 > $D/padded2.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers_split.txt 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.MLP_PROJ_AHEAD=True > $D/barriers_split_ahead.txt 2>&1
timeout 200 python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda > $D/tests_mega.log 2>&1; echo "tests rc $?" >> $D/tests_mega.log
cd $OUT && tar czf c7.tgz c7
