#!/bin/bash
# session 25 call 1: the review mends' CUDA tests (9c5850a int64 offsets, 5f894d3 device_problem / forward restructure),
# the MLA RoPE kernels' speed after them, and MLA's decoupled attention on flash (v padded to 96) and on the
# efficient backend against cuDNN's default, same call.
export PYTHONUNBUFFERED=1
D=$OUT/c1; mkdir -p $D
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $D/gpu.txt 2>&1
timeout 150 python3 -m pytest -q tests/test_fused_mla_rope.py tests/test_fused_gelu.py tests/test_fused_loss.py tests/test_decode_attention.py -k cuda > $D/cuda_tests.txt 2>&1
echo "rc $?" >> $D/cuda_tests.txt
timeout 60 python3 -m scripts.bench_mla_rope --rows 2 --warps 4 --out_dir $D > $D/log_kernels.txt 2>&1
echo "rc $?" >> $D/log_kernels.txt
C="python3 -m scripts.bench_train --graph_step --master_weights --shapes 12x1024,64x256 --rope on"
timeout 110 $C --variants mla_shared128 --sdpa_backend flash --knob fused_mla_rope.PAD_VALUES=True --precompile 2 --time_budget 100 --out_dir $D --name mla_flash_pad > $D/log_flash.txt 2>&1
echo "rc $?" >> $D/log_flash.txt
timeout 150 $C --variants mla_shared128,mha --precompile 4 --time_budget 140 --out_dir $D --name mla_cudnn > $D/log_cudnn.txt 2>&1
echo "rc $?" >> $D/log_cudnn.txt
timeout 100 $C --variants mla_shared128 --sdpa_backend efficient --precompile 2 --time_budget 90 --out_dir $D --name mla_efficient > $D/log_eff.txt 2>&1
echo "rc $?" >> $D/log_eff.txt
(cd $OUT && tar czf c1.tgz c1)
