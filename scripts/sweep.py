"""
Run the rows of a paper table: one training run per (row, RoPE setting, seed).

    python -m scripts.sweep shakespeare --results_dir out-sweep   # all 23 rows x 2 RoPE settings, seed 1337
    python -m scripts.sweep shakespeare --rows mha,tucker_8_64_64 --rope on --seeds 1337,1,2 --jobs 4 --results_dir out-sweep
    python -m scripts.sweep shakespeare --results_dir out-sweep --dry-run -- --max_iters=3000 --compile=False
    python -m scripts.sweep owt --rows mha --nproc 8             # one run at a time over 8 GPUs (torchrun)

Without --results_dir the runs go to results/<table>/runs, which for shakespeare and enwiki holds the committed
runs (shakespeare's trained with --eval_interval=50 --patience=6 --eval_iters=10, but for six runs at eval_iters
200, MHA, GQA-4 and GQA-2 in both RoPE settings: results/shakespeare/table.md lists them): a command that would
train one of them with other settings stops, naming them.

Each run is `python train.py <row config> <RoPE override> --seed=S --out_dir=<results_dir>/<name>
--save_checkpoint=False` plus whatever follows `--` on this command line, with name `<row_id>-rope_<off|on>-s<seed>`;
its stdout/stderr go to <out_dir>/train.log. The rows come from scripts/paper_tables.py, the
same list the table printers use. --save-checkpoints (owt's default; --no-save-checkpoints turns it off) leaves out
--save_checkpoint=False: train.py keeps its ckpt.pt, which the zero-shot evaluation reads.

Resumable: a run whose <out_dir>/summary.json says finished=true is skipped, so the same
command can be re-issued after an interruption. An unfinished run starts over, or, with checkpoints kept, continues
from its ckpt.pt (--init_from=resume) when it started with the settings the command gives, how the model is computed
aside (model.COMPUTE_KEYS, which a resume may change); one with a checkpoint of other settings stops the sweep,
listed, before anything runs. A finished
run trained with other settings than the command gives (its config file and overrides, resolved;
where and how it ran aside: NOT_SETTINGS and model.COMPUTE_KEYS; a key the command leaves out is compared at its
default) stops the
sweep with a list of them, before anything runs, as do overrides that do not parse and a data folder without its
token files. Ctrl-C or a kill (SIGTERM) of the sweep stops the runs it started, which restart (or continue from
their checkpoints) on the next sweep.
With --jobs N, N runs go at once; --gpus 0,1,... pins job slot i to GPU i % len(gpus) (with --nproc P, to the i-th
group of P GPUs)
(several Shakespeare runs fit on one H200). Every --progress seconds (default 600) a line for each running run
says where it is (iteration, loss, last val loss, minutes); each finished run gets a line. Exits non-zero listing
the failed runs.
"""
import argparse
import faulthandler
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from queue import Queue

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.sweep ...")

from atomic_files import interrupt_on_sigterm  # noqa: E402
from scripts.paper_tables import ROPE_SETTINGS, TABLES, all_runs, format_override, run_overrides  # noqa: E402
from train_config import RUN_KEYS, TRAIN_DEFAULTS, data_dir_of  # noqa: E402

DEFAULT_SEEDS = "1337"  # nanoGPT's seed; the paper fixes one seed for all methods


def run_name(row_id: str, rope: str, seed: int) -> str:
    return f"{row_id}-rope_{rope}-s{seed}"


def is_finished(out_dir: Path) -> bool:
    try:
        with open(out_dir / "summary.json") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and bool(summary.get("finished"))  # JSON that is no object: no summary


# keys that say where and how a run ran, not what it trained: train_config's keys of how a process runs a run (those
# outside RUN_KEYS), and of the run's keys those that change no weight (data_dir: the same tokens in another
# machine's folder; logging and checkpoint saving). A finished run is the same run whatever they are
NOT_SETTINGS = (set(TRAIN_DEFAULTS) - set(RUN_KEYS)) | {"data_dir", "log_interval", "save_checkpoint",
                                                       "always_save_checkpoint"}


def resolved(cmd) -> dict:
    """The config a run's command gives train.py (its config file and overrides over train.py's defaults, as
    train.py resolves them). SystemExit with one line where it does not parse (an unknown key, a bad value):
    before any run starts."""
    from configurator import parse_config
    from scripts.paper_tables import default_train_keys
    args = cmd[cmd.index("train.py") + 1:]
    try:
        return parse_config([a if a.startswith("--") else str(REPO / a) for a in args], default_train_keys())
    except (ValueError, FileNotFoundError) as e:  # the command itself is wrong: say so before any run
        raise SystemExit(f"error: the command for {Path(_out_dir_of(cmd)).name} does not parse: {e}")


def _out_dir_of(cmd) -> str:
    return next((a.split("=", 1)[1] for a in cmd if a.startswith("--out_dir=")), "?")


def missing_data(cmd):
    """The token file a run would not find (its data_dir's train.bin or val.bin), with the command that makes it;
    None when both are there. SystemExit with one line where a key is out of range or the model keys make no
    model (train.py's own checks: every run would fail at its start)."""
    from model import GPTConfig
    from train_config import validate_train_config
    cfg = resolved(cmd)
    try:
        validate_train_config(cfg)
        GPTConfig.from_dict(cfg)  # its model keys
    except ValueError as e:
        raise SystemExit(f"error: the command for {Path(_out_dir_of(cmd)).name}: {e}")
    nproc = next((int(a.split("=", 1)[1]) for a in cmd if a.startswith("--nproc_per_node=")), 1)
    if cfg["gradient_accumulation_steps"] % nproc:  # train.py's own check, made in every process of every run
        raise SystemExit(f"error: the command for {Path(_out_dir_of(cmd)).name}: gradient_accumulation_steps="
                         f"{cfg['gradient_accumulation_steps']} must be a multiple of --nproc {nproc} (each DDP "
                         f"process takes its share of the micro-steps): give -- --gradient_accumulation_steps=N")
    data_dir = REPO / data_dir_of(cfg)  # runs start in REPO: a relative data_dir is REPO's
    for split in ("train", "val"):
        if not (data_dir / f"{split}.bin").is_file():
            prepare = f"python -m data.{cfg['dataset']}.prepare" if (REPO / "data" / cfg["dataset"]).is_dir() else \
                "its prepare script"
            return f"{data_dir / f'{split}.bin'} not found: make it first ({prepare}), or give -- --data_dir=FOLDER"
    return None


def settings_differ(cmd, out_dir: Path, source: str = "summary.json", ignore=()) -> list:
    """['key=finished run's value (this command: value)'] where the finished run in out_dir was trained with other
    settings than `cmd` gives (its config file and overrides, resolved as train.py resolves them, defaults
    included: a key the command leaves out is its default, which the run must have had too); [] when they agree or
    the summary holds no config to compare. A key the saved config lacks (one added to train.py since) is not
    compared. source="config.json": the same against the config an unfinished run started with, where one that
    cannot be read is a difference (a resume needs its settings known); `ignore`: keys not compared."""
    strict = source == "config.json"
    try:
        with open(out_dir / source) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return [f"{source} unreadable"] if strict else []
    if isinstance(saved, dict) and source == "summary.json":
        saved = saved.get("config")
    if not saved or not isinstance(saved, dict):
        return [f"{source} holds no config"] if strict else []
    from scripts.compare_runs import with_model_keys_filled
    asked = resolved(cmd)
    # the model keys as GPTConfig fills them on both sides: a resumed run's summary holds them filled in
    # (tucker_ranks_post=None as tucker_ranks), the command gives them raw
    asked, saved = with_model_keys_filled(asked), with_model_keys_filled(saved)
    same = lambda a, b: json.loads(json.dumps(a)) == json.loads(json.dumps(b))  # noqa: E731  tuples as lists
    return [f"{k}={saved[k]!r} (this command: {asked[k]!r})" for k in sorted(set(asked) - NOT_SETTINGS - set(ignore))
            if k in saved and not same(saved[k], asked[k])]


def _show_path(p: Path) -> str:
    """Paths inside the repo are written relative to it (commands run with cwd=REPO)."""
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p.resolve())


# tables whose runs keep their checkpoints unless --no-save-checkpoints: OpenWebText's (600,000 iterations a run, so
# an interrupted one continues; scripts.eval_zeroshot reads the checkpoints for the table's zero-shot columns). A
# checkpoint is ~1.5 GB (GPT-2 124M with AdamW's state): the table's 15 runs need ~23 GB of disk
CHECKPOINTED = {"owt"}


def build_command(row, rope, seed, out_dir: Path, patience=None, extra=(), nproc=1, save_checkpoints=False,
                  resume=False):
    """The argv of one run (cwd = repo root); resume: it continues from the ckpt.pt in out_dir."""
    launcher = [sys.executable, "train.py"] if nproc == 1 else \
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "train.py"]
    cmd = launcher + [row.config]
    cmd += [format_override(k, v) for k, v in run_overrides(row, rope).items()]
    cmd += [f"--seed={seed}", f"--out_dir={_show_path(out_dir)}",
            f"--wandb_run_name={row.table}-{run_name(row.id, rope, seed)}"]
    if patience is not None:
        cmd.append(f"--patience={patience}")
    if not save_checkpoints:
        # the Shakespeare and enwiki tables need only summary.json: 46 checkpoints of GPT-2 124M with AdamW state,
        # ~1.5 GB each (~69 GB), would not fit a one-GPU machine's 64 GB disk (owt's runs keep theirs: CHECKPOINTED)
        cmd.append("--save_checkpoint=False")
    if resume:
        cmd.append("--init_from=resume")
    cmd += list(extra)  # last, so the user's overrides win
    return cmd


def plan(table, rows=None, ropes=ROPE_SETTINGS, seeds=(1337,), results_dir=None, patience=None, extra=(), nproc=1,
         save_checkpoints=False):
    """[(name, out_dir, argv)] for every requested run, in table order."""
    results_dir = Path(results_dir) if results_dir else REPO / "results" / table / "runs"
    if rows is not None:
        known = {r.id for r in TABLES[table].rows}
        unknown = [r for r in rows if r not in known]
        if unknown:
            raise SystemExit(f"unknown row(s) {unknown} in table {table!r}; rows: {sorted(known)}")
    runs = []
    for row, rope in all_runs(table, rows, ropes):
        for seed in seeds:
            name = run_name(row.id, rope, seed)
            out_dir = results_dir / name
            cmd = build_command(row, rope, seed, out_dir, patience, extra, nproc, save_checkpoints)
            if save_checkpoints and resumable(cmd, out_dir):
                cmd = build_command(row, rope, seed, out_dir, patience, extra, nproc, save_checkpoints, resume=True)
            runs.append((name, out_dir, cmd))
    return runs


def holds_checkpoint(out_dir: Path) -> bool:
    """An unfinished run with a ckpt.pt: one a sweep that keeps checkpoints continues (resumable) or refuses."""
    return not is_finished(out_dir) and (out_dir / "ckpt.pt").is_file()


def finished_differs(cmd, out_dir: Path) -> list:
    """settings_differ against the finished run in out_dir (its summary.json), but for how the model is computed
    (model.COMPUTE_KEYS): a resume may change them (checkpoint_differs), and the summary then holds the resumed
    command's value; the same run, as NOT_SETTINGS' dtype and compile are."""
    from model import COMPUTE_KEYS
    return settings_differ(cmd, out_dir, ignore=COMPUTE_KEYS)


def checkpoint_differs(cmd, out_dir: Path) -> list:
    """settings_differ against the config the unfinished run in out_dir started with (its config.json), but for how
    the model is computed (model.COMPUTE_KEYS: a resume may change them, e.g. activation checkpointing after an
    out-of-memory); a config.json that cannot be read differs."""
    from model import COMPUTE_KEYS
    return settings_differ(cmd, out_dir, "config.json", ignore=COMPUTE_KEYS)


def resumable(cmd, out_dir: Path) -> bool:
    """Whether the run of `cmd` in out_dir continues from its checkpoint: unfinished, with a ckpt.pt, started with
    the settings `cmd` gives (else the sweep refuses it: starting over would set its checkpoint aside, and a second
    start over would replace that)."""
    return holds_checkpoint(out_dir) and not checkpoint_differs(cmd, out_dir)


def gpu_groups(gpus: str, nproc: int) -> list:
    """--gpus as the CUDA_VISIBLE_DEVICES of each job slot: slot i takes group i % len (a run of nproc processes
    takes nproc GPUs: '0,1,2,3' at nproc 2 is ['0,1', '2,3']); [] without --gpus. SystemExit with one line where
    --gpus names fewer than nproc."""
    ids = [g for g in gpus.split(",") if g]
    groups = [",".join(ids[j:j + nproc]) for j in range(0, len(ids) - nproc + 1, nproc)]
    if ids and not groups:
        raise SystemExit(f"error: --gpus {gpus} names {len(ids)} GPU(s), fewer than the {nproc} a run takes (--nproc)")
    return groups


def last_record(log_path: Path, key: str, block: int = 1 << 16, limit: int = 1 << 24):
    """The last complete JSON line of log_path whose `key` and "iter" are numbers (None if there is none in its
    last `limit` bytes): read backwards from the file's end in blocks (a run's log.jsonl grows by a line an
    iteration, its evaluations thousands of lines apart; a line being written is skipped)."""
    try:
        with open(log_path, "rb") as f:
            end = pos = f.seek(0, os.SEEK_END)
            carry = b""  # the start of a line that the block after this one began inside
            while pos > 0 and end - pos < limit:
                size = min(block, pos)
                pos -= size
                f.seek(pos)
                lines = (f.read(size) + carry).split(b"\n")
                carry = lines.pop(0) if pos > 0 else b""  # cut by the block's start: completed by the next block
                for line in reversed(lines):
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(record, dict) and all(isinstance(record.get(k), (int, float)) for k in (key, "iter")):
                        return record
    except OSError:
        pass
    return None


def progress_line(name: str, out_dir: Path, since: float) -> str:
    """'name: iter 1200/5000, loss 3.412 (last val 3.508 at 1000), 12 min' from the run's config.json and log."""
    try:
        with open(out_dir / "config.json") as f:
            config = json.load(f)
    except (OSError, ValueError):  # not written yet
        config = {}
    max_iters = config.get("max_iters") if isinstance(config, dict) else None
    last = last_record(out_dir / "log.jsonl", "loss")
    val = last_record(out_dir / "log.jsonl", "val_loss")
    minutes = f"{(time.time() - since) / 60:.0f} min"
    if last is None:
        return f"{name}: started, no iteration logged yet, {minutes}"
    of = f"/{max_iters}" if isinstance(max_iters, int) else ""
    seen = f" (last val {val['val_loss']:.3f} at {val['iter']})" if val else ""
    return f"{name}: iter {last['iter']}{of}, loss {last['loss']:.3f}{seen}, {minutes}"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after a bare `--` goes to train.py untouched
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=sorted(TABLES))
    ap.add_argument("--rows", default="all", help="comma-separated row ids, or 'all'")
    ap.add_argument("--rope", default="both", choices=["off", "on", "both"])
    ap.add_argument("--seeds", default=DEFAULT_SEEDS, help="comma-separated seeds")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--gpus", default="", help="comma-separated GPU ids; job slot i uses gpus[i %% len] (with --nproc "
                    "N the i-th group of N of them)")
    ap.add_argument("--nproc", type=int, default=1, help="GPUs per run (torchrun DDP) when > 1")
    ap.add_argument("--patience", type=int, default=None, help="early stopping, passed to train.py")
    ap.add_argument("--results_dir", default=None, help="default: results/<table>/runs")
    ap.add_argument("--save-checkpoints", dest="save_checkpoints", action=argparse.BooleanOptionalAction,
                    default=None, help="let train.py write ckpt.pt, and continue an unfinished run from it (default: "
                    f"on for {', '.join(sorted(CHECKPOINTED))}, whose checkpoints the zero-shot columns evaluate; "
                    "else --save_checkpoint=False, summaries only)")
    ap.add_argument("--time_budget", type=float, default=0,
                    help="seconds after which no new run is started (0 = none); the rest is left for a re-run")
    ap.add_argument("--progress", type=float, default=600, metavar="S",
                    help="every S seconds, a line for each running run: its last logged iteration and loss (0 = none)")
    ap.add_argument("--dry-run", dest="dry_run", action="store_true",
                    help="print the commands, each checked as train.py parses it, and run nothing")
    args, unknown = ap.parse_known_args(argv)
    if unknown:  # most often train.py's keys given without the `--` before them
        keys = [a for a in unknown if a.startswith("--") and "=" in a]
        ap.error(f"unrecognized arguments: {' '.join(unknown)}" + (
            f" (train.py's keys go after a bare `--`: python -m scripts.sweep {args.table} ... -- {' '.join(keys)})"
            if keys else ""))
    if args.nproc < 1:
        ap.error(f"--nproc {args.nproc}: GPUs per run, allowed >= 1")
    groups = gpu_groups(args.gpus, args.nproc)

    rows = None if args.rows == "all" else [r for r in args.rows.split(",") if r]
    ropes = ROPE_SETTINGS if args.rope == "both" else (args.rope,)
    try:
        seeds = list(dict.fromkeys(int(s) for s in args.seeds.split(",") if s))  # once each: one folder a seed
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: comma-separated integers")
    save_checkpoints = args.table in CHECKPOINTED if args.save_checkpoints is None else args.save_checkpoints
    runs = plan(args.table, rows, ropes, seeds, args.results_dir, args.patience, extra, args.nproc, save_checkpoints)
    todo = [r for r in runs if not is_finished(r[1])]
    skipped = len(runs) - len(todo)
    # a finished run is skipped only if it is the run this command asks for: a smoke sweep's 30-iteration runs
    # must not stand in for the real sweep's in the table
    stale = [(name, diff) for name, out_dir, cmd in runs if is_finished(out_dir)
             for diff in [finished_differs(cmd, out_dir)] if diff]
    # an unfinished run is not started over silently either: a long run's checkpoint would be set aside, and replaced
    # the next time
    held = [(name, diff) for name, out_dir, cmd in runs if save_checkpoints and holds_checkpoint(out_dir)
            for diff in [checkpoint_differs(cmd, out_dir)] if diff]
    for found, what, advice in ((stale, "finished run(s) were trained with", "remove those runs' folders to train them "
                                 "again"),
                                (held, "unfinished run(s) hold a checkpoint of", "move their ckpt.pt away to start them "
                                 "over")):
        if found:
            print(f"error: {len(found)} {what} other settings than this command gives:", file=sys.stderr)
            for name, diff in found:
                print(f"  {name}: {'; '.join(diff)}", file=sys.stderr)
            print(f"give another --results_dir, or {advice}", file=sys.stderr)
            return 2

    # every command parses (the overrides after `--` included) and finds its data: one line now, not a failed run a
    # row later. A dry run checks the same (a misspelled override is what it is for; ~2 s, most of it importing
    # torch for train.py's defaults), and prints the commands with a note where the data is not there yet.
    missing = next((m for m in map(missing_data, dict.fromkeys(tuple(c) for _, _, c in todo)) if m), None)
    if args.dry_run:
        for _, _, cmd in todo:
            print(shlex.join(cmd))
        if skipped:
            print(f"({skipped} finished run(s) skipped)", file=sys.stderr)
        if missing:
            print(f"note: {missing} (the sweep itself stops here)", file=sys.stderr)
        return 0
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    print(f"{args.table}: {len(runs)} runs, {skipped} already finished, {len(todo)} to do, {args.jobs} at once",
          flush=True)
    slots = Queue()
    for i in range(max(1, args.jobs)):
        slots.put(i)
    lock = threading.Lock()
    t0 = time.time()
    done, failed, not_started = [0], [], []
    children, stopping = set(), threading.Event()  # the running train.py processes; set when the sweep is stopped
    running = {}  # name -> (out_dir, start time) of each run in progress, for the progress lines

    def work(item):
        name, out_dir, cmd = item
        slot = slots.get()
        if stopping.is_set():
            slots.put(slot)
            return
        if args.time_budget and time.time() - t0 > args.time_budget:
            with lock:
                not_started.append(name)
            slots.put(slot)
            return
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            env = dict(os.environ)
            if groups:
                env["CUDA_VISIBLE_DEVICES"] = groups[slot % len(groups)]
            t = time.time()
            with open(out_dir / "train.log", "a") as log:  # after an earlier attempt's output, if any
                log.write("$ " + shlex.join(cmd) + "\n")
                log.flush()
                with lock:
                    if stopping.is_set():
                        return
                    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
                    children.add(proc)
                    running[name] = (out_dir, t)
                rc = proc.wait()
                with lock:
                    children.discard(proc)
                    running.pop(name, None)
            if stopping.is_set():  # stopped with the sweep: not a failure, it restarts on a re-run
                return
            # a zero exit without a finished summary is a failure too (e.g. crashed writer)
            ok = rc == 0 and is_finished(out_dir)
            with lock:
                done[0] += 1
                if not ok:
                    failed.append((name, rc, out_dir / "train.log"))
                status = "ok" if ok else f"FAILED (rc={rc})"
                print(f"[{done[0]}/{len(todo)}] {name}: {status} in {time.time() - t:.0f}s "
                      f"(elapsed {time.time() - t0:.0f}s)", flush=True)
        finally:
            slots.put(slot)

    ex = ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        with interrupt_on_sigterm():  # kill / a scheduler's stop: as Ctrl-C, the running train.py stopped too
            futures = [ex.submit(work, item) for item in todo]
            # waits of half a second: Python runs a signal's handler in this thread, between two waits, whichever
            # thread the signal was delivered to (a wait with no timeout can sleep through it)
            next_report = time.time() + args.progress
            while wait(futures, timeout=0.5).not_done:
                if args.progress > 0 and time.time() >= next_report:
                    next_report = time.time() + args.progress
                    with lock:
                        now = sorted(running.items())
                    for name, (out_dir, since) in now:
                        try:
                            line = progress_line(name, out_dir, since)
                        except Exception as e:  # a report, never a reason to stop the sweep
                            line = f"{name}: progress unreadable ({type(e).__name__}: {e})"
                        print(f"  {line}", flush=True)
            for future in futures:
                future.result()
    except KeyboardInterrupt:
        stopping.set()
        with lock:
            stopped = list(children)
        for proc in stopped:
            proc.terminate()
        for proc in stopped:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        ex.shutdown(wait=True, cancel_futures=True)
        again = "continue from their last checkpoints, if they wrote one," if save_checkpoints else "start over"
        print(f"interrupted: {len(stopped)} running run(s) stopped (they {again} on a re-run), {done[0]} finished "
              f"here kept; re-run the same command to continue", file=sys.stderr)
        return 130
    ex.shutdown()

    print(f"{len(todo) - len(failed) - len(not_started)}/{len(todo)} runs finished in {time.time() - t0:.0f}s", flush=True)
    if not_started:
        print(f"time budget reached: {len(not_started)} run(s) not started; re-run the same command to continue",
              flush=True)
    if failed:
        print(f"{len(failed)} failed run(s):", file=sys.stderr)
        for name, rc, log in failed:
            print(f"  {name} rc={rc} log={_show_path(log)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <pid>` prints every thread's stack: where a hung sweep waits
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    sys.exit(main())
