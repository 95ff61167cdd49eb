#!/bin/bash
# session 30 call 4 (issue 14): our MHA step (graph_step, master weights, the final tree) against nanoGPT's model in its
# own loop, alternating rounds (scripts/loop_gap), 12x1024 then 64x256 as far as the device time left reaches.
export PYTHONUNBUFFERED=1
D=$OUT/c4; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
for s in 12x1024:215 64x256:185; do
  shape=${s%%:*}; lim=${s##*:}
  timeout $lim python3 -m scripts.loop_gap --variant mha --shape $shape --graph_step --master_weights --rounds 5 \
      --iters 4 --nanogpt .carry/nanogpt --out_dir $D --name loop_gap_$shape > $D/log_loop_gap_$shape.txt 2>&1
  echo "rc $?" >> $D/log_loop_gap_$shape.txt
  (cd $OUT && tar czf c4.tgz c4)
done
