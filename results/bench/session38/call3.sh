#!/bin/bash
# session 38 call 3: the review mend model.disable_opaque_calls (the not_traced functions' disabled versions put in
# place before StaticDecoder's / bench_decode's compile) on CUDA: test_decode's CUDA and compile tests, test_sample's
# CUDA tests; the compiled decode step against the session's starting tree (.carry/base) in one call.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py tests/test_sample.py \
  -k "cuda or compile or not_traced or dynamo or opaque" > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
ARGS="--variants tucker_8_64_64,mla_shared128 --modes graph_compiled --batches 1 --contexts 4096"
k=1
for tree in new base; do
  if [ $tree = new ]; then dir=.; else dir=.carry/base; fi
  (cd $dir && timeout 150 python3 -m scripts.bench_decode $ARGS --out_dir $D --name decode_${tree}_$k > $D/decode_${tree}_$k.txt 2>&1)
  echo "decode_${tree}_$k rc $?" >> $D/rc.txt; k=$((k+1))
done
(cd $OUT && tar czf c3.tgz c3)
