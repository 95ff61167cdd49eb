#!/usr/bin/env bash
# The user-facing CUDA paths that no CUDA test reaches, each run once at a tiny size on GPU 0, each command's exit
# status in $OUT/smoke/rc.txt (0 everywhere, or the step's .err says why). From the repository root, offline:
#
#   TUCKER_GPT2_TIKTOKEN=.../gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=.../input.txt OUT=$OUT bash scripts/gpu_smoke.sh
#
# About 5 minutes on an H200 (most of it compiles). Why: session 35 moved train.py's set_device out of the DDP
# branch and gave sample.py one; both failed at a bare 'cuda' under torch 2.11, where no CPU test can look, and the
# main job's traceback went unread. The steps (session 36's audit of the CUDA-only branches):
#   ddp, fsdp, fsdp_res   train.py under torchrun (1 process): NCCL, DDP's device_ids, FSDP2 and its resume
#   comp, comp_gs         train.py with compile=True, plain and with graph_step (what the paper configs run)
#   s_eager, s_comp       sample.py greedy, eager loop against the compiled step in a CUDA graph: the same text
#   cpu, cpu2cuda, cpu2gs a checkpoint trained on the CPU resumed on the GPU (the optimizer's step counters moved),
#                         plain and with graph_step
#   mega1, mega2, mega8   sample.py --decode=mega at its sampled defaults, batch 1 and 2, and 8 (decode_wide's step,
#                         as many programs an SM as its shared memory holds)
#   f16, f16_res          float16 training (GradScaler, its state in the checkpoint) and its resume
#   ez                    eval_zeroshot's TuckerLM on CUDA, float32 and bfloat16 (skipped where lm_eval is missing)
set -u
PY=${PY:-python3}
case "${1:-}" in -h|--help) sed -n '2,/^set -u/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;; esac
if ! $PY -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then  # 16 failed steps said less
    echo "error: no CUDA device here (torch.cuda.is_available() is False): gpu_smoke.sh runs the CUDA-only paths on a GPU; on a CPU run the tests (python -m pytest -q tests)" >&2
    exit 2
fi
A=${OUT:?set OUT}/smoke; mkdir -p "$A"; : > "$A/rc.txt"
r() { local n=$1; shift; timeout "${STEP_TIMEOUT:-150}" "$@" > "$A/$n.out" 2> "$A/$n.err"; echo "$n rc=$?" | tee -a "$A/rc.txt"; }
r prepare $PY -m data.shakespeare.prepare --out_dir "$A/data"
T="--data_dir=$A/data --n_layer=2 --n_head=4 --n_embd=64 --block_size=64 --attn=tucker --tucker_ranks=4,16,16
   --pos_emb=rope --batch_size=4 --gradient_accumulation_steps=2 --eval_interval=3 --eval_iters=2 --log_interval=1
   --warmup_iters=1 --lr_decay_iters=6"
TR="$PY -m torch.distributed.run --standalone --nproc_per_node=1 train.py $T"
r ddp      $TR --out_dir=$A/ddp --max_iters=6
r fsdp     $TR --out_dir=$A/fsdp --fsdp=True --max_iters=3
r fsdp_res $TR --out_dir=$A/fsdp --fsdp=True --max_iters=6 --init_from=resume
r comp     $PY train.py $T --out_dir=$A/comp --compile=True --max_iters=6
r comp_gs  $PY train.py $T --out_dir=$A/compg --compile=True --graph_step=True --max_iters=8 --eval_interval=4
S="$PY sample.py --out_dir=$A/ddp --num_samples=2 --max_new_tokens=80"  # 80 new tokens > block 64: a refill too
r s_eager  $S --temperature=0 --dtype=float32 --decode=eager
r s_comp   $S --temperature=0 --dtype=float32 --compile=True
cmp -s "$A/s_eager.out" "$A/s_comp.out"; echo "s_comp_equals_s_eager rc=$?" | tee -a "$A/rc.txt"
r cpu      $PY train.py $T --device=cpu --out_dir=$A/x --max_iters=3
cp -r "$A/x" "$A/xg"
r cpu2cuda $PY train.py --out_dir=$A/x --init_from=resume --max_iters=6
r cpu2gs   $PY train.py --out_dir=$A/xg --init_from=resume --max_iters=9 --graph_step=True
r mega1    $S --decode=mega
r mega2    $S --decode=mega --batch_size=2
r mega8    $S --decode=mega --batch_size=8 --num_samples=8
r f16      $PY train.py $T --out_dir=$A/f16 --dtype=float16 --max_iters=3
r f16_res  $PY train.py $T --out_dir=$A/f16 --dtype=float16 --max_iters=6 --init_from=resume
if $PY -c "import lm_eval" 2> /dev/null; then
    r ez $PY - "$A/ddp" <<'EOF'
import os, sys
from lm_eval.api.instance import Instance
from scripts import eval_zeroshot as ez
q = lambda kind, *a: Instance(request_type=kind, doc={}, arguments=a, idx=0)
for dtype in ("float32", "bfloat16"):
    lm = ez.TuckerLM(out_dir=sys.argv[1], tokenizer=os.environ["TUCKER_GPT2_TIKTOKEN"], batch_size=3, dtype=dtype)
    print(dtype, lm.device, lm.loglikelihood([q("loglikelihood", "ROMEO:", " I"), q("loglikelihood", "To be or", " not")]),
          lm.loglikelihood_rolling([q("loglikelihood_rolling", "To be or not to be, that is the question. " * 12)]),
          repr(lm.generate_until([q("generate_until", "ROMEO:", {"until": ["\n\n"], "max_gen_toks": 80})])[0][:40]))
EOF
else
    echo "ez skipped: lm_eval is not installed here" | tee -a "$A/rc.txt"
fi
failed=$(grep -c "rc=[1-9]" "$A/rc.txt")
echo "smoke: $failed step(s) failed" | tee -a "$A/rc.txt"
exit $((failed > 0))
