#!/usr/bin/env bash
# Session 55 call 6 (tree in tree.txt): call 5 found the LM head's phase doubling from 2 to 3 sequences (32 -> 64 us a
# step) as its tiles halve (8 -> 4 columns at 4-row blocks). decode_mega.TILE_LM=32768 alone (8 columns at 3-4 rows,
# the tile of 2 rows) against the default, graph_mega at 2-4 sequences, interleaved; then its barrier profile at 3-4.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c6; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
V="--variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64 --contexts 4096 --batches 3,4 --out_dir $D --modes graph_mega"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run base1 $V
run lm32k1 $V --knob decode_mega.TILE_LM=32768
run base2 $V
run lm32k2 $V --knob decode_mega.TILE_LM=32768
for n in base1 lm32k1 base2 lm32k2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
for b in 3 4; do
  timeout 60 python3 -m scripts.profile_mega --barriers --variants tucker_8_64_64 --context 4096 --batch $b \
      --steps 20 --knob decode_mega.TILE_LM=32768 > $D/barriers_lm32k_b$b.txt 2>&1
  echo "barriers b$b rc=$?" >> $O/rc.txt
done
tar -C $O -czf $O/files.tgz files && rm -rf $D
