#!/usr/bin/env bash
# One sitting on a lent GPU machine (one call of the device tool): the CUDA tests and benchmarks on
# GPU 0, and (on a machine with more GPUs) the enwiki table's runs on the others at the same time.
# From the repository root:
#
#   OUT=$OUT bash scripts/gpu_session.sh STAGE [STAGE ...]
#
# stages, run one after another on GPU 0:
#   gpu_tests     every CUDA test of the repository, in parallel pytest processes (scripts/gpu_tests.py: $WORK/gpu_tests/
#                 summary.md, a log and JUnit XML a job; GPU_TESTS_ARGS: more of its arguments, e.g. "--jobs 4 -- -x")
#   tests         the CUDA tests (decode kernel vs SDPA vs float64, graph replay, the static decode step, decode_linear)
#   tests_step    the CUDA tests of the decode step alone (test_decode.py's and decode_linear's: a minute, not three)
#   tests_loss    the CUDA tests of the fused loss head (fused_loss's kernel vs float64, the compiled fused head vs nanoGPT's)
#   loss_kernel   bench_loss: the loss head's cross-entropy alone, nanoGPT's head compiled vs fused_loss's kernel and its knobs
#                 (LOSS_ARGS: more bench_loss arguments, e.g. "--d_model 0 --programs 0,132,264")
#   train_output_code  inductor's generated code (TORCH_LOGS=output_code, a cold cache) of the compiled step of
#                 CODE_VARIANTS (default mha) at 12x1024 with --graph_step: which tensors the profile's kernels touch
#   decode        bench_decode, GPT-2 124M variants: forward / graph_sdpa / graph modes at batch 1 and 32,
#                 4k and 16k cached tokens, plus model.generate end to end (sample.py's loop)
#   decode_compiled  bench_decode's graph_compiled (torch.compile before capture) and graph_merged[_compiled]
#                 (TuckerAttention.merged_decode: 2 matmuls per Tucker layer, not 4) modes beside graph, batch 1
#                 and 32, 4k and 16k, and model.generate end to end with and without the compiled step
#                 (sample.py --compile=True: its tokens/s; a profile of 64 tokens: kernels per token, GPU busy %)
#   decode_autotune  graph_compiled against the step compiled with max-autotune (Triton GEMMs with fused
#                 epilogues: fewer kernels per layer), plain and merged Tucker, batch 1 and 32, 4k and 16k
#   decode_llama  bench_decode, the paper's LLaMA-3 1B rows, batch 1, 4k cached (graph_sdpa, graph, graph_merged:
#                 at batch 1 the defaults merge the MLA rows; the Tucker rows decode factored)
#   decode_generate  model.generate end to end (sample.py) for every variant family, plain graph, compiled and
#                 max-autotuned step (sample.py --compile=True [--compile_mode=max-autotune]), with a profile
#   decode_profile_check  MHA and Tucker [8,64,64]: model.generate profiled eager and in a CUDA graph in one run
#                 (does the graph replay's profile hold every kernel the eager step launches? results/bench/LOG.md)
#   decode_linear_tune  decode_linear's tile knobs (PROGRAMS_PER_SM, TILE, NUM_WARPS, MAX_BLOCK_N) one run each, batch 1, 4k
#   decode_pdl    decode_attention's PDL knob: all kernels, none, the split kernel only, the combine only (batch 1, 4k and 16k)
#   blas_train    bench_train --graph_step (MHA, Tucker, MLA) with torch's BLAS, then with --blas cublaslt
#   blas_decode   bench_decode graph_merged with torch's BLAS and with --blas cublaslt, alternating
#   decode_compiled_check  graph_merged against graph_merged_compiled (MHA, Tucker; batch 1 and 32, 4k)
#   kernel_narrow  bench_decode_kernel (the split kernel alone, B=32, 16k) for the narrow heads of the GPT-2 rows: Tucker
#                 [8,64,64] shared (T64) and with separate k, v (T64kv), MHA beside: defaults, split alone, tiles
#                 (warps x BLOCK_N x stages) and splits (CTAS_PER_SM): which settings read the cache fastest
#   decode_profile1  profiled graph replays of batch-1 steps at 4k (MHA, Tucker, Tucker shared): every kernel of the step
#   decode_profile32  profiled graph replays of batch-32 steps (4k, 16k; MHA, Tucker, Tucker shared, MQA): the top kernels
#   train_master_all  bench_train --graph_step --master_weights: MHA, Tucker [8,64,64], Tucker shared, GQA-4, MLA shared
#                 128, both shapes, Tucker profiled (TRAIN_BUDGET, default 300)
#   tests_master  master_adamw's and fused_gelu's CUDA tests (MASTER_TESTS: more test files)
#   master_multi  bench_train --graph_step --master_weights (MULTI_VARIANTS: MHA, Tucker [8,64,64]; both shapes, Tucker
#                 profiled) with --knob TENSORS_PER_LAUNCH=1 (a launch per tensor), then with PER_LAUNCH (16, the
#                 default since session 16): the multi-tensor kernel -> bench/master_per_tensor, bench/master_multi
#   mega          decode_mega's CUDA tests (the one-launch step against its phases and the model), then bench_decode
#                 graph_merged against graph_mega (the whole step as one persistent kernel), batch 1, 4k and 16k, MHA,
#                 GQA-4, MQA, Tucker, Tucker shared, profiled (MEGA_ARGS: more bench_decode arguments, e.g. --knob
#                 decode_mega.NUM_WARPS=4) -> bench/decode_mega
#   master_weights  tests_master; bench_train --graph_step (MHA, Tucker) with fused AdamW, then with
#                 --master_weights; loop_gap rounds against nanoGPT with --master_weights (ROUNDS, default 5)
#   decode_vs_base[_rope|_llama]  bench_decode (GPT-2 learned / GPT-2 RoPE / LLaMA-1B rows) twice in a row on GPU 0:
#                 the tree of .carry/base (git archive of the commit before a change; carried) and this tree
#                 -> bench/<stage>_{base,new}.md/json (COMPARE_KNOBS="--knob A=1 ...": a third run, <stage>_knobs)
#   train_vs_base bench_train (GPT-2 MHA and Tucker [8,64,64], 12x1024 and 64x256, profiles, nanoGPT's bench.py beside
#                 each run) for .carry/base's tree and this tree -> bench/train_vs_base_{base,new}.md/json
#   rope          bench_rope: RoPE's cost per formulation in one compiled MHA attention sublayer (kernel time)
#   train         bench_train, GPT-2 124M variants beside nanoGPT's bench.py (.carry/nanogpt), with and
#                 without RoPE, with a profile of MHA and Tucker [8,64,64]
#   train_graphs  bench_train with compile_mode='reduce-overhead' (CUDA graphs: the launch-bound Tucker step)
#   train_gpt2_loss_chunk  MHA and Tucker [8,64,64] with the loss head in chunks of 4096 tokens (no float32
#                 logits of the whole batch: 2.5 GB at 12 x 1024 x 50304), against train's rows of the same call
#   train_graphs_nanogpt  MHA and Tucker [8,64,64] with CUDA graphs (reduce-overhead) beside nanoGPT's bench.py, profiled
#   train_graphs_all  MHA, Tucker [8,64,64], GQA-4, MLA shared 128, Tucker shared with CUDA graphs, both shapes
#   tests_graph_step  the CUDA tests of graph_step.py (graphed iterations vs plain ones; train.py with graph_step, resumed)
#   train_graph_step  bench_train --graph_step (the whole iteration as one CUDA graph) beside nanoGPT's bench.py: MHA,
#                 Tucker [8,64,64], Tucker shared, GQA-4, MLA shared 128, both shapes, MHA and Tucker profiled
#   train_graph_autotune  --graph_step --master_weights with compile_mode max-autotune-no-cudagraphs (Triton GEMMs with
#                 fused epilogues where they win), AUTOTUNE_VARIANTS (Tucker [8,64,64] first, then MHA; session 10 timed
#                 MHA: no gain; session 31 Tucker: 21.03 against 21.05 ms, a 240 s compile) at AUTOTUNE_SHAPES (12x1024),
#                 profiled (80 kernels: all of Tucker's narrow products), beside nanoGPT's bench.py; no precompile
#                 workers, so that each GEMM's autotuning runs alone on the GPU (its choice is what the row then times)
#   train_graph_rope  --graph_step, learned positions and RoPE: MHA, MLA shared 128 (decoupled RoPE), Tucker, 12x1024
#   train_loop    MHA and Tucker [8,64,64] timed nanoGPT's way (--loop: the loop's GPU and host time per iteration), with
#                 --graph_step and without, both shapes
#   train_inductor_knobs  MHA and Tucker [8,64,64] with --graph_step: default, TORCHINDUCTOR_ENABLE_PDL=1 (programmatic
#                 dependent launch for inductor's kernels), both shapes; TORCHINDUCTOR_MIX_ORDER_REDUCTION=0 and its
#                 split size autotuned (the layer norm's backward and its weight gradient), 12x1024
#   train_mix_order_on  MHA and Tucker [8,64,64], --graph_step, both shapes, with inductor's mix-order reduction on again
#                 (train.py turns it off: model.TRAIN_INDUCTOR_OPTIONS), for a same-call comparison with train_graph_step
#   loop_gap_graph  scripts/loop_gap.py --graph_step for MHA at both shapes beside nanoGPT's model: three unprofiled
#                 loops (loss read back each iteration, the same with an event before each step, no sync) and a profile
#   loop_gap_rounds  loop_gap --graph_step --rounds ROUNDS (7) for MHA beside nanoGPT's model, ROUNDS_SHAPES (both): the
#                 two loops alternate, each round's ratio with the GPU's SM clock and power (scripts/gpu_clock.py)
#   variant_rounds  loop_gap --against (session 31): MLA shared 128 with decoupled RoPE against MHA with RoPE (7 rounds),
#                 then Tucker [8,64,64] against MHA (5 rounds), 12x1024, --graph_step --master_weights: two of our steps
#                 alternating, each round's ratio taken between loops seconds apart
#   train_sdpa_flash  --graph_step rows (SDPA_VARIANTS, default MLA shared 128 and Tucker [8,64,64]; learned and RoPE,
#                 12x1024) with SDPA's flash backend, then with its default choice (MLA's decoupled RoPE: head dim 96)
#   train_coordesc  MHA and Tucker [8,64,64], --graph_step, both shapes: default, then with inductor's
#                 coordinate_descent_tuning, then with max_autotune_pointwise (block sizes of its Triton kernels tuned:
#                 GELU, the norms' backward; session 10's max-autotune mode mixed this with Triton GEMM templates)
#   train_default  the same rows' MHA and Tucker [8,64,64] without the graph (default mode), for a same-call comparison
#   qkv_split     bench_rope's no-RoPE rows: four ways of cutting q, k, v out of c_attn's output (its gradient's assembly)
#   train_llama   bench_train, the LLaMA-3 1B rows at N=4096
#   train_llama_graph  the same, GQA-8 and Tucker [32,64,64], --graph_step
#   train_loss_chunk  the same for GQA-8 and Tucker [32,64,64] with the loss head in chunks of 4096 tokens
#                 (GPTConfig.loss_chunk_tokens: peak memory and ms against train_llama's rows)
#   enwiki_convert=DEADLINE  the rest of the enwiki table and the conversion study in one sitting on 4 GPUs
#                 (out-enwiki/runs starts as a copy of results/enwiki/runs: finished runs are skipped):
#                 first the checkpointed seed-2 runs of MHA and Tucker [8,64,64] (both RoPE settings: the
#                 seed spread and the conversion's sources) on all GPUs, then at once the missing table
#                 runs on GPUs 2,3 (seed 1 with RoPE, GQA-4 with RoPE, MLA [GQA2 equiv.], latent-RoPE
#                 MLA) and convert_study on GPUs 0,1 from the seed-2 checkpoints. Nothing starts after
#                 DEADLINE seconds from the stage's start (a started run finishes, ~2 min); resumable:
#                 the same stage on the warm machine continues. $OUT/enwiki_runs.tar.gz, convert_runs.tar.gz.
#   fastpath_curve  train.py, GPT-2 124M MHA and Tucker [8,64,64] (CURVE_VARIANTS: config/shakespeare_<v>.py's, with
#                 CURVE_EXTRA's keys, e.g. CURVE_VARIANTS=mla_shared128 CURVE_EXTRA=--pos_emb=rope) on Shakespeare (carried: .carry/shakespeare), 200
#                 iterations each plain (eager), compiled, fast (compiled with CUDA graphs and the chunked loss
#                 head), graph (compiled, graph_step=True) and master (graph with master_weights=True), on all GPUs at
#                 once (CURVE_MODES: which of them, the reference first; CURVE_PAR: runs at once, default one per GPU); scripts/compare_runs.py compares the loss curves
#                 with the plain run's
#   mg_scaling    bench_multigpu scaling: GPT-2 124M MHA and Tucker [8,64,64] at 480 x 1024, 1/2/4 GPUs (DDP)
#                 (train.py's default since session 4: no Dynamo DDP graph split; MG_NAME=scaling_split
#                 MG_EXTRA=--ddp_split_graph=True: with it, as results/multigpu/scaling/ was measured)
#   mg_llama_table  bench_multigpu scaling over every LLaMA-3 1B row on all GPUs at 128 x 4096 (tab:owt2_llama1b_timing's
#                 training columns; LLAMA_MODE=ddp|fsdp, LLAMA_BATCH=2 per micro-step), 8 iterations, compiled;
#                 resumable with MG_BUDGET (no run starts after it; finished rows are skipped on the warm machine);
#                 LLAMA_COMPILE=False LLAMA_NAME=_eager: eager rows (no compile: ~1 min a row instead of ~2.5),
#                 LLAMA_ITERS / LLAMA_SKIP: iterations run / left out of the median
#   mg_resume     bench_multigpu resume: MHA on 4 GPUs to iteration 8, continued on 4, 2 and 1 (after mg_scaling
#                 with the same MG_NAME / MG_EXTRA: its uninterrupted 4-GPU run is the reference)
#   mg_kill       bench_multigpu kill: SIGKILL one rank of a 2-GPU MHA run; time to exit, checkpoint intact
#                 (KILL_COMPILE=False: without torch.compile, which the test does not need)
#   mg_fsdp       bench_multigpu scaling --modes ddp,fsdp: LLaMA-3 1B GQA-8 and Tucker [32,64,64] on 4 GPUs at
#                 32 x 4096 (micro-batch 2), enwiki tokens, 12 iterations (warm-up 2: the loss visibly falls), not compiled
# Timing stages are best run alone: the enwiki stage shares the host CPU with them (launch-bound
# steps slow down; results/bench/LOG.md says which 2026-11-26 numbers that affected).
#   enwiki=ROWS:BUDGET   in the background on GPUs 1.. (all but GPU 0): python -m scripts.sweep enwiki
#                 for those rows (both RoPE settings, seed 1337, checkpoints kept), no run started after
#                 BUDGET seconds; its summaries and logs are packed into $OUT/enwiki_runs.tar.gz
# Everything is logged under $WORK (one log per stage, the benchmarks' .md/.json in $WORK/bench, the stage's GPU
# clocks, power and temperature every 200 ms in <stage>.smi.csv; bench_train's rows carry the wall-clock times of
# their timed loops, `wall_times`, to line them up with it) and packed
# into $OUT/session.tar.gz after every stage (the device tool returns at most 8 files), so a call cut off
# at its time limit still returns what was done.
# Carry: .whl (pytest wheels, when the machine has no pytest), .carry/nanogpt, .carry/enwiki, .carry/shakespeare
# (python -m data.shakespeare.prepare --input ../shared/data/tinyshakespeare/input.txt
#  --tokenizer ../shared/tokenizers/gpt2.tiktoken --out_dir .carry/shakespeare).
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,/^set -uo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
# every stage the loop below knows (tests/test_gpu_smoke.py checks this list against the loop's case labels): a
# misspelt stage is refused before anything runs, not found after an hour of the stages before it
STAGES="tests tests_loss loss_kernel train_output_code tests_step decode decode_compiled decode_autotune decode_llama
decode_generate decode_profile_check kernel_narrow decode_linear_tune decode_pdl blas_train blas_decode
decode_compiled_check decode_profile1 decode_profile32 decode_vs_base decode_vs_base_rope decode_vs_base_llama
train_vs_base tests_graph_step train_graph_step train_master_all train_graph_autotune train_graph_rope train_loop
train_inductor_knobs train_mix_order_on loop_gap_graph loop_gap_rounds variant_rounds master_multi mega tests_master
master_weights train_sdpa_flash train_coordesc train_default qkv_split train_graphs_nanogpt train_graphs_all rope train
train_graphs train_loss_chunk train_gpt2_loss_chunk train_llama_graph train_llama enwiki_convert=DEADLINE
fastpath_curve mg_scaling mg_llama_table mg_resume mg_kill mg_fsdp enwiki=ROWS:BUDGET gpu_tests"
[[ $# -gt 0 ]] || { echo "error: no stage given: OUT=\$OUT bash scripts/gpu_session.sh STAGE [STAGE ...] (--help lists them)" >&2; exit 2; }
for st in "$@"; do
    case $st in
    enwiki_convert=*|enwiki=*) [[ -n ${st#*=} ]] && continue ;;
    *) [[ " ${STAGES//$'\n'/ } " == *" $st "* && $st != *=* ]] && continue ;;
    esac
    echo "error: unknown stage '$st' (nothing run); the stages: ${STAGES//$'\n'/ }" >&2
    exit 2
done
if ! command -v nvidia-smi >/dev/null; then  # it printed nvidia-smi's "command not found" twice and exited 0
    echo "error: no NVIDIA GPU here (nvidia-smi not found): gpu_session.sh is one sitting on a lent GPU machine; on a CPU run the tests (python -m pytest -q tests)" >&2
    exit 2
fi
OUT=${OUT:-out-gpu}
WORK=${WORK:-out-gpu-session}
mkdir -p "$OUT" "$WORK/bench"
pack() {  # the session's logs and tables, and the multi-GPU run folders without checkpoints
    tar -czf "$OUT/session.tar.gz" -C "$(dirname "$WORK")" "$(basename "$WORK")"
    [[ -d out-multigpu ]] && tar -czf "$OUT/multigpu.tar.gz" --exclude='*.pt' --exclude='*.tmp.*' out-multigpu
    return 0
}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if ! python3 -c "import pytest" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=index,name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
NGPU=$(nvidia-smi -L | grep -c '^GPU')
t0=$(date +%s)
ENWIKI_PID=""

stage() {  # name command...: run on GPU 0, log to $OUT/<name>.log, report the time it took
    local name=$1; shift
    local s=$(date +%s)
    echo "== [$(($(date +%s) - t0))s] $name: $*"
    local smi=""  # the GPUs' clocks, power and temperature every 200 ms while the stage runs (power capping?)
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -i "${STAGE_GPUS:-0}" --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
            --format=csv -lms 200 > "$WORK/$name.smi.csv" 2>/dev/null &
        smi=$!
    fi
    CUDA_VISIBLE_DEVICES=${STAGE_GPUS:-0} "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    [[ -n $smi ]] && kill "$smi" 2>/dev/null
    echo "== $name: exit $rc after $(($(date +%s) - s))s"
    tail -n 40 "$WORK/$name.log" | grep -v "^\s*$" | tail -n 25
    pack
}

ensure_enwiki() {  # data/enwiki/{train,val}.bin from the carried pack (kept on a warm machine)
    [[ -s data/enwiki/train.bin && -s data/enwiki/val.bin ]] && return 0
    python3 -m data.enwiki.prepare --unpack .carry/enwiki > "$WORK/enwiki_unpack.log" 2>&1 || { tail "$WORK/enwiki_unpack.log"; return 1; }
}
until_dl() { local l=$(($1 - $(date +%s))); echo $((l > 0 ? l : -1)); }  # seconds left (-1: none; 0 would mean no limit)

for st in "$@"; do
    case $st in
    gpu_tests) stage gpu_tests python3 -m scripts.gpu_tests --out_dir "$WORK/gpu_tests" ${GPU_TESTS_ARGS:-} ;;
    tests) stage tests python3 -m pytest -q -rs tests/test_decode_attention.py tests/test_decode.py tests/test_decode_linear.py ;;
    tests_loss) stage tests_loss python3 -m pytest -q -rs tests/test_fused_loss.py tests/test_chunked_loss.py -k "cuda" ;;
    loss_kernel) stage loss_kernel python3 -m scripts.bench_loss ${LOSS_ARGS:-} --out_dir "$WORK/bench" --name loss_kernel ;;
    train_output_code)  # inductor's generated code of MHA's compiled step (a cold cache: every kernel written out)
        stage train_output_code env TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)" TORCH_LOGS=output_code \
            python3 -m scripts.bench_train --graph_step --shapes 12x1024 --variants ${CODE_VARIANTS:-mha} --iters 5 \
            --warmup 3 --out_dir "$WORK/bench" --name train_output_code ;;
    tests_step) stage tests_step python3 -m pytest -q -rs tests/test_decode_linear.py tests/test_decode.py -k "cuda" ;;
    decode) stage decode python3 -m scripts.bench_decode --variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
            --modes forward,graph_sdpa,graph --batches 1,32 --contexts 4096,16384 --generate 500 \
            --out_dir "$WORK/bench" --name decode_gpt2 ;;
    decode_compiled) stage decode_compiled python3 -m scripts.bench_decode --variants mha,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
            --modes graph,graph_compiled,graph_merged,graph_merged_compiled --batches 1,32 --contexts 4096,16384 \
            --out_dir "$WORK/bench" --generate 500 --generate_modes graph,graph_compiled --generate_profile 64 \
            --name decode_gpt2_compiled ;;
    decode_autotune) stage decode_autotune python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 \
            --modes graph_compiled,graph_autotune,graph_merged_autotune --batches 1,32 --contexts 4096,16384 \
            --out_dir "$WORK/bench" --name decode_gpt2_autotune ;;
    decode_llama) stage decode_llama python3 -m scripts.bench_decode --suite llama1b --modes graph_sdpa,graph,graph_merged \
            --batches 1 --contexts 4096 --out_dir "$WORK/bench" --name decode_llama1b ;;
    decode_generate) stage decode_generate python3 -m scripts.bench_decode \
            --variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 --modes graph_merged --batches 1 \
            --contexts 4096 --generate 500 --generate_modes graph,graph_compiled,graph_autotune --generate_profile 64 \
            --out_dir "$WORK/bench" --name decode_gpt2_generate ;;
    decode_profile_check) stage decode_profile_check python3 -m scripts.bench_decode \
            --variants mha,tucker_8_64_64 --modes graph_merged --batches 1 --contexts 4096 --generate 500 \
            --generate_modes eager,graph --generate_profile 64 --out_dir "$WORK/bench" --name decode_gpt2_profile_check ;;
    kernel_narrow) stage kernel_narrow timeout ${KERNEL_TIMEOUT:-240} python3 -m scripts.bench_decode_kernel \
            --groups base,split_only,tiles,splits --cases T64,T64kv,MHA --warps 2,4 --block_n 32,64,128 --stages 2,3,4 \
            --ctas 2,4,8,16 --out_dir "$WORK/bench" --name kernel_narrow ;;
    decode_linear_tune)  # decode_linear's tile knobs at batch 1, 4k (MHA, Tucker, MLA; graph_merged), one run per setting
        for kn in "" "PROGRAMS_PER_SM=1" "PROGRAMS_PER_SM=4" "TILE=4096" "TILE=16384" "NUM_WARPS=2" "MAX_BLOCK_N=16"; do
            name=decode_linear_tune${kn:+_${kn//=/}}
            stage $name python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,mla_shared128 --modes graph_merged \
                --batches 1 --contexts 4096 ${kn:+--knob decode_linear.$kn} --out_dir "$WORK/bench" --name $name
        done ;;
    decode_pdl)  # decode_attention's PDL knob (which kernels launch with programmatic dependent launch), batch 1, one run each
        for kn in "('split','combine')" "False" "('split',)" "('combine',)"; do
            name=decode_pdl_$(echo "$kn" | tr -dc 'a-zA-Z,' | tr ',' '_')
            stage $name python3 -m scripts.bench_decode --variants mha,gqa4,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
                --modes graph_merged --batches 1 --contexts 4096,16384 --knob "PDL=$kn" --out_dir "$WORK/bench" --name $name
        done ;;
    blas_train)  # --blas: cuBLAS (torch's default) against cuBLASLt for aten's matmuls, the graphed training step
        KA=(--graph_step --shapes 12x1024,64x256 --variants mha,tucker_8_64_64,mla_shared128 --precompile 2 --out_dir "$WORK/bench")
        stage blas_train_default python3 -m scripts.bench_train "${KA[@]}" --time_budget ${BLAS_BUDGET:-150} --name blas_train_default
        stage blas_train_cublaslt python3 -m scripts.bench_train "${KA[@]}" --blas cublaslt --time_budget ${BLAS_BUDGET:-150} \
            --name blas_train_cublaslt ;;
    blas_decode)  # --blas in the decode step (batch 32: cuBLAS's matmuls), alternating BLAS_ROUNDS times (default 2)
        for r in $(seq 1 ${BLAS_ROUNDS:-2}); do
            for b in default cublaslt; do
                stage blas_decode_${b}_$r python3 -m scripts.bench_decode --variants mha,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 \
                    --modes graph_merged --batches 1,32 --contexts 4096,16384 --blas $b --out_dir "$WORK/bench" --name blas_decode_${b}_$r
            done
        done ;;
    decode_compiled_check)  # the uncompiled graph step against the compiled one (torch.compile traces decode_linear's
        # torch ops: inductor's fusions instead of its kernels), MHA and Tucker, batch 1 and 32, 4k
        stage decode_compiled_check python3 -m scripts.bench_decode --variants mha,tucker_8_64_64 \
            --modes graph_merged,graph_merged_compiled --batches 1,32 --contexts 4096 --out_dir "$WORK/bench" \
            --name decode_compiled_check ;;
    decode_profile1)  # where a batch-1 step's time goes (decode_linear's kernels, the split and combine kernels)
        stage decode_profile1 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64 \
            --modes graph_merged --batches 1 --contexts 4096 --profile_rows 20 --out_dir "$WORK/bench" --name decode_profile1 ;;
    decode_profile32)  # where a batch-32 step's time goes (cuBLAS matmuls, add_norm, attention): profiled graph replays
        stage decode_profile32 python3 -m scripts.bench_decode --variants mha,tucker_8_64_64,tucker_shared_8_64_64,mqa \
            --modes graph_merged --batches 32 --contexts 4096,16384 --profile_rows 20 --out_dir "$WORK/bench" \
            --name decode_profile32 ;;
    decode_vs_base*)  # the decode step of .carry/base (a copy of the tree before a change: git archive) against
        # this tree's, one after the other on the same GPU (COMPARE_KNOBS="--knob NAME=VALUE ...": a third run of this
        # tree with those decode_attention knobs)
        case $st in
        decode_vs_base) FA=(--variants mha,gqa4,mqa,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64 --modes graph,graph_merged
                            --batches 1,32 --contexts 4096,16384 --generate 500 --generate_modes graph --generate_profile 64) ;;
        decode_vs_base_rope) FA=(--rope --variants mha,gqa4,mla_shared128,tucker_8_64_64,tucker_shared_8_64_64
                                 --modes graph_merged --batches 1,32 --contexts 4096,16384) ;;
        decode_vs_base_llama) FA=(--suite llama1b --variants gqa8,tucker_32_64_64,tucker_32_128_64,mha,mla_sep128
                                  --modes graph,graph_merged --batches 1 --contexts 4096) ;;
        esac
        B="$PWD/$WORK/bench"
        stage ${st}_base bash -c "cd .carry/base && python3 -m scripts.bench_decode ${FA[*]} --out_dir $B --name ${st}_base"
        stage ${st}_new python3 -m scripts.bench_decode "${FA[@]}" --out_dir "$B" --name ${st}_new
        [[ -n "${COMPARE_KNOBS:-}" ]] && stage ${st}_knobs python3 -m scripts.bench_decode "${FA[@]}" $COMPARE_KNOBS \
            --out_dir "$B" --name ${st}_knobs ;;
    train_vs_base)  # bench_train beside nanoGPT's bench.py for .carry/base's tree, then this tree's, on GPU 0
        B="$PWD/$WORK/bench"
        TA=(--nanogpt "$PWD/.carry/nanogpt" --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 --profile mha,tucker_8_64_64
            --precompile 2 --time_budget 200)
        # TRAIN_BASE_ARGS / TRAIN_NEW_ARGS: other bench_train arguments for either run (e.g. fewer rows for the base)
        stage ${st}_base bash -c "cd .carry/base && python3 -m scripts.bench_train ${TRAIN_BASE_ARGS:-${TA[*]}} --out_dir $B --name ${st}_base"
        stage ${st}_new python3 -m scripts.bench_train ${TRAIN_NEW_ARGS:-${TA[*]}} --out_dir "$B" --name ${st}_new ;;
    tests_graph_step) stage tests_graph_step python3 -m pytest -q -rs tests/test_graph_step.py -k cuda ;;
    train_graph_step) stage train_graph_step python3 -m scripts.bench_train --nanogpt .carry/nanogpt --graph_step \
            --shapes 12x1024,64x256 --variants ${TRAIN_VARIANTS:-mha,tucker_8_64_64,tucker_shared_8_64_64,gqa4,mla_shared128} \
            --profile mha,tucker_8_64_64 --profile_top 25 --precompile 4 --time_budget ${TRAIN_BUDGET:-360} \
            --out_dir "$WORK/bench" --name train_graph_step ;;
    train_master_all) stage train_master_all python3 -m scripts.bench_train --graph_step --master_weights \
            --shapes 12x1024,64x256 --variants ${TRAIN_VARIANTS:-mha,tucker_8_64_64,tucker_shared_8_64_64,gqa4,mla_shared128} \
            --profile tucker_8_64_64 --profile_top 30 --precompile 4 --time_budget ${TRAIN_BUDGET:-300} \
            --out_dir "$WORK/bench" --name train_master_all ;;
    train_graph_autotune) stage train_graph_autotune python3 -m scripts.bench_train --nanogpt .carry/nanogpt --graph_step \
            --master_weights --compile_mode max-autotune-no-cudagraphs --shapes ${AUTOTUNE_SHAPES:-12x1024} \
            --variants ${AUTOTUNE_VARIANTS:-tucker_8_64_64,mha} --profile ${AUTOTUNE_VARIANTS:-tucker_8_64_64,mha} \
            --profile_top 80 --time_budget ${TRAIN_BUDGET:-480} --out_dir "$WORK/bench" --name train_graph_autotune ;;
    train_graph_rope) stage train_graph_rope python3 -m scripts.bench_train --graph_step --shapes 12x1024 --rope both \
            --variants mha,mla_shared128,tucker_8_64_64 --precompile 3 --time_budget ${ROPE_BUDGET:-150} \
            --out_dir "$WORK/bench" --name train_graph_rope ;;
    train_loop)
        stage train_loop_graph python3 -m scripts.bench_train --loop --graph_step --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 \
            --precompile 2 --time_budget ${TRAIN_BUDGET:-150} --out_dir "$WORK/bench" --name train_loop_graph
        stage train_loop_default python3 -m scripts.bench_train --loop --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 \
            --precompile 2 --time_budget ${TRAIN_BUDGET:-150} --out_dir "$WORK/bench" --name train_loop_default ;;
    train_inductor_knobs)  # --graph_step rows under inductor's environment switches, one run each (own compile caches)
        KA=(--graph_step --variants mha,tucker_8_64_64 --precompile 2 --out_dir "$WORK/bench")
        stage knobs_default python3 -m scripts.bench_train "${KA[@]}" --shapes 12x1024,64x256 --time_budget 150 --name knobs_default
        stage knobs_pdl env TORCHINDUCTOR_ENABLE_PDL=1 python3 -m scripts.bench_train "${KA[@]}" --shapes 12x1024,64x256 \
            --time_budget 150 --name knobs_pdl
        stage knobs_no_mix_order env TORCHINDUCTOR_MIX_ORDER_REDUCTION=0 python3 -m scripts.bench_train "${KA[@]}" \
            --shapes 12x1024 --time_budget 90 --name knobs_no_mix_order
        stage knobs_mix_order_autotune env TORCHINDUCTOR_MIX_ORDER_REDUCTION_AUTOTUNE_SPLIT_SIZE=1 python3 -m scripts.bench_train \
            "${KA[@]}" --shapes 12x1024 --time_budget 90 --name knobs_mix_order_autotune ;;
    train_mix_order_on) stage train_mix_order_on python3 -m scripts.bench_train --graph_step --loop \
            --inductor triton.mix_order_reduction=True --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 --precompile 2 \
            --time_budget ${MIX_BUDGET:-130} --out_dir "$WORK/bench" --name train_mix_order_on ;;
    loop_gap_graph)  # where a graph_step loop timed nanoGPT's way loses time, beside nanoGPT's model in its own loop
        for shape in 12x1024 64x256; do
            stage loop_gap_graph_$shape python3 -m scripts.loop_gap --variant mha --shape $shape --graph_step \
                --nanogpt .carry/nanogpt --out_dir "$WORK/bench" --name loop_gap_graph_$shape
        done ;;
    loop_gap_rounds)  # ours (graph_step) and nanoGPT's model in its own loop, alternating ROUNDS times, with the GPU clock
        for shape in ${ROUNDS_SHAPES:-12x1024 64x256}; do
            stage loop_gap_rounds_$shape python3 -m scripts.loop_gap --variant mha --shape $shape --graph_step \
                --rounds ${ROUNDS:-7} --iters 4 --nanogpt .carry/nanogpt --out_dir "$WORK/bench" --name loop_gap_rounds_$shape
        done ;;
    variant_rounds)  # two of our variants alternating (loop_gap --against), the ratio per round and its median
        VR=(--shape 12x1024 --graph_step --master_weights --iters 4 --out_dir "$WORK/bench")
        stage mla_rope_vs_mha_rope python3 -m scripts.loop_gap --variant mha --against mla_shared128 --rope --rounds 7 \
            "${VR[@]}" --name mla_rope_vs_mha_rope
        stage tucker_vs_mha python3 -m scripts.loop_gap --variant mha --against tucker_8_64_64 --rounds 5 \
            "${VR[@]}" --name tucker_vs_mha ;;
    master_multi)  # master_adamw's multi-tensor kernel (TENSORS_PER_LAUNCH) against a launch per tensor, same call
        MM=(--graph_step --master_weights --shapes 12x1024,64x256 --variants ${MULTI_VARIANTS:-mha,tucker_8_64_64}
            --profile ${MULTI_PROFILE:-tucker_8_64_64} --profile_top 30 --precompile 2 --time_budget ${MULTI_BUDGET:-150}
            --out_dir "$WORK/bench")
        stage master_per_tensor python3 -m scripts.bench_train "${MM[@]}" --knob TENSORS_PER_LAUNCH=1 --name master_per_tensor
        stage master_multi python3 -m scripts.bench_train "${MM[@]}" --knob TENSORS_PER_LAUNCH=${PER_LAUNCH:-16} \
            --name master_multi ;;
    mega) stage tests_mega timeout ${MEGA_TEST_TIMEOUT:-300} python3 -m pytest -q -rs tests/test_decode_mega.py -k cuda
        stage decode_mega timeout ${MEGA_TIMEOUT:-300} python3 -m scripts.bench_decode \
            --variants ${MEGA_VARIANTS:-mha,gqa4,mqa,tucker_8_64_64,tucker_shared_8_64_64} --modes graph_merged,graph_mega \
            --batches ${MEGA_BATCHES:-1} --contexts 4096,16384 --profile_rows 20 --out_dir "$WORK/bench" \
            --name ${MEGA_NAME:-decode_mega} ${MEGA_ARGS:-} ;;
    tests_master) stage tests_master python3 -m pytest -q -rs tests/test_master_adamw.py tests/test_fused_gelu.py \
            ${MASTER_TESTS:-} -k cuda ;;
    master_weights)  # master_adamw (bf16 matrices, float32 masters) against fused AdamW: the CUDA tests, the step, nanoGPT
        stage tests_master python3 -m pytest -q -rs tests/test_master_adamw.py tests/test_fused_gelu.py ${MASTER_TESTS:-} -k cuda
        MA=(--graph_step --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 --profile mha --profile_top 30 --precompile 2
            --time_budget ${MASTER_BUDGET:-150} --out_dir "$WORK/bench")
        stage train_adamw python3 -m scripts.bench_train "${MA[@]}" --name train_adamw
        stage train_master python3 -m scripts.bench_train "${MA[@]}" --master_weights --name train_master
        for shape in ${ROUNDS_SHAPES:-12x1024 64x256}; do
            stage loop_gap_master_$shape python3 -m scripts.loop_gap --variant mha --shape $shape --graph_step --master_weights \
                --rounds ${ROUNDS:-5} --iters 4 --nanogpt .carry/nanogpt --out_dir "$WORK/bench" --name loop_gap_master_$shape
        done ;;
    train_sdpa_flash)  # SDPA's flash backend against the default choice (cuDNN at these head sizes), same call
        for be in flash auto; do
            stage train_sdpa_$be python3 -m scripts.bench_train --graph_step --sdpa_backend $be --rope both --shapes 12x1024 \
                --variants ${SDPA_VARIANTS:-mla_shared128,tucker_8_64_64} --precompile 2 --time_budget ${SDPA_BUDGET:-100} \
                --out_dir "$WORK/bench" --name train_sdpa_$be
        done ;;
    train_coordesc)  # inductor's own tuning of its Triton kernels' block sizes, without max-autotune's GEMM templates
        KA=(--graph_step --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 --precompile 2 --out_dir "$WORK/bench")
        stage coordesc_default python3 -m scripts.bench_train "${KA[@]}" --time_budget ${COORDESC_BUDGET:-130} --name coordesc_default
        stage coordesc_on python3 -m scripts.bench_train "${KA[@]}" --inductor coordinate_descent_tuning=True \
            --time_budget ${COORDESC_BUDGET:-130} --name coordesc_on
        stage coordesc_pointwise python3 -m scripts.bench_train "${KA[@]}" --inductor max_autotune_pointwise=True \
            --time_budget ${COORDESC_BUDGET:-130} --name coordesc_pointwise ;;
    train_default) stage train_default python3 -m scripts.bench_train --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 \
            --precompile 2 --time_budget ${TRAIN_BUDGET:-150} --out_dir "$WORK/bench" --name train_default ;;
    qkv_split) stage qkv_split python3 -m scripts.bench_rope --shapes 12x1024,64x256 --profile \
            --formulations none,none_split3,none_unbind,none_t,model --out_dir "$WORK/bench" --name qkv_split ;;
    train_graphs_nanogpt) stage train_graphs_nanogpt python3 -m scripts.bench_train --nanogpt .carry/nanogpt \
            --shapes 12x1024,64x256 --variants mha,tucker_8_64_64 --compile_mode reduce-overhead --profile mha,tucker_8_64_64 \
            --profile_top 25 --precompile 2 --time_budget ${TRAIN_BUDGET:-330} --out_dir "$WORK/bench" --name train_graphs_nanogpt ;;
    train_graphs_all) stage train_graphs_all python3 -m scripts.bench_train --shapes 12x1024,64x256 \
            --variants mha,tucker_8_64_64,gqa4,mla_shared128,tucker_shared_8_64_64 --compile_mode reduce-overhead \
            --precompile 4 --time_budget ${TRAIN_BUDGET:-420} --out_dir "$WORK/bench" --name train_graphs_all ;;
    rope) stage rope python3 -m scripts.bench_rope --shapes 12x1024,64x256 --profile --out_dir "$WORK/bench" ;;
    train) stage train python3 -m scripts.bench_train --nanogpt .carry/nanogpt --shapes 12x1024,64x256 --rope both \
            --variants mha,tucker_8_64_64,tucker_shared_8_64_64,gqa4 --profile mha,tucker_8_64_64 \
            --precompile 4 --time_budget 330 --out_dir "$WORK/bench" --name train_gpt2 ;;
    train_graphs) stage train_graphs python3 -m scripts.bench_train --shapes 12x1024,64x256 --rope both \
            --variants mha,tucker_8_64_64,tucker_shared_8_64_64 --compile_mode reduce-overhead \
            --precompile 3 --time_budget 330 --out_dir "$WORK/bench" --name train_gpt2_cudagraphs ;;
    train_loss_chunk) stage train_loss_chunk python3 -m scripts.bench_train --suite llama1b --variants gqa8,tucker_32_64_64 \
            --loss_chunk 4096 --time_budget 150 --out_dir "$WORK/bench" --name train_llama1b_loss_chunk ;;
    train_gpt2_loss_chunk) stage train_gpt2_loss_chunk python3 -m scripts.bench_train --shapes 12x1024,64x256 \
            --variants mha,tucker_8_64_64 --loss_chunk 4096 --precompile 4 --time_budget 240 --out_dir "$WORK/bench" \
            --name train_gpt2_loss_chunk ;;
    train_llama_graph) stage train_llama_graph python3 -m scripts.bench_train --suite llama1b --graph_step \
            --variants gqa8,tucker_32_64_64 --precompile 2 --time_budget ${LLAMA_BUDGET:-240} --out_dir "$WORK/bench" \
            --name train_llama1b_graph ;;
    train_llama) stage train_llama python3 -m scripts.bench_train --suite llama1b --variants ${LLAMA_VARIANTS:-gqa8,tucker_32_64_64,mha} \
            --time_budget 150 --out_dir "$WORK/bench" --name train_llama1b ;;
    enwiki_convert=*)
        dl=$(($(date +%s) + ${st#enwiki_convert=}))
        ensure_enwiki || continue
        mkdir -p out-enwiki/runs && cp -rn results/enwiki/runs/. out-enwiki/runs/ 2>/dev/null  # never overwrites
        SW=(python3 -m scripts.sweep enwiki --results_dir out-enwiki/runs)
        STAGE_GPUS=0,1,2,3 stage enwiki_seed2 "${SW[@]}" --rows mha,tucker_8_64_64 --rope both --seeds 2 --jobs 4 \
            --gpus 0,1,2,3 --save-checkpoints --time_budget $(until_dl $dl)
        ( "${SW[@]}" --rows mha,tucker_8_64_64 --rope on --seeds 1 --jobs 2 --gpus 2,3 --time_budget $(until_dl $dl)
          "${SW[@]}" --rows gqa4,mla_gqa2_equiv,mla_gqa2_equiv_latent,mla_shared_latent128 --rope both --jobs 2 --gpus 2,3 \
              --time_budget $(until_dl $dl) ) > "$WORK/enwiki_rest.log" 2>&1 &
        rest=$!
        left=$(until_dl $dl); [[ $left -gt 0 ]] || left=1  # 1: only the tables from what exists
        STAGE_GPUS=0,1 stage convert python3 -m scripts.convert_study \
            --mha out-enwiki/runs/mha-rope_off-s2 out-enwiki/runs/mha-rope_on-s2 \
            --tucker out-enwiki/runs/tucker_8_64_64-rope_off-s2 --data_dir data/enwiki --work_dir out-convert \
            --results_dir "$WORK/convert" --spectra_dir "$WORK/spectra" --gpus 0,1 --time_budget $left
        wait $rest; echo "== enwiki_rest: exit $? at $(($(date +%s) - t0))s"; grep -v "^\s*$" "$WORK/enwiki_rest.log" | tail -n 20
        tar -czf "$OUT/enwiki_runs.tar.gz" -C out-enwiki --exclude='*.pt' --exclude='*.tmp.*' runs
        [[ -d out-convert ]] && tar -czf "$OUT/convert_runs.tar.gz" --exclude='*.pt' --exclude='*.tmp.*' out-convert ;;
    fastpath_curve)  # the fast training path's loss curve against the plain one (issue 14), GPT-2 124M on Shakespeare
        mkdir -p data/shakespeare && cp -n .carry/shakespeare/* data/shakespeare/ 2>/dev/null
        modes=(${CURVE_MODES:-plain compiled fast graph})
        variants=(${CURVE_VARIANTS:-mha tucker_8_64_64})
        echo "== [$(($(date +%s) - t0))s] fastpath_curve: 200 iterations x {${modes[*]}} x {${variants[*]}}"
        pids=(); i=0
        for v in "${variants[@]}"; do
            for m in "${modes[@]}"; do
                case $m in
                # eager, nanoGPT's loss head, F.gelu, torch ops for MLA's decoupled-RoPE query and key
                plain) ex=(--compile=False --loss_head=logits --gelu=torch --mla_rope_kernels=torch) ;;
                compiled) ex=(--compile=True) ;;  # the defaults: compiled, the fused loss head
                fast) ex=(--compile=True --compile_mode=reduce-overhead --loss_chunk_tokens=4096) ;;
                graph) ex=(--compile=True --graph_step=True) ;;  # the whole iteration replayed from one CUDA graph
                master) ex=(--compile=True --graph_step=True --master_weights=True) ;;  # and bf16 matrices, float32 masters
                esac
                CUDA_VISIBLE_DEVICES=$((i % NGPU)) python3 train.py config/shakespeare_$v.py --max_iters=200 --eval_interval=100 \
                    --log_interval=1 --save_checkpoint=False --out_dir=out-curve/$v-$m ${CURVE_EXTRA:-} "${ex[@]}" \
                    > "$WORK/curve_$v-$m.log" 2>&1 &
                pids+=($!); i=$((i + 1))
                if (( ${#pids[@]} >= ${CURVE_PAR:-$NGPU} )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
            done
        done
        wait
        for v in "${variants[@]}"; do
            python3 -m scripts.compare_runs "${modes[@]/#/out-curve/$v-}" \
                --out "$WORK/fastpath_curve" --name $v --title "GPT-2 124M $v on Shakespeare, 64 x 256, bf16: plain vs fast" \
                2>&1 | tail -n 8
        done
        tar -czf "$OUT/curve_runs.tar.gz" --exclude='*.pt' out-curve; pack ;;
    mg_scaling) ensure_enwiki || continue; STAGE_GPUS=0,1,2,3 stage mg_${MG_NAME:-scaling} python3 -m scripts.bench_multigpu scaling \
            --configs ${MG_CONFIGS:-config/enwiki_mha.py,config/enwiki_tucker_8_64_64.py} --nprocs 1,2,4 --batch_size 12 \
            --global_batch 480 --iters 16 --time_budget ${MG_BUDGET:-400} --out_dir out-multigpu/${MG_NAME:-scaling} \
            -- --data_dir=data/enwiki ${MG_EXTRA:-} ;;
    mg_llama_table) ensure_enwiki || continue
        # every LLaMA-3 1B row, GQA-8 (the paper's baseline) first, at the paper's global batch
        cfgs=$(printf '%s\n' config/owt2_llama1b_gqa8.py config/owt2_llama1b_tucker_32_64_64.py config/owt2_llama1b_mha.py \
               config/owt2_llama1b_*.py | grep -v _base | awk '!seen[$0]++' | paste -sd,)
        STAGE_GPUS=0,1,2,3 stage mg_llama_table python3 -m scripts.bench_multigpu scaling --configs "$cfgs" \
            --modes ${LLAMA_MODE:-ddp} --nprocs $NGPU --batch_size ${LLAMA_BATCH:-2} --global_batch 128 --iters ${LLAMA_ITERS:-8} \
            --skip ${LLAMA_SKIP:-5} --time_budget ${MG_BUDGET:-400} --out_dir out-multigpu/llama_table${LLAMA_NAME:-} \
            -- --data_dir=data/enwiki --compile=${LLAMA_COMPILE:-True} --warmup_iters=2 ;;
    mg_resume) ensure_enwiki || continue; STAGE_GPUS=0,1,2,3 stage mg_resume python3 -m scripts.bench_multigpu resume --configs config/enwiki_mha.py \
            --from_nproc 4 --nprocs 4,2,1 --batch_size 12 --global_batch 480 --split_iter 8 --iters 16 \
            --reference out-multigpu/${MG_NAME:-scaling}/enwiki_mha-ddp-4 --out_dir out-multigpu/resume -- --data_dir=data/enwiki \
            ${MG_EXTRA:-} ;;
    mg_kill) ensure_enwiki || continue; STAGE_GPUS=0,1 stage mg_kill python3 -m scripts.bench_multigpu kill --configs config/enwiki_mha.py --nprocs 2 \
            --batch_size 12 --global_batch 48 --ckpt_every 4 --kill_after_iter 6 --timeout 240 \
            --out_dir out-multigpu/kill -- --data_dir=data/enwiki --compile=${KILL_COMPILE:-True} ;;
    mg_fsdp) ensure_enwiki || continue; STAGE_GPUS=0,1,2,3 stage mg_fsdp python3 -m scripts.bench_multigpu scaling \
            --configs config/owt2_llama1b_gqa8.py,config/owt2_llama1b_tucker_32_64_64.py --modes ddp,fsdp --nprocs 4 \
            --batch_size 2 --global_batch 32 --iters 12 --skip 5 --time_budget ${MG_BUDGET:-400} --out_dir out-multigpu/fsdp \
            -- --data_dir=data/enwiki --warmup_iters=2 ;;
    enwiki=*)
        spec=${st#enwiki=}; rows=${spec%%:*}; budget=${spec##*:}
        if [[ $NGPU -lt 2 ]]; then echo "enwiki: needs a machine with GPUs beyond GPU 0"; continue; fi
        gpus=$(seq -s, 1 $((NGPU - 1)))
        ensure_enwiki || continue
        echo "== [$(($(date +%s) - t0))s] enwiki: rows $rows on GPUs $gpus, budget ${budget}s (background)"
        python3 -m scripts.sweep enwiki --rows "$rows" --rope both --seeds "${SEEDS:-1337}" --jobs $((NGPU - 1)) \
            --gpus "$gpus" --results_dir out-enwiki/runs --time_budget "$budget" --save-checkpoints \
            > "$WORK/enwiki_sweep.log" 2>&1 &
        ENWIKI_PID=$! ;;
    esac
done

if [[ -n $ENWIKI_PID ]]; then
    echo "== [$(($(date +%s) - t0))s] waiting for the enwiki sweep"
    wait $ENWIKI_PID; echo "== enwiki sweep: exit $? at $(($(date +%s) - t0))s"
    tail -n 30 "$WORK/enwiki_sweep.log"
    tar -czf "$OUT/enwiki_runs.tar.gz" -C out-enwiki --exclude='*.pt' --exclude='*.tmp.*' runs
fi
pack
echo "== done in $(($(date +%s) - t0))s"
