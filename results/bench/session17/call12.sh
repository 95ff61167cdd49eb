#!/bin/bash
# session 17 call 12: decode_mega's barrier arrivals over 1, 2, 4, 8 counters
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c12; mkdir -p $D
M="python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega --batches 1 --contexts 4096 --out_dir $D"
for nc in 1 4 2 8 1; do
  timeout 70 $M --knob decode_mega.SYNC_COUNTERS=$nc --name mega_nc${nc}_$RANDOM > $D/mega_nc$nc.log 2>&1
done
timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.SYNC_COUNTERS=4 > $D/barriers_nc4.txt 2>&1
cd $OUT && tar czf c12.tgz c12
