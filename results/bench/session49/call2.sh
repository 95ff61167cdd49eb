#!/usr/bin/env bash
# Session 49 call 2: call 1's tests cut by their 330 s limit, narrowed to those that reach the changed code on a
# GPU (decode_wide's fit with program_reserve and pipelines_loads; the MLA key kernel's launch with pipelines_loads),
# then bench_decode's one launch at batch 32 (its files were more than call 1 could bring back). Outputs as one tar.
set -u
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
O=$OUT/c2; mkdir -p $O/files
F=$O/files
timeout 400 python3 -m pytest -q -p no:cacheprovider \
    "tests/test_decode_wide.py::test_cuda_wide_step_at_one_program_an_sm" \
    "tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model[tucker-32]" \
    "tests/test_decode_wide.py::test_cuda_wide_one_launch_matches_the_phases_and_the_model[tucker_shared-32]" \
    "tests/test_fused_mla_rope.py::test_cuda_from_latent_fits_the_devices_shared_memory" \
    "tests/test_fused_mla_rope.py::test_cuda_bf16_kernels_match_torch_form" \
    "tests/test_fused_mla_rope.py::test_cuda_compiled_model_step_matches_torch_ops[False-k_up_in_kernel]" \
    tests/test_decode_attention.py::test_pipelines_loads_by_compute_capability \
    tests/test_decode_attention.py::test_shared_memory_reads_the_device_then_the_table_by_capability \
    > $F/tests.log 2>&1
echo "tests=$?" > $O/rc.txt
timeout 120 python3 -m scripts.bench_decode --variants tucker_8_64_64,tucker_shared_8_64_64 --modes graph_mega \
    --batches 32 --contexts 16384 --out_dir $F --name wide > $F/wide.log 2>&1; echo "wide=$?" >> $O/rc.txt
timeout 60 python3 -m scripts.bench_decode --variants mha --modes graph_merged --batches 32 --contexts 16384 \
    --out_dir $F --name mha > $F/mha.log 2>&1; echo "mha=$?" >> $O/rc.txt
tar -C $O -czf $O/files.tgz files && rm -rf $F
