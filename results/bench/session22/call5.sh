#!/bin/bash
# session 22 call 5: more programs an SM for B1's sake: 3 programs at 168 registers, 4 at 128 (3 stages), against
# the defaults (2 programs, up to 255 registers), Tucker and Tucker shared at batch 32 / 16k; MHA's default step.
export PYTHONUNBUFFERED=1
D=$OUT/c5; mkdir -p $D
nvidia-smi --query-gpu=name --format=csv > $D/gpu.txt
T0=$(date +%s)
B="python3 -m scripts.bench_decode --modes graph_mega --contexts 16384 --batches 32 --out_dir $D --variants tucker_8_64_64,tucker_shared_8_64_64"
timeout 40 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 --out_dir $D --name mha1 > $D/mha1.log 2>&1
timeout 60 $B --name default > $D/default.log 2>&1
(cd $OUT && tar czf c5.tgz c5)
timeout 80 $B --knob decode_wide.PROGRAMS_PER_SM=3 --knob decode_wide.MAXNREG=168 --name p3r168 > $D/p3r168.log 2>&1
echo "p3 done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c5.tgz c5)
timeout 80 $B --knob decode_wide.PROGRAMS_PER_SM=4 --knob decode_wide.MAXNREG=128 --knob decode_wide.STAGES=3 --name p4r128s3 > $D/p4r128s3.log 2>&1
echo "p4 done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c5.tgz c5)
timeout 60 $B --name default_repeat > $D/default_repeat.log 2>&1
echo "all done $(( $(date +%s) - T0 ))s" >> $D/times.txt
(cd $OUT && tar czf c5.tgz c5)
