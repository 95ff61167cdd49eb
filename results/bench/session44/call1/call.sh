#!/usr/bin/env bash
# session 44 call 1: the user paths on the GPU after train.py's fail() change (scripts/gpu_smoke.sh), and torchrun
# with more processes than GPUs / a bad key, to see the one error line
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c1; mkdir -p $C
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } > $C/env.txt 2>&1
OUT=$C bash scripts/gpu_smoke.sh > $C/smoke.log 2>&1
echo "smoke done" >> $C/progress.txt
D=$C/smoke/data
for n in 2 3; do
  timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node=$n train.py --data_dir=$D --out_dir=$C/np$n \
     --n_layer=2 --n_head=4 --n_embd=64 --block_size=64 --max_iters=2 --device=cuda > $C/nproc$n.log 2>&1
  echo "nproc $n rc=$?" >> $C/progress.txt
done
timeout 120 python3 -m torch.distributed.run --standalone --nproc_per_node=1 train.py --data_dir=$D --out_dir=$C/bad \
     --n_layer=0 > $C/badkey.log 2>&1
echo "badkey rc=$?" >> $C/progress.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_train.py -k "cuda or gpu" > $C/test_train_cuda.log 2>&1
echo "test_train cuda rc=$?" >> $C/progress.txt
echo 0 > $C/rc.txt
