#!/bin/bash
# session 38 call 1: the lazy registration of the Triton ops (registered at import where CUDA is, as before) and
# model.not_traced (torch.compiler.disable made at the first traced call) on CUDA: the CUDA tests of the files they
# touch; then the compiled decode step (graph_compiled, through not_traced) and the default one against the
# session's starting tree (.carry/base, 5e01ce8) in the same call, Tucker at batch 1 and 4k cached.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $D/gpu.txt 2>&1
timeout 300 python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_loss.py tests/test_fused_gelu.py \
  tests/test_fused_mla_rope.py tests/test_graph_step.py tests/test_decode.py -k "cuda or compile or not_traced or dynamo or graph" \
  > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
ARGS="--variants tucker_8_64_64 --modes graph,graph_compiled --batches 1 --contexts 4096"
k=1
for tree in new base; do
  if [ $tree = new ]; then dir=.; else dir=.carry/base; fi
  (cd $dir && timeout 140 python3 -m scripts.bench_decode $ARGS --out_dir $D --name decode_${tree}_$k > $D/decode_${tree}_$k.txt 2>&1)
  echo "decode_${tree}_$k rc $?" >> $D/rc.txt; k=$((k+1))
done
(cd $OUT && tar czf c1.tgz c1)
