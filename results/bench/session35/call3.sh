#!/bin/bash
# session 35 call 3: fused_sample.argmax (greedy decoding's token in one Triton kernel, sample_next's default on CUDA
# at temperature 0): its CUDA tests and the sampling / graph tests of test_decode.py; bench_sample (the greedy kernel
# against torch.argmax, blocks swept); bench_decode's generate rows greedy and sampled (graph), and greedy in the
# one-launch step (mega); sample.py greedy and at its defaults on a Tucker checkpoint.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 100 python3 -m pytest -v -rs tests/test_fused_sample.py > $D/test_fused_sample.txt 2>&1
timeout 90 python3 -m pytest -v -rs tests/test_decode.py -k "sample or generat or graph" > $D/test_decode.txt 2>&1
timeout 60 python3 -m scripts.bench_sample --out_dir $D --batches 1,2,4,8,32 --sweep "BLOCK=256,1024,2048,4096" > $D/bench_sample.log 2>&1
for t in 0 0.8; do
  timeout 80 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
    --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes graph --temperature $t --iters 50 \
    --out_dir $D --name generate_t$t > $D/generate_t$t.log 2>&1
done
timeout 80 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph --batches 1 \
  --contexts 4096 --generate 500 --generate_prompt 3500 --generate_modes mega --temperature 0 --iters 20 \
  --out_dir $D --name generate_mega_t0 > $D/generate_mega_t0.log 2>&1
python3 -m data.shakespeare.prepare > /dev/null 2>&1
timeout 50 python3 train.py config/shakespeare_tucker.py --max_iters=1 --eval_interval=1 --always_save_checkpoint=True \
  --block_size=1024 --batch_size=4 --eval_full_val=False --eval_iters=1 --out_dir=out-ck-tucker > $D/ck_tucker.txt 2>&1
timeout 40 python3 sample.py --out_dir=out-ck-tucker --num_samples=3 --max_new_tokens=500 --temperature=0 > $D/sample_t0.out 2> $D/sample_t0.err
timeout 40 python3 sample.py --out_dir=out-ck-tucker --num_samples=3 --max_new_tokens=500 --temperature=0 --decode=eager > $D/sample_t0_eager.out 2> $D/sample_t0_eager.err
cmp $D/sample_t0.out $D/sample_t0_eager.out > $D/sample_t0_cmp.txt 2>&1; echo "cmp rc $?" >> $D/sample_t0_cmp.txt
timeout 40 python3 sample.py --out_dir=out-ck-tucker --num_samples=3 --max_new_tokens=500 > $D/sample.out 2> $D/sample.err
rm -rf out-ck-*
(cd $OUT && tar czf c3.tgz c3)
