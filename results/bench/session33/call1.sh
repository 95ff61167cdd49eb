#!/bin/bash
# session 33 call 1: the README's main job on a GPU (its "seconds on a GPU" had never been measured), sample.py's decode
# modes on the trained models (greedy text compared across eager / graph / mega / uncached, tokens/s), GPT-2 124M Tucker
# on Shakespeare compiled (ms/iter), and a run interrupted at 150 iterations and resumed on the GPU against one straight run.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'; nproc; } > $D/env.txt 2>&1
stamp() { date +%s.%N; }
# 1. the main job, its three commands as README.md gives them (pip omitted: the machine has torch 2.11 and no network)
t0=$(stamp); python3 -m data.shakespeare.prepare > $D/main_prepare.txt 2>&1; echo "rc $?" >> $D/main_prepare.txt
t1=$(stamp); python3 train.py config/quickstart_tucker.py > $D/main_train.txt 2>&1; echo "rc $?" >> $D/main_train.txt
t2=$(stamp); python3 sample.py --out_dir=out-quickstart-tucker --num_samples=2 --max_new_tokens=100 > $D/main_sample.txt 2>&1; echo "rc $?" >> $D/main_sample.txt
t3=$(stamp)
python3 - "$t0" "$t1" "$t2" "$t3" > $D/main_times.txt <<'PY'
import sys; t = [float(a) for a in sys.argv[1:]]
print(f"prepare {t[1]-t[0]:.1f} s, train {t[2]-t[1]:.1f} s, sample {t[3]-t[2]:.1f} s, total {t[3]-t[0]:.1f} s")
PY
cp out-quickstart-tucker/summary.json $D/quickstart_summary.json 2>/dev/null
# 2. greedy samples of the quickstart model in every decode mode
for m in eager graph mega; do
  timeout 120 python3 sample.py --out_dir=out-quickstart-tucker --temperature=0 --num_samples=3 --max_new_tokens=100 --start=ROMEO: --decode=$m > $D/qs_$m.out 2> $D/qs_$m.err; echo "rc $?" >> $D/qs_$m.err
done
timeout 120 python3 sample.py --out_dir=out-quickstart-tucker --temperature=0 --num_samples=1 --max_new_tokens=100 --start=ROMEO: --use_cache=False > $D/qs_uncached.out 2> $D/qs_uncached.err
# 3. GPT-2 124M Tucker [8,64,64] on Shakespeare, compiled: 300 straight, and 150 then resumed to 300
C="config/shakespeare_tucker.py --compile=True --eval_interval=50 --always_save_checkpoint=True"
timeout 200 python3 train.py $C --max_iters=300 --out_dir=out-st-a > $D/st_a.txt 2>&1; echo "rc $?" >> $D/st_a.txt
timeout 150 python3 train.py $C --max_iters=150 --out_dir=out-st-b > $D/st_b1.txt 2>&1; echo "rc $?" >> $D/st_b1.txt
timeout 150 python3 train.py $C --max_iters=300 --out_dir=out-st-b --init_from=resume > $D/st_b2.txt 2>&1; echo "rc $?" >> $D/st_b2.txt
for r in a b; do cp out-st-$r/log.jsonl $D/st_${r}_log.jsonl; cp out-st-$r/summary.json $D/st_${r}_summary.json; done
# 4. greedy samples of the trained 124M Tucker in every decode mode
for m in eager graph mega; do
  timeout 120 python3 sample.py --out_dir=out-st-a --temperature=0 --num_samples=3 --max_new_tokens=200 --start=ROMEO: --decode=$m > $D/st_$m.out 2> $D/st_$m.err; echo "rc $?" >> $D/st_$m.err
done
(cd $OUT && tar czf c1.tgz c1)
