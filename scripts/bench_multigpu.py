"""
Several GPUs (issue 16): scaling, DDP vs FSDP, resume across world sizes, a killed rank. Every
measurement is train.py itself (python train.py for one process, torchrun for several), so what is
measured is what users run; this script only launches, reads summary.json / log.jsonl and compares.

    # DDP scaling: the same global batch (480 x 1024 = 40 micro-steps of 12) on 1, 2 and 4 GPUs
    python -m scripts.bench_multigpu scaling --configs config/enwiki_mha.py,config/enwiki_tucker_8_64_64.py \\
        --nprocs 1,2,4 --batch_size 12 --global_batch 480 --iters 16 --out_dir out-multigpu/scaling \\
        -- --data_dir=data/enwiki
    # DDP vs FSDP2 (the LLaMA-3 1B rows; enwiki tokens stand in for OpenWebText2)
    python -m scripts.bench_multigpu scaling --configs config/owt2_llama1b_gqa8.py --modes ddp,fsdp --nprocs 4 \\
        --batch_size 2 --global_batch 32 --iters 10 --out_dir out-multigpu/fsdp -- --data_dir=data/enwiki
    # a checkpoint of a 4-process run continued on 4, 2 and 1 processes (and an uninterrupted run)
    python -m scripts.bench_multigpu resume --configs config/enwiki_mha.py --from_nproc 4 --nprocs 4,2,1 \\
        --batch_size 12 --global_batch 480 --split_iter 8 --iters 16 --reference out-multigpu/scaling/enwiki_mha-ddp-4 \\
        --out_dir out-multigpu/resume -- --data_dir=data/enwiki
    # kill -9 one rank of a 2-process run: how fast the job ends, and is the last checkpoint intact
    python -m scripts.bench_multigpu kill --configs config/enwiki_mha.py --nprocs 2 --batch_size 12 \\
        --global_batch 48 --out_dir out-multigpu/kill -- --data_dir=data/enwiki

`python -m scripts.bench_multigpu render DIR ...` rewrites the .md tables from the .json files.

Arguments after `--` go to every train.py run (last, so they win). Each subcommand writes
<out_dir>/<subcommand>.json and .md (the table, the commands, the GPU) and keeps every run folder.
Each job runs in its own process group; `--run_timeout S` stops a run that takes longer than S seconds
(its workers' stacks printed into its log first: train.py prints every thread's stack on SIGUSR1).

Timing: ms per iteration is the median of log.jsonl's wall-clock ms_per_iter (log_interval=1: one
host sync per iteration, as nanoGPT) over the iterations after the first --skip (compile, allocator
warm-up); forward/backward/optimizer are summary.json's CUDA-event medians of rank 0 (train.py drops
its first 5 iterations there). Scaling efficiency at K processes = tokens/s(K) / (K x tokens/s(1))
of the same config and mode. The global batch is the same at every K (gradient_accumulation_steps =
global_batch / batch_size, divided over the ranks by train.py), and train.py draws the same global
batches whatever the world size, so the loss curves of different K must agree up to reduction order
(bf16): the tables give the largest difference per iteration against the first K.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.bench_multigpu ...")

from checkpoint import TRAINING_KEYS, log_losses, pid_alive, read_checkpoint, read_json, read_log  # noqa: E402


ARGV_FILE = "bench_argv.json"


def is_done(out_dir: Path, argv: list) -> bool:
    """A finished run of exactly this command (a folder made by other arguments is run again)."""
    same = read_json(Path(out_dir) / ARGV_FILE) == argv[1:]  # the interpreter's path aside
    return same and bool((read_summary(out_dir) or {}).get("finished"))


def fresh_copy(src: Path, dst: Path) -> None:
    """dst = a copy of the run folder src to continue from its checkpoint: its summary and bench
    record removed, so only the continued run can mark dst finished."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    for name in ("summary.json", ARGV_FILE):
        (dst / name).unlink(missing_ok=True)


def train_losses(out_dir: Path) -> dict:
    return log_losses(out_dir)[0]


def read_summary(out_dir: Path):
    return read_json(Path(out_dir) / "summary.json")


def launcher(nproc: int) -> list:
    """python train.py for one process, torchrun (one node) for several."""
    if nproc == 1:
        return [sys.executable, "train.py"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "train.py"]


def train_argv(config: str, nproc: int, args, out_dir: Path, mode: str = "ddp", iters: int | None = None,
               eval_interval: int | None = None, save: bool = False, resume: bool = False) -> list:
    if args.global_batch % args.batch_size:
        raise ValueError(f"--global_batch={args.global_batch} is not a multiple of --batch_size={args.batch_size}")
    accum = args.global_batch // args.batch_size
    if accum % nproc:
        raise ValueError(f"--global_batch / --batch_size = {accum} micro-steps do not divide over {nproc} processes")
    iters = iters or args.iters
    argv = launcher(nproc) + [config]
    argv += [f"--batch_size={args.batch_size}", f"--gradient_accumulation_steps={accum}", f"--max_iters={iters}",
             f"--eval_interval={eval_interval or iters}", f"--eval_iters={args.eval_iters}", "--eval_full_val=False",
             "--log_interval=1", f"--save_checkpoint={save}", f"--out_dir={out_dir}", f"--fsdp={mode == 'fsdp'}"]
    if resume:
        argv.append("--init_from=resume")
    return argv + list(args.extra)


def show(argv) -> str:
    return shlex.join(argv)


def run_train(argv: list, out_dir: Path, log_name: str = "train.log", timeout: float | None = None) -> int:
    """Run train.py (its output into out_dir/log_name); returns the exit code, 124 if it ran past
    timeout seconds. The job runs in its own process group, and whatever of it is left when this
    returns (a timeout, an interrupt, a worker orphaned by its launcher) is killed with it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"$ {show(argv)}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if "torch.distributed.run" in argv and not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // 2 // max(1, _nproc_of(argv))))
    (out_dir / ARGV_FILE).write_text(json.dumps(argv[1:]))
    t0 = time.time()
    with open(out_dir / log_name, "w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = 124
            print(f"  ran past {timeout:.0f} s: stopped, with every process it started", flush=True)
            for pid in _children(proc.pid) if "torch.distributed.run" in argv else [proc.pid]:
                try:
                    os.kill(pid, signal.SIGUSR1)  # train.py prints its stacks into the log: where it hung
                except ProcessLookupError:
                    pass
            time.sleep(2)
        finally:
            _kill_job(proc)
    print(f"  exit {rc} after {time.time() - t0:.0f} s", flush=True)
    if rc != 0:
        print("  " + "\n  ".join((out_dir / log_name).read_text().splitlines()[-(60 if rc == 124 else 15):]), flush=True)
    return rc


def _kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL a job started with start_new_session: every process below the launcher (torchrun starts
    each worker in a session of its own, outside the launcher's process group; found before the launcher
    dies, while they are still its children), then the launcher's process group."""
    for pid in _descendants(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing of it left
    proc.wait()


def _nproc_of(argv) -> int:
    for a in argv:
        if a.startswith("--nproc_per_node="):
            return int(a.split("=")[1])
    return 1


def run_stats(out_dir: Path, skip: int, tokens_per_iter: int) -> dict:
    """What one finished run measured."""
    s = read_summary(out_dir) or {}
    recs = [r for r in read_log(out_dir) if "loss" in r]
    wall = [r["ms_per_iter"] for r in recs if r["iter"] > skip]
    ms = statistics.median(wall) if wall else None
    checks = s.get("rank_weight_checksums") or []
    phases = s.get("ms_per_iter") or {}
    return dict(finished=bool(s.get("finished")), ms_per_iter=ms, timed_iters=len(wall),
                tokens_per_s=tokens_per_iter / ms * 1e3 if ms else None,
                fwd_ms=phases.get("fwd"), bwd_ms=phases.get("bwd"), opt_ms=phases.get("opt"),
                peak_memory_gib=max(s["peak_memory_gib"]) if s.get("peak_memory_gib") else None,
                ranks_identical=bool(checks) and all(c == checks[0] for c in checks), ranks=len(checks),
                device=s.get("device_name"), losses=train_losses(out_dir), final_val_loss=s.get("final_val_loss"))


def max_loss_diff(a: dict, b: dict):
    common = sorted(set(a) & set(b))
    return (max(abs(a[i] - b[i]) for i in common), len(common)) if common else (None, 0)


def fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def scaling(args) -> dict:
    rows = []
    tokens = args.global_batch * args.block_size
    for config in args.configs:
        name = Path(config).stem
        for mode in args.modes:
            base = None
            for k in args.nprocs:
                out = Path(args.out_dir) / f"{name}-{mode}-{k}"
                argv = train_argv(config, k, args, out, mode)
                if not is_done(out, argv):
                    shutil.rmtree(out, ignore_errors=True)
                    if args.deadline and time.time() > args.deadline:
                        print(f"time budget spent: {out.name} not started", flush=True)
                        continue
                    run_train(argv, out, timeout=args.run_timeout)
                st = run_stats(out, args.skip, tokens)
                row = dict(config=config, mode=mode, nproc=k, command=show(argv), out_dir=str(out), **st)
                if base is None and st["finished"]:
                    base = row
                if base is not None and st["finished"] and row["tokens_per_s"] and base["tokens_per_s"]:
                    row["efficiency"] = row["tokens_per_s"] / (k / base["nproc"] * base["tokens_per_s"])
                    row["max_loss_diff_vs_first"], row["loss_iters_compared"] = max_loss_diff(base["losses"], st["losses"])
                rows.append(row)
    return add_ratios(dict(kind="scaling", global_batch=args.global_batch, batch_size=args.batch_size, block_size=args.block_size,
                iters=args.iters, skip=args.skip, rows=rows))


def add_ratios(res: dict) -> dict:
    """Each row's iteration time against the first config's at the same mode and GPU count."""
    rows = res["rows"]
    first = Path(rows[0]["config"]).stem if rows else None
    res["first_config"] = first
    for row in rows:
        ref = next((r for r in rows if Path(r["config"]).stem == first and r["mode"] == row["mode"]
                    and r["nproc"] == row["nproc"] and r["ms_per_iter"]), None)
        row["ms_vs_first_config"] = row["ms_per_iter"] / ref["ms_per_iter"] if ref and row["ms_per_iter"] else None
    return res


def scaling_md(res: dict) -> str:
    add_ratios(res)
    lines = [f"Global batch {res['global_batch']} x {res['block_size']} tokens (micro-batch {res['batch_size']}), "
             f"{res['iters']} iterations, ms/iter = median wall time of iterations > {res['skip']}.", "",
             "Scaling efficiency is against the first finished row of the same config and mode.", "",
             f"| config | mode | GPUs | finished | ms/iter | vs {res.get('first_config', 'first config')} | tokens/s | scaling eff. "
             "| fwd / bwd / opt ms (rank 0) | peak GiB/GPU | ranks' weights identical | max abs loss diff vs first row (iters) "
             "| loss first → last iter |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in res["rows"]:
        diff = "-" if r.get("max_loss_diff_vs_first") is None else \
            f"{r['max_loss_diff_vs_first']:.1e} ({r['loss_iters_compared']})"
        its = sorted(r["losses"], key=int)
        curve = f"{r['losses'][its[0]]:.3f} → {r['losses'][its[-1]]:.3f}" if its else "-"
        lines.append(f"| {Path(r['config']).stem} | {r['mode']} | {r['nproc']} | {'yes' if r['finished'] else 'NO'} | "
                     f"{fmt(r['ms_per_iter'])} | "
                     f"{fmt(r.get('ms_vs_first_config'), '.3f')} | {fmt(r['tokens_per_s'], ',.0f')} | {fmt(r.get('efficiency'), '.1%')} | "
                     f"{fmt(r['fwd_ms'])} / {fmt(r['bwd_ms'])} / {fmt(r['opt_ms'])} | {fmt(r['peak_memory_gib'], '.2f')} | "
                     f"{'yes' if r['ranks_identical'] else 'NO'} ({r['ranks']}) | {diff} | {curve} |")
    paper = paper_comparison_md(res)
    return "\n".join(lines + ([""] + paper if paper else []))


def paper_comparison(res: dict) -> list:
    """Rows whose config file is a row of the paper's LLaMA-3 1B timing table (scripts/paper_tables.py),
    at the same mode and GPU count as its GQA-8 row: our iteration, forward and backward times over
    GQA-8's and over MHA's beside the paper's (its ms are not comparable: 4 H100s, GPT-NeoX)."""
    from scripts.paper_tables import TABLES
    by_name = {Path(row.config).name: row for row in TABLES["llama1b"].rows}  # config/x.py, ./config/x.py, ...
    ours = [(by_name[Path(r["config"]).name], r) for r in res["rows"]
            if Path(r["config"]).name in by_name and r.get("finished", True) and r.get("ms_per_iter")]
    if not ours:
        return []
    needed = {row.id for row, _ in ours} | {"gqa8"}
    flops = {row.id: llama_flops_per_token(row, res["block_size"]) for row in TABLES["llama1b"].rows if row.id in needed}
    out = []
    for row, r in ours:
        refs = {ref_row.id: ref for ref_row, ref in ours if ref["mode"] == r["mode"] and ref["nproc"] == r["nproc"]}
        item = dict(id=row.id, label=row.label, mode=r["mode"], nproc=r["nproc"], ms_per_iter=r["ms_per_iter"],
                    flops_per_token=flops[row.id], flops_vs_gqa8=flops[row.id] / flops["gqa8"])
        for base in ("gqa8", "mha"):
            ref = refs.get(base)
            p, pb = row.paper["on"], next(x for x in TABLES["llama1b"].rows if x.id == base).paper["on"]
            item[f"iter_vs_{base}"] = r["ms_per_iter"] / ref["ms_per_iter"] if ref else None
            item[f"paper_iter_vs_{base}"] = p["train_iter_ms"] / pb["train_iter_ms"]
            for phase in ("fwd", "bwd"):
                ok = ref and r.get(f"{phase}_ms") and ref.get(f"{phase}_ms")
                item[f"{phase}_vs_{base}"] = r[f"{phase}_ms"] / ref[f"{phase}_ms"] if ok else None
                item[f"paper_{phase}_vs_{base}"] = p[f"{phase}_ms"] / pb[f"{phase}_ms"]
        out.append(item)
    return out


def llama_flops_per_token(row, block_size: int) -> int:
    """Training FLOPs per token (forward + backward) of a paper row's model (its config as train.py
    resolves it) at block_size, by model.flops_per_token: built on the meta device, no weights allocated."""
    import dataclasses
    import torch
    from model import GPT, GPTConfig
    from scripts.paper_tables import build_config
    keys = {f.name for f in dataclasses.fields(GPTConfig)}
    cfg = {k: v for k, v in build_config(row, "on").items() if k in keys}
    with torch.device("meta"):
        model = GPT(GPTConfig(**{**cfg, "block_size": block_size}))
    return model.flops_per_token(block_size)


def paper_comparison_md(res: dict) -> list:
    items = paper_comparison(res)
    if not items:
        return []
    lines = ["The paper's tab:owt2_llama1b_timing beside these rows (ratios at the same mode and GPU count; the "
             "paper: 128 x 4096 tokens per iteration on 2 nodes x 2 H100, GPT-NeoX). FLOPs ×GQA-8: this "
             "model's training FLOPs per token at the run's sequence length (model.flops_per_token) over GQA-8's.", "",
             "| method | mode | GPUs | ms/iter | FLOPs ×GQA-8 | iter ×GQA-8 | paper | fwd ×GQA-8 | paper | bwd ×GQA-8 "
             "| paper | iter ×MHA | paper |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for it in items:
        lines.append(f"| {it['label']} | {it['mode']} | {it['nproc']} | {fmt(it['ms_per_iter'])} | "
                     f"{it['flops_vs_gqa8']:.3f} | {fmt(it['iter_vs_gqa8'], '.3f')} | {it['paper_iter_vs_gqa8']:.3f} | "
                     f"{fmt(it['fwd_vs_gqa8'], '.3f')} | {it['paper_fwd_vs_gqa8']:.3f} | "
                     f"{fmt(it['bwd_vs_gqa8'], '.3f')} | {it['paper_bwd_vs_gqa8']:.3f} | "
                     f"{fmt(it['iter_vs_mha'], '.3f')} | {it['paper_iter_vs_mha']:.3f} |")
    return lines


def resume(args) -> dict:
    """A run of --from_nproc processes to --split_iter (checkpoint there), continued to --iters on each
    of --nprocs process counts from a copy of that folder; per-iteration losses compared with the
    continuation on --from_nproc and with --reference (an uninterrupted run of the same settings)."""
    config = args.configs[0]
    name = Path(config).stem
    root = Path(args.out_dir)
    src = root / f"{name}-{args.from_nproc}-to{args.split_iter}"
    runs = []
    src_argv = train_argv(config, args.from_nproc, args, src, iters=args.split_iter, save=True)
    if not (src / "ckpt.pt").exists() or not is_done(src, src_argv):
        shutil.rmtree(src, ignore_errors=True)
        run_train(src_argv, src, timeout=args.run_timeout)
    runs.append(dict(role="source", nproc=args.from_nproc, out_dir=str(src), finished=bool((read_summary(src) or {}).get("finished")),
                     command=show(train_argv(config, args.from_nproc, args, src, iters=args.split_iter, save=True))))
    conts = {}
    for k in args.nprocs:
        dst = root / f"{name}-{args.from_nproc}-to{args.split_iter}-then-{k}"
        argv = train_argv(config, k, args, dst, iters=args.iters, eval_interval=args.split_iter, resume=True)
        if not is_done(dst, argv) and (src / "ckpt.pt").exists():
            fresh_copy(src, dst)
            run_train(argv, dst, log_name="train_resumed.log", timeout=args.run_timeout)
        losses = {i: v for i, v in train_losses(dst).items() if i > args.split_iter}
        conts[k] = losses
        s = read_summary(dst) or {}
        checks = s.get("rank_weight_checksums") or []
        runs.append(dict(role="continued", nproc=k, out_dir=str(dst), command=show(argv), finished=bool(s.get("finished")),
                         ranks_identical=bool(checks) and all(c == checks[0] for c in checks),
                         final_val_loss=s.get("final_val_loss"), losses=losses))
    ref_losses = None
    if args.reference:
        ref_losses = {i: v for i, v in train_losses(Path(args.reference)).items() if i > args.split_iter}
    first = conts.get(args.from_nproc)
    for r in runs[1:]:
        r["max_loss_diff_vs_same_nproc"], r["iters_compared"] = max_loss_diff(first or {}, r["losses"])
        if ref_losses:
            r["max_loss_diff_vs_uninterrupted"], _ = max_loss_diff(ref_losses, r["losses"])
    return dict(kind="resume", config=config, from_nproc=args.from_nproc, split_iter=args.split_iter, iters=args.iters,
                global_batch=args.global_batch, reference=args.reference,
                reference_losses=ref_losses, runs=runs)


def resume_md(res: dict) -> str:
    lines = [f"{Path(res['config']).stem}: {res['from_nproc']} processes to iteration {res['split_iter']} "
             f"(checkpoint), then continued to {res['iters']} on each process count (global batch "
             f"{res['global_batch']}). Loss differences are the largest over iterations "
             f"{res['split_iter'] + 1}..{res['iters']}.", "",
             f"| continued on | finished | ranks' weights identical | max abs loss diff vs continued on {res['from_nproc']} "
             f"| vs uninterrupted run | final val loss |", "| --- | --- | --- | --- | --- | --- |"]
    for r in res["runs"][1:]:
        lines.append(f"| {r['nproc']} | {r['finished']} | {'yes' if r['ranks_identical'] else 'NO'} | "
                     f"{fmt(r['max_loss_diff_vs_same_nproc'], '.2e')} ({r['iters_compared']} iters) | "
                     f"{fmt(r.get('max_loss_diff_vs_uninterrupted'), '.2e')} | {fmt(r['final_val_loss'], '.4f')} |")
    return "\n".join(lines)


def _parents() -> dict:
    """{pid: parent pid} of every process, from /proc."""
    parents = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parents[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
    return parents


def _children(pid: int) -> list:
    return [p for p, parent in _parents().items() if parent == pid]


def _descendants(pid: int) -> list:
    parents, found, frontier = _parents(), [], {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier}
        found += sorted(frontier)
    return found


def _local_rank(pid: int):
    try:
        env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"LOCAL_RANK="):
            return int(e.split(b"=")[1])
    return None


def _stop(proc: subprocess.Popen, workers: list) -> None:
    """Kill a torchrun job: the workers seen (by pid: a killed launcher no longer lists them), then
    everything left of the job."""
    for pid in set(workers):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _kill_job(proc)


def kill(args) -> dict:
    """A torchrun job with a checkpoint every --ckpt_every iterations; once the log passes
    --kill_after_iter (at an iteration that writes no checkpoint, so none is being written), SIGKILL
    the worker of local rank --victim. Measures the seconds until torchrun exits and which workers
    are left alive, then loads the checkpoint and continues it for --ckpt_every iterations on the
    same process count (the same learning-rate schedule)."""
    config, k = args.configs[0], args.nprocs[0]
    if k < 2:
        raise ValueError("--nprocs: kill needs a job of at least 2 processes")
    out = Path(args.out_dir) / f"{Path(config).stem}-{k}-killed"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schedule = ["--lr_decay_iters=10000"]  # the killed run's and the continuation's
    argv = train_argv(config, k, args, out, iters=10_000, eval_interval=args.ckpt_every, save=True) + schedule
    print(f"$ {show(argv)}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    res = dict(kind="kill", config=config, nproc=k, command=show(argv), victim_local_rank=args.victim)
    workers, killed_at = [], None
    with open(out / "train.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            t_start = time.time()
            while proc.poll() is None and time.time() - t_start < args.timeout:
                its = [r["iter"] for r in read_log(out) if "loss" in r]
                if (its and its[-1] >= args.kill_after_iter and its[-1] % args.ckpt_every != 0
                        and (out / "ckpt.pt").exists()):
                    workers = _children(proc.pid)
                    victims = [p for p in workers if _local_rank(p) == args.victim]
                    if victims:
                        os.kill(victims[0], signal.SIGKILL)
                        killed_at = time.time()
                        res.update(killed_pid=victims[0], killed_after_iter=its[-1])
                        break
                time.sleep(0.05)
            if killed_at is None:
                raise RuntimeError(f"the job never reached iteration {args.kill_after_iter} with a checkpoint; "
                                   f"see {out}/train.log")
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                rc = None  # not ended promptly (the table says so); cleaned up below
            res["seconds_to_exit"] = time.time() - killed_at
            res["exit_code"] = rc
            time.sleep(1)
            res["workers_left"] = [p for p in workers if pid_alive(p)]  # before the clean-up below
        finally:
            _stop(proc, workers)
    # What the checkpoint must hold, from the log as the job left it (not from the iteration the kill was
    # decided at: on a loaded host the job can pass another evaluation before the signal lands): train.py
    # saves, atomically, at every evaluation (always_save_checkpoint) or at those that improved.
    records = read_log(out)
    always = (read_json(out / "config.json") or {}).get("always_save_checkpoint", True)
    saves = [r["iter"] for r in records if "val_loss" in r and r["iter"] > 0 and (always or r["best_iter"] == r["iter"])]
    res["last_logged_iter"] = max((r["iter"] for r in records if "iter" in r), default=None)
    res["expected_checkpoint_iter"] = saves[-1] if saves else None
    try:
        ck = read_checkpoint(str(out / "ckpt.pt"), TRAINING_KEYS)
        res.update(checkpoint_loads=True, checkpoint_iter=ck["iter_num"])
        del ck
    except (ValueError, FileNotFoundError) as e:
        res.update(checkpoint_loads=False, checkpoint_error=str(e))
    res["temp_files_left"] = sorted(p.name for p in out.iterdir() if ".tmp" in p.name)
    if res.get("checkpoint_loads"):  # the checkpoint continues
        cont = Path(args.out_dir) / f"{Path(config).stem}-{k}-killed-resumed"
        fresh_copy(out, cont)
        until = res["checkpoint_iter"] + args.ckpt_every
        argv2 = train_argv(config, k, args, cont, iters=until, eval_interval=args.ckpt_every, resume=True) + schedule
        rc2 = run_train(argv2, cont, log_name="train_resumed.log", timeout=args.timeout)
        s = read_summary(cont) or {}
        res.update(resume_command=show(argv2), resume_exit_code=rc2, resumed_finished=bool(s.get("finished")),
                   resumed_iters=s.get("iters"))
    return res


def kill_md(res: dict) -> str:
    return "\n".join([
        f"{Path(res['config']).stem} on {res['nproc']} processes, SIGKILL to local rank {res['victim_local_rank']} "
        f"after iteration {res.get('killed_after_iter')}:", "",
        "| seconds until torchrun exited | exit code | workers left alive | checkpoint loads | its iteration "
        "(expected) | temp files left | resumed on the same count to |", "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {res['seconds_to_exit']:.1f} | {res['exit_code']} | {len(res['workers_left'])} | {res.get('checkpoint_loads')} | "
        f"{res.get('checkpoint_iter')} ({res.get('expected_checkpoint_iter', '-')}) | {len(res['temp_files_left'])} | "
        f"{res.get('resumed_iters')} ({'finished' if res.get('resumed_finished') else 'not finished'}) |"])


RENDER = {"scaling": scaling_md, "resume": resume_md, "kill": kill_md}


def footer(res: dict) -> str:
    return f"\n\n{res['gpu']} (x{res['gpus_visible']} visible), torch {res['torch_version']}, {res['date']}.\n"


def render(out_dir: str) -> list:
    """Rewrite <kind>.md from <kind>.json in out_dir (after a change to the tables' format)."""
    done = []
    for kind, fn in RENDER.items():
        path = Path(out_dir) / f"{kind}.json"
        if path.exists():
            res = json.loads(path.read_text())
            (Path(out_dir) / f"{kind}.md").write_text(fn(res) + footer(res))
            done.append(str(Path(out_dir) / f"{kind}.md"))
    return done


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["render"]:  # python -m scripts.bench_multigpu render DIR [DIR ...]
        for d in argv[1:]:
            written = render(d)
            print(f"{d}: " + ("wrote " + ", ".join(written) if written else "nothing to render (no result files)"))
        return None
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("scaling", "resume", "kill"))
    ap.add_argument("--configs", required=True, help="comma-separated config files (resume, kill: the first)")
    ap.add_argument("--nprocs", default="1,2,4", help="process (GPU) counts")
    ap.add_argument("--modes", default="ddp", help="scaling: ddp, fsdp or both (comma-separated)")
    ap.add_argument("--batch_size", type=int, default=12, help="sequences per micro-step per process")
    ap.add_argument("--global_batch", type=int, default=480, help="sequences per iteration over all processes")
    ap.add_argument("--block_size", type=int, default=0, help="tokens per sequence, for tokens/s (0: read the config)")
    ap.add_argument("--iters", type=int, default=16)
    ap.add_argument("--skip", type=int, default=5, help="iterations left out of the wall-clock median")
    ap.add_argument("--eval_iters", type=int, default=2, help="batches per evaluation (at the first and last iteration)")
    ap.add_argument("--from_nproc", type=int, default=4, help="resume: the process count that writes the checkpoint")
    ap.add_argument("--split_iter", type=int, default=8, help="resume: the checkpoint's iteration")
    ap.add_argument("--reference", default="", help="resume: an uninterrupted run folder of the same settings")
    ap.add_argument("--ckpt_every", type=int, default=4, help="kill: iterations between checkpoints")
    ap.add_argument("--kill_after_iter", type=int, default=6, help="kill: SIGKILL once the log passes this iteration")
    ap.add_argument("--victim", type=int, default=1, help="kill: local rank of the process to kill")
    ap.add_argument("--timeout", type=float, default=600, help="kill: seconds to wait for each phase")
    ap.add_argument("--run_timeout", type=float, default=0,
                    help="scaling, resume: seconds a train.py run may take (0: no limit); one past it is stopped, "
                         "with every process it started")
    ap.add_argument("--time_budget", type=float, default=0, help="scaling: no run starts after this many seconds")
    ap.add_argument("--out_dir", required=True)
    args = ap.parse_args(argv)
    args.extra = extra
    args.run_timeout = args.run_timeout or None
    args.configs = [c for c in args.configs.split(",") if c]
    missing = [c for c in args.configs if not (REPO / c).is_file()]  # the runs start in REPO (absolute paths too)
    if missing:  # before any run (each would start torchrun, then fail on its file)
        ap.error(f"--configs: {', '.join(missing)} not found")
    args.nprocs = [int(k) for k in args.nprocs.split(",") if k]
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in ("ddp", "fsdp"):
            ap.error(f"--modes: {m!r} is unknown: allowed 'ddp', 'fsdp'")
    if not args.block_size:
        from dataclasses import fields
        from configurator import parse_config
        from model import GPTConfig
        from train_config import TRAIN_DEFAULTS
        defaults = {**TRAIN_DEFAULTS, **{f.name: f.default for f in fields(GPTConfig)}}
        args.block_size = parse_config([args.configs[0], *[a for a in extra if a.startswith("--block_size=")]],
                                       defaults)["block_size"]
    args.deadline = time.time() + args.time_budget if args.time_budget else 0
    try:
        res = {"scaling": scaling, "resume": resume, "kill": kill}[args.kind](args)
    except ValueError as e:
        sys.exit(f"error: {e}")
    import torch
    res.update(gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", gpus_visible=torch.cuda.device_count(),
               torch_version=torch.__version__, extra_args=extra, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    md = RENDER[args.kind](res) + footer(res)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.kind}.json").write_text(json.dumps(res, indent=1, default=str))
    (out / f"{args.kind}.md").write_text(md)
    print(md)
    if args.kind == "scaling" and not any(r.get("finished") for r in res["rows"]):
        sys.exit("error: no run finished: each one's train.py log is train.log in its folder under --out_dir "
                 "(a missing dataset: give train.py --data_dir after --)")
    return res


if __name__ == "__main__":
    main()
