#!/bin/bash
# session 18 call 6: the barrier's poll as two staggered relaxed loads in flight (decode_mega.POLL=N ns), against
# the compare-and-swap loop (POLL=0), same machine; the one-launch test with it
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
D=$OUT/c6; mkdir -p $D
timeout 150 python3 .carry/calls/poll_check.py > $D/poll_check.log 2>&1; echo "rc $?" >> $D/poll_check.log
V=mha,mqa,tucker_8_64_64,tucker_shared_8_64_64
B="python3 -m scripts.bench_decode --variants $V --batches 1 --contexts 4096,16384 --modes graph_mega --out_dir $D"
timeout 60 $B --name poll0 > $D/poll0.log 2>&1
timeout 60 $B --knob decode_mega.POLL=100 --name poll100 > $D/poll100.log 2>&1
timeout 60 $B --knob decode_mega.POLL=250 --name poll250 > $D/poll250.log 2>&1
timeout 60 $B --name poll0b > $D/poll0b.log 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --knob decode_mega.POLL=100 > $D/barriers_poll100.txt 2>&1
timeout 40 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 > $D/barriers_poll0.txt 2>&1
cd $OUT && tar czf c6.tgz c6
