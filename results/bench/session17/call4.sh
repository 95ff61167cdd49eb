#!/bin/bash
# session 17 call 4: decode_mega with two programs of 4 warps an SM (one program's round trips overlapping the
# other's), and the LM head's bigger tiles, against the defaults, same machine
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
M="python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64,mqa --modes graph_mega --batches 1 --contexts 4096 --out_dir $D"
timeout 70 $M --name mega_default > $D/mega_default.log 2>&1
timeout 90 $M --knob decode_mega.PROGRAMS_PER_SM=2 --knob decode_mega.NUM_WARPS=4 --name mega_2x4 > $D/mega_2x4.log 2>&1
timeout 70 $M --knob decode_mega.TILE_LM=32768 --name mega_lm32k > $D/mega_lm32k.log 2>&1
timeout 70 $M --name mega_default2 > $D/mega_default2.log 2>&1
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.PROGRAMS_PER_SM=2 --knob decode_mega.NUM_WARPS=4 > $D/barriers_2x4.txt 2>&1
cd $OUT && tar czf c4.tgz c4
