#!/usr/bin/env bash
# session 44 call 2: the M67 test (decode='auto' on CUDA replays the graph) on the tree, then against its mutant
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
C=$OUT/c2; mkdir -p $C
T=tests/test_decode.py::test_auto_decodes_through_the_cuda_graph_on_cuda_and_op_by_op_on_the_cpu
timeout 200 python3 -m pytest -q -p no:cacheprovider $T > $C/tree.log 2>&1; echo "tree rc=$?" >> $C/progress.txt
grep -c 'graph = decode in ("graph", "mega") or (decode == "auto" and idx.device.type == "cuda")' model.py >> $C/progress.txt
cp model.py $C/model.py.orig; sed -i 's/graph = decode in ("graph", "mega") or (decode == "auto" and idx.device.type == "cuda")/graph = decode in ("graph", "mega")/' model.py
timeout 200 python3 -m pytest -q -p no:cacheprovider $T > $C/mutant.log 2>&1; echo "mutant rc=$? (1 expected)" >> $C/progress.txt
cp $C/model.py.orig model.py; rm $C/model.py.orig
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_decode.py -k "cuda or graph" > $C/test_decode_cuda.log 2>&1; echo "test_decode cuda/graph rc=$?" >> $C/progress.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_sample.py tests/test_model.py tests/test_train.py tests/test_configurator.py -k "cuda or gpu" > $C/tests_cuda.log 2>&1; echo "sample/model/train/configurator cuda rc=$?" >> $C/progress.txt
echo 0 > $C/rc.txt
