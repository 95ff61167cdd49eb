#!/usr/bin/env bash
# The enwiki table (issue 15) on a GPU machine: every row in both RoPE settings plus the seed runs,
# in priority order, one run per GPU, within a time budget; resumable over several sittings.
# From the repository root, with .carry/enwiki carried (python -m data.enwiki.prepare --pack .carry/enwiki):
#
#   bash scripts/enwiki_gpu.sh [BUDGET_S] [-- train.py overrides ...]
#
# 1. unpacks .carry/enwiki into data/enwiki/{train,val}.bin (sha256-checked; a no-op when intact);
# 2. prepares the run folder $RUNS (default out-enwiki/runs: git-ignored, so a warm machine keeps it,
#    checkpoints included, between calls): copies in the finished runs committed under
#    results/enwiki/runs (sweep skips them) and clears unfinished run folders (they restart);
# 3. runs the groups below in order with python -m scripts.sweep enwiki --time_budget <what is left
#    of BUDGET_S> (no run starts after BUDGET_S seconds; a started one finishes, ~2-3 minutes);
#    NGPU runs at once, one per GPU (default: all GPUs the machine shows);
# 4. packs config.json, log.jsonl, summary.json and train.log of every run (no checkpoints) into
#    $OUT/enwiki_runs.tar.gz, every 30 s and at the end, so a command killed at its time limit still
#    returns what finished. Here: tar xzf enwiki_runs.tar.gz -C results/enwiki  (-> results/enwiki/runs/)
#
# The seed-1337 runs of MHA and the Tucker rows keep ckpt.pt in $RUNS/<run>/ on the GPU machine only
# (~1.5 GB each with the optimizer state): the conversion study must run there, in the same sitting.
# Env: RUNS, OUT (default out-enwiki/ship), NGPU (default: all GPUs) or GPUS (ids, e.g. 1,2,3),
# PYTHON (default python3), DRY_RUN=1 (print the sweep commands, run nothing).
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET=330
if [[ $# -gt 0 && $1 != "--" ]]; then BUDGET=$1; shift; fi
[[ $# -gt 0 && $1 == "--" ]] && shift
EXTRA=("$@")  # train.py overrides for every run
PY=${PYTHON:-python3}
RUNS=${RUNS:-out-enwiki/runs}
OUT=${OUT:-out-enwiki/ship}
DRY=${DRY_RUN:-0}
export PYTHONUNBUFFERED=1
t0=$(date +%s)

if [[ -n ${GPUS:-} ]]; then  # e.g. GPUS=1,2,3: leave GPU 0 to other work
    NGPU=$(tr ',' '\n' <<<"$GPUS" | grep -c .)
else
    if [[ -z ${NGPU:-} ]]; then
        NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
        [[ $NGPU -ge 1 ]] || NGPU=1
    fi
    GPUS=$(seq -s, 0 $((NGPU - 1)))
fi

pack() {  # summaries and logs of every run -> $OUT/enwiki_runs.tar.gz (atomically)
    mkdir -p "$OUT"
    [[ -d $RUNS ]] || return 0
    local rc=0  # tar exits 1 when a log grew while it was read: the archive is still good
    tar -czf "$OUT/enwiki_runs.tar.gz.tmp" -C "$(dirname "$RUNS")" --warning=no-file-changed \
        --exclude='*.pt' --exclude='*.tmp.*' "$(basename "$RUNS")" || rc=$?
    if [[ $rc -le 1 ]]; then mv -f "$OUT/enwiki_runs.tar.gz.tmp" "$OUT/enwiki_runs.tar.gz"; fi
    return 0
}

if [[ $DRY != 1 ]]; then
    $PY -m data.enwiki.prepare --unpack .carry/enwiki
    mkdir -p "$RUNS"
    # finished runs from earlier sittings (committed here) are skipped; unfinished folders restart clean
    $PY - "$RUNS" <<'EOF'
import json, shutil, sys
from pathlib import Path

def finished(d):
    try:
        return bool(json.loads((d / "summary.json").read_text()).get("finished"))
    except (OSError, ValueError):
        return False

runs, done = Path(sys.argv[1]), Path("results/enwiki/runs")
for d in sorted(runs.iterdir()):
    if d.is_dir() and not finished(d):
        print(f"clearing unfinished {d}")
        shutil.rmtree(d)
for d in sorted(done.iterdir()) if done.is_dir() and done.resolve() != runs.resolve() else []:
    if finished(d) and not finished(runs / d.name):
        shutil.copytree(d, runs / d.name, dirs_exist_ok=True)
print(f"{runs}: {sum(finished(d) for d in runs.iterdir())} finished run(s) already")
EOF
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader || true
    (  # the packer: its sleep must end with it (a left-over sleep would hold the command's output open)
        trap 'kill $s 2>/dev/null; exit 0' TERM
        while :; do sleep 30 & s=$!; wait $s; pack; done
    ) &
    PACKER=$!
    trap 'kill $PACKER 2>/dev/null || true; pack' EXIT
fi

group() {  # rows rope seeds [--save-checkpoints]
    local left=$((BUDGET - ($(date +%s) - t0)))
    if [[ $DRY != 1 && $left -le 0 ]]; then
        echo "time budget spent: not started: rows $1, RoPE $2, seeds $3"
        return 0
    fi
    local args=(enwiki --rows "$1" --rope "$2" --seeds "$3" --jobs "$NGPU" --gpus "$GPUS"
                --results_dir "$RUNS" --time_budget "$left" ${4:+"$4"})
    [[ $DRY == 1 ]] && args+=(--dry-run)
    echo "== $(($(date +%s) - t0))s: rows $1, RoPE $2, seeds $3 ${4:-} (budget left ${left}s)"
    $PY -m scripts.sweep "${args[@]}" -- "${EXTRA[@]}" || echo "(some runs failed, see above; continuing)"
}

# priority order: MHA and Tucker [8,64,64] (learned positions first), MLA shared 128 and GQA-2, the
# remaining rows, then the seed spread. Checkpoints: seed-1337 runs of MHA and the Tucker rows.
CK=--save-checkpoints
if [[ $NGPU -ge 3 ]]; then  # all four at once; on 1-2 GPUs learned positions first
    group mha,tucker_8_64_64 both 1337 $CK
else
    group mha,tucker_8_64_64 off 1337 $CK
    group mha,tucker_8_64_64 on 1337 $CK
fi
group mla_shared128,gqa2 both 1337
group tucker_8_128_128,tucker_8_128_64 both 1337 $CK
group gqa4,mla_gqa2_equiv,mla_gqa2_equiv_latent,mla_shared_latent128 both 1337
group mha,tucker_8_64_64 both 1,2

if [[ $DRY != 1 ]]; then
    $PY - "$RUNS" <<'EOF'
import json, sys
from pathlib import Path
print("finished runs: final val loss, wall time")
for d in sorted(Path(sys.argv[1]).iterdir()):
    try:
        s = json.loads((d / "summary.json").read_text())
    except (OSError, ValueError):
        print(f"  {d.name:36s} (no summary)")
        continue
    print(f"  {d.name:36s} {s.get('final_val_loss') or float('nan'):.4f}  {s.get('wall_time_s') or 0:6.0f}s "
          f"{'' if s.get('finished') else 'UNFINISHED ' + str(s.get('stopped_reason'))}"
          f"{'  ckpt' if (d / 'ckpt.pt').exists() else ''}")
EOF
fi
echo "done in $(($(date +%s) - t0))s"
