#!/usr/bin/env bash
# Session 55 call 2 (tree in tree.txt): the one-launch step (graph_mega) at 2-4 sequences, 4k cached, GPT-2 (MHA,
# MQA, Tucker [8,64,64], shared, [8,128,128]): its GEMV tiles sized without the rows (decode_mega.TILE counts
# rows x columns x K: at 3-4 rows a tile has a quarter of 1 row's columns and 288-384 tiles for 264 programs).
# Knobs: TILE 65536 / 131072, TILE_LM, MLP_PROJ_AHEAD; graph_default once beside them.
set -u
export PYTHONUNBUFFERED=1
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; D=$O/files; mkdir -p $D
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $D/gpu.txt 2>&1
V="--variants mha,mqa,tucker_8_64_64,tucker_shared_8_64_64,tucker_8_128_128 --contexts 4096 --batches 2,3,4 --out_dir $D"
run() { local name=$1; shift; timeout 100 python3 -m scripts.bench_decode --name $name "$@" > $D/$name.log 2>&1; echo "$name rc=$?" >> $O/rc.txt; }
run m_base $V --modes graph_mega
run m_t64 $V --modes graph_mega --knob decode_mega.TILE=65536
run m_t64lm $V --modes graph_mega --knob decode_mega.TILE=65536 --knob decode_mega.TILE_LM=65536
run m_t128 $V --modes graph_mega --knob decode_mega.TILE=131072 --knob decode_mega.TILE_LM=32768
run m_t64pa $V --modes graph_mega --knob decode_mega.TILE=65536 --knob decode_mega.MLP_PROJ_AHEAD=True
run d_base $V --modes graph_default
run m_base2 $V --modes graph_mega
for n in m_base m_t64 m_t64lm m_t128 m_t64pa d_base m_base2; do
  echo "== $n" >> $O/rc.txt; grep -E '^\| [A-Z]' $D/$n.md | grep -v '^| variant' | cut -d'|' -f2,4,6 >> $O/rc.txt; done
tar -C $O -czf $O/files.tgz files && rm -rf $D
