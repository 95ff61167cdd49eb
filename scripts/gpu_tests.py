"""
Every CUDA test of the repository on one GPU machine, in parallel pytest processes.

A CPU run of the suite skips the tests that need a GPU (260 of them in session 50: the Triton kernels against torch
and float64, CUDA graphs, the one-launch decode steps, train.py's fast paths). This script runs exactly those,
`pytest --gpu_only` (tests/conftest.py: the tests a CPU run skips for want of a GPU), split into JOBS processes at
once. Most of their time is Triton's and inductor's compiles on the CPU, so processes side by side pay: on one H200
with 16 cores, the same selection split by hand into 9 processes, a file to a job but for the one-launch decode
steps' files, ran in 199 s (session 50 call 1); its nine processes' times add up to 1,376 s.

    python -m scripts.gpu_tests                        # every CUDA test, JOBS = half the CPU cores (at most 9)
    python -m scripts.gpu_tests --jobs 4 --out_dir out-gpu-tests
    python -m scripts.gpu_tests --dry_run              # the plan only (any machine): each job's tests
    python -m scripts.gpu_tests -- -k decode_wide -x   # after --: more pytest arguments for every job

Each job writes `job<K>.log` (pytest -v -rs, its durations) and `job<K>.xml` (JUnit) into --out_dir, and the run
`summary.md`: a row a job (tests, passed, failed, skipped, seconds) and every failure by node id. The jobs are
shared round-robin over the visible GPUs (CUDA_VISIBLE_DEVICES one each). Exit status 0 only if every selected test
ran and none failed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

if __package__ in (None, ""):
    sys.exit("run from the repository root as a module: python -m scripts.gpu_tests ...")

from scripts.bench_multigpu import _kill_job

REPO = Path(__file__).resolve().parents[1]
MAX_JOBS = 9  # session 50's split; more processes on one GPU mostly wait for each other's compiles

# Seconds a test, by file, for balancing the jobs: the mean of the JUnit times of session 51's two runs of this
# script on an H200 (calls 1 and 4; the one-launch decode steps compile a persistent kernel each, train.py's tests run
# it several times). With these, session 51's measured times give the slowest of 8 jobs 164 s, against 183 s under
# session 50's estimates (141 s if perfectly balanced; one test alone takes 89 s). A file not listed weighs
# DEFAULT_WEIGHT_S.
WEIGHT_S = {
    "test_graph_step.py": 17.2,
    "test_decode_wide.py": 15.6,
    "test_decode_mega.py": 15.3,
    "test_master_adamw.py": 11.6,
    "test_fused_gelu.py": 7.6,
    "test_fused_mla_rope.py": 6.9,
    "test_fused_loss.py": 3.8,
    "test_fused_sample.py": 3.2,
    "test_decode_attention.py": 1.8,
    "test_decode.py": 1.1,
    "test_sample.py": 0.5,
    "test_decode_linear.py": 0.4,
    "test_fused_norm.py": 0.2,
}
DEFAULT_WEIGHT_S = 1.0
PROGRESS_EVERY_S = 30.0


def weight(node_id: str) -> float:
    return WEIGHT_S.get(Path(node_id.split("::")[0]).name, DEFAULT_WEIGHT_S)


def plan(node_ids: Sequence[str], jobs: int) -> List[List[str]]:
    """The tests shared out into at most `jobs` lists. A file's tests go together (its imports and module fixtures
    paid once), unless the file alone outweighs a job's share (total / jobs), whose tests go one by one. Then the
    heaviest first, each to the job with the least weight so far (ties to the lower job); within a job the tests keep
    their collection order. Every test in exactly one list; no empty list."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    order = {node: i for i, node in enumerate(node_ids)}
    if len(order) != len(node_ids):
        raise ValueError("node ids must be distinct")
    by_file: Dict[str, List[str]] = {}
    for node in node_ids:
        by_file.setdefault(node.split("::")[0], []).append(node)
    share = sum(map(weight, node_ids)) / jobs
    units = []
    for nodes in by_file.values():
        units += [[n] for n in nodes] if sum(map(weight, nodes)) > share else [nodes]
    loads, lists = [0.0] * jobs, [[] for _ in range(jobs)]
    for unit in sorted(units, key=lambda u: (-sum(map(weight, u)), order[u[0]])):
        k = min(range(jobs), key=lambda j: (loads[j], j))
        loads[k] += sum(map(weight, unit))
        lists[k] += unit
    return [sorted(nodes, key=order.__getitem__) for nodes in lists if nodes]


def collect(tests_dir: str = "tests", extra: Sequence[str] = (), cwd: Path = REPO) -> List[str]:
    """The node ids that `pytest --gpu_only` selects (with `extra`, e.g. -k), in collection order."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--gpu_only", "-p",
                           "no:cacheprovider", *extra, tests_dir], cwd=cwd, capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    ids = lines[:lines.index("")] if "" in lines else lines  # the node ids, then a blank line, then the summary
    nodes = [line.strip() for line in ids if "::" in line]
    if proc.returncode not in (0, 5):  # 5: nothing selected
        raise SystemExit(f"pytest could not collect the GPU tests (exit {proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return nodes


@dataclass
class JobResult:
    job: int
    nodes: List[str]
    rc: Optional[int] = None  # None: stopped at the timeout
    seconds: float = 0.0
    done: bool = False
    outcomes: Dict[str, str] = field(default_factory=dict)  # node id -> passed / failed / error / skipped

    def count(self, outcome: str) -> int:
        return sum(v == outcome for v in self.outcomes.values())

    @property
    def not_run(self) -> List[str]:
        return [n for n in self.nodes if n not in self.outcomes]


def junit_key(node_id: str) -> tuple:
    """(classname, name) of a node id in pytest's JUnit XML: the file's path dotted without .py, any class after it,
    the test's name with its parameters (pytest's junitxml.mangle_test_address)."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def read_junit(path: Path, nodes: Sequence[str]) -> Dict[str, str]:
    """node id -> outcome (passed, failed, error, skipped) of each of `nodes` that the JUnit XML at `path` reports."""
    if not path.exists():
        return {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:  # a job stopped while writing it
        return {}
    by_key = {}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        by_key[case.get("classname", ""), case.get("name", "")] = (
            "failed" if "failure" in tags else "error" if "error" in tags else "skipped" if "skipped" in tags
            else "passed")
    return {node: by_key[junit_key(node)] for node in nodes if junit_key(node) in by_key}


OUTCOME_WORDS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                 "XFAIL": "skipped", "XPASS": "passed"}


def read_log(path: Path, nodes: Sequence[str]) -> Dict[str, str]:
    """node id -> outcome from a `pytest -v` log, for a job stopped before it wrote its JUnit XML: each line
    '<node id> PASSED [ 10%]' (or FAILED, ERROR, SKIPPED, XFAIL, XPASS) of one of `nodes`."""
    if not path.exists():
        return {}
    outcomes = {}
    wanted = set(nodes)
    for line in path.read_text(errors="replace").splitlines():
        node, _, rest = line.partition(" ")
        word = rest.split(" ", 1)[0]
        if node in wanted and word in OUTCOME_WORDS:
            outcomes[node] = OUTCOME_WORDS[word]
    return outcomes


def run_jobs(lists: Sequence[Sequence[str]], out_dir: Path, pytest_args: Sequence[str] = (), timeout: float = 900.0,
             gpus: int = 0, cwd: Path = REPO) -> List[JobResult]:
    """Run each list in its own pytest process at once (its own process group, GPU k % gpus where gpus > 0), from
    `cwd`; a job past `timeout` seconds is stopped with its children. Prints progress every PROGRESS_EVERY_S s."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results, procs, logs = [], [], []
    t0 = time.time()
    try:
        for k, nodes in enumerate(lists):
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            if gpus > 0:
                env["CUDA_VISIBLE_DEVICES"] = str(k % gpus)
            xml = out_dir / f"job{k}.xml"
            xml.unlink(missing_ok=True)  # an earlier run's must not stand for this one's
            argv = [sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "--durations=10",
                    f"--junitxml={xml}", *pytest_args, *nodes]
            logs.append(open(out_dir / f"job{k}.log", "w"))
            procs.append(subprocess.Popen(argv, cwd=cwd, stdout=logs[-1], stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
            results.append(JobResult(job=k, nodes=list(nodes)))
        last_report = t0
        while not all(r.done for r in results):
            time.sleep(0.2)
            now = time.time()
            for proc, res in zip(procs, results):
                if res.done:
                    continue
                rc = proc.poll()
                if rc is None and now - t0 <= timeout:
                    continue
                if rc is None:
                    _kill_job(proc)
                    print(f"job {res.job}: past {timeout:.0f} s, stopped", flush=True)
                res.rc, res.seconds, res.done = rc, now - t0, True
            if now - last_report >= PROGRESS_EVERY_S:
                print(f"{now - t0:.0f} s: {sum(r.done for r in results)} of {len(lists)} jobs done", flush=True)
                last_report = now
    finally:  # an interrupt (Ctrl-C) leaves no job behind
        for proc in procs:
            if proc.poll() is None:
                _kill_job(proc)
        for log in logs:
            log.close()
    for res in results:  # the JUnit XML, or for a stopped job the tests its log says ended before it was stopped
        res.outcomes = (read_junit(out_dir / f"job{res.job}.xml", res.nodes) if res.rc is not None
                        else read_log(out_dir / f"job{res.job}.log", res.nodes))
    return results


def summary_md(results: Sequence[JobResult], command: str) -> str:
    total = sum(len(r.nodes) for r in results)
    rows = ["| job | tests | passed | failed | errors | skipped | not run | exit | s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        rows.append(f"| {r.job} | {len(r.nodes)} | {r.count('passed')} | {r.count('failed')} | {r.count('error')} "
                    f"| {r.count('skipped')} | {len(r.not_run)} | {'killed' if r.rc is None else r.rc} "
                    f"| {r.seconds:.0f} |")
    bad = [(n, o) for r in results for n, o in r.outcomes.items() if o in ("failed", "error")]
    bad += [(n, "not run") for r in results for n in r.not_run]
    lines = [f"# GPU tests: {total} in {len(results)} jobs", "", f"`{command}`", "", *rows, ""]
    if bad:
        lines += ["Not passed:", ""] + [f"- `{n}`: {o}" for n, o in bad] + [""]
    else:
        lines += [f"Every selected test ran; none failed ({sum(r.count('passed') for r in results)} passed, "
                  f"{sum(r.count('skipped') for r in results)} skipped).", ""]
    return "\n".join(lines)


def ok(results: Sequence[JobResult]) -> bool:
    return all(r.rc == 0 and not r.not_run and not r.count("failed") and not r.count("error")
               for r in results)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Arguments after -- go to every job's pytest (and to the collection).")
    p.add_argument("--jobs", type=int, default=max(1, min(MAX_JOBS, (os.cpu_count() or 2) // 2)),
                   help=f"pytest processes at once (default: half the CPU cores, at most {MAX_JOBS})")
    p.add_argument("--out_dir", default="out-gpu-tests", help="logs, JUnit XML and summary.md (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a job is stopped (default: %(default)s)")
    p.add_argument("--tests", default="tests", help="the test folder (default: %(default)s)")
    p.add_argument("--dry_run", action="store_true", help="print the plan (each job's tests) and run nothing")
    args = p.parse_args(own)
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.timeout <= 0:
        p.error(f"--timeout must be positive, got {args.timeout}")
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and not args.dry_run:
        print("error: no CUDA device here (torch.cuda.is_available() is False): gpu_tests runs the tests that need "
              "a GPU; on a CPU run the suite (python -m pytest -q tests), or see the plan with --dry_run",
              file=sys.stderr)
        return 2
    nodes = collect(args.tests, extra)  # -k / -m narrow the collection; the runs get `extra` too (e.g. -x)
    if not nodes:
        print("no test selected", file=sys.stderr)
        return 1
    lists = plan(nodes, args.jobs)
    print(f"{len(nodes)} GPU tests in {len(lists)} jobs" + (f" over {gpus} GPU(s)" if gpus else ""), flush=True)
    for k, job in enumerate(lists):
        files = sorted({Path(n.split("::")[0]).name for n in job})
        print(f"  job {k}: {len(job)} tests, ~{sum(map(weight, job)):.0f} s by the weights: {', '.join(files)}",
              flush=True)
    if args.dry_run:
        return 0
    out_dir = Path(args.out_dir)
    results = run_jobs(lists, out_dir, extra, args.timeout, gpus)
    text = summary_md(results, "python -m scripts.gpu_tests " + " ".join(argv))
    (out_dir / "summary.md").write_text(text)
    print(text)
    return 0 if ok(results) else 1


if __name__ == "__main__":
    sys.exit(main())
