"""
scripts/bench_decode_kernel.py without a GPU: the module imports, its options parse (and bad ones
are refused), its bytes/floor helpers give the hand-counted values and reproduce the "% of copy"
of the two H200 sweeps committed in results/bench/kernel/, the knob and no-op patches restore the
module, and without CUDA the script stops with one line. The timings themselves need the GPU.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import decode_attention as da
from scripts import bench_decode_kernel as bk

REPO = Path(__file__).resolve().parents[1]
KERNEL = REPO / "results" / "bench" / "kernel"


def test_parse_defaults_and_quick():
    a = bk.parse_args([])
    assert a.groups == list(bk.GROUPS) and a.cases == list(bk.DEFAULT_CASES)
    assert (a.warps, a.block_n, a.stages) == ([2, 4], [64, 128], [3, 4])
    assert a.rope_fp32 == [True, False] and a.rope_modes == ["q_base", "k_angle", "rows"]
    assert a.tucker == [(32, 12, 64, 64, 64), (32, 16, 128, 128, 128), (1, 12, 64, 64, 64)]
    assert (a.steps, a.reps, a.out_dir) == (20, 7, None)
    q = bk.parse_args(["--quick", "--cases", "T64r,MQA", "--out_dir", "/tmp/x"])
    assert q.groups == ["base"] and q.cases == ["T64r", "MQA"] and q.out_dir == "/tmp/x"
    c = bk.parse_args(["--groups", "rope,tucker", "--warps", "2", "--rope_fp32", "false", "--tucker", "4:8:32:64:16"])
    assert c.groups == ["rope", "tucker"] and c.warps == [2] and c.rope_fp32 == [False]
    assert c.tucker == [(4, 8, 32, 64, 16)]
    assert bk.parse_args(["--rope_fp32", "1,0,True,FALSE"]).rope_fp32 == [True, False, True, False]


@pytest.mark.parametrize("argv", [["--cases", "T64r,NOPE"], ["--groups", "base,speed"], ["--rope_modes", "fast"],
                                  ["--qcores", "gemm"], ["--rope_fp32", "maybe"], ["--tucker", "32:12:64"],
                                  ["--steps", "0"], ["--reps", "0"], ["--cases", ""]])
def test_parse_refuses(argv, capsys):
    with pytest.raises(SystemExit) as e:
        bk.parse_args(argv)
    assert e.value.code == 2


def test_bytes_by_hand():
    C = bk.CASES
    assert bk.case_bytes(C["T64r"]) == 32 * 16384 * 64 * 2 == 67_108_864  # shared K/V: read once
    assert bk.case_bytes(C["T64"]) == bk.case_bytes(C["T64r"])  # RoPE adds no bytes
    assert bk.case_bytes(C["T128r"]) == 134_217_728
    assert bk.case_bytes(C["MQA"]) == 2 * 32 * 16384 * 128 * 2 == 268_435_456  # k and v separate
    assert bk.case_bytes(C["MLA"]) == 32 * 16384 * 160 * 2 == 167_772_160  # v is a view of k
    assert bk.case_bytes(C["B1"]) == 16384 * 64 * 2 == 2_097_152
    assert bk.case_bytes(C["cap"]) == 67_108_864  # 16k valid rows of a 32k cache: only the valid rows
    assert bk.case_bytes(C["GQA"]) == 2 * 32 * 8 * 16384 * 128 * 2 == 2_147_483_648
    assert bk.case_bytes(C["MHA"]) == 2 * 32 * 12 * 16384 * 64 * 2 == 1_610_612_736
    assert bk.tucker_bytes(32, 64, 16384) == 67_108_864
    assert bk.copy_bytes() == 2 ** 31  # 1 GiB of bf16 read and written
    assert bk.floor_us(67_108_864, 4.24e12) == pytest.approx(15.828, abs=1e-3)
    assert bk.floor_us(268_435_456, 4.24e12) == pytest.approx(63.310, abs=1e-3)
    assert bk.fraction_of_copy(67_108_864, 15.828, 4.24e12) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="kv must be 'same', 'view' or 'separate', got 'shared'"):
        bk.cache_bytes(1, 1, 1, 64, 64, "shared")


def test_cases_as_documented():
    # every knob group names existing cases, and the docstring's table lists every case's shapes
    for keys in bk.GROUP_CASES.values():
        assert set(keys) <= set(bk.CASES)
    assert set(bk.DEFAULT_CASES) <= set(bk.CASES)
    doc_rows = {line.split()[0]: line.split() for line in bk.__doc__.splitlines() if line.strip().split()[:1]
                and line.split()[0] in bk.CASES and len(line.split()) > 10}
    assert set(doc_rows) == set(bk.CASES)
    for key, c in bk.CASES.items():
        nums = [int(x) for x in doc_rows[key] if x.isdigit()]
        assert nums[-7:] == [c.B, c.nH, c.nG, c.L, c.n, c.Dk, c.Dv], key
        assert float(doc_rows[key][-1]) == pytest.approx(bk.case_bytes(c) / 1e6, abs=0.05), key


def test_reproduces_sweep_2():
    """sweep_2.json rows carry the time and the fraction the scratch script computed: our helper gives
    the same fraction from the same time and copy rate."""
    d = json.loads((KERNEL / "sweep_2.json").read_text())
    rate, n = d["copy_rate"], 0
    for r in d["rows"]:
        if "frac" in r:
            assert bk.fraction_of_copy(bk.case_bytes(bk.CASES[r["case"]]), r["us"], rate) == pytest.approx(r["frac"], rel=1e-9)
            n += 1
    assert n == 88
    fused = next(r for r in d["rows"] if r["case"] == "tucker fused dot")  # the txt prints 28.6%
    assert round(100 * bk.fraction_of_copy(bk.tucker_bytes(32, 64, 16384), fused["us"], rate), 1) == 28.6


def test_reproduces_sweep_1():
    """sweep_1 named its cases by description; GQA and MHA's shapes were inferred from its bytes."""
    names = {"tucker r3=64 nH=12 shared rope": "T64r", "tucker r3=64 nH=12 shared NO rope": "T64",
             "tucker r3=128 nH=16 shared rope": "T128r", "mqa nH=32 D=128 k,v": "MQA",
             "mla dec. nH=16 [128|32] v=k[:128]": "MLA", "gqa nG=8 nH=32 D=128": "GQA", "mha nH=12 D=64": "MHA",
             "tucker r3=64 B=1 L=16k": "B1", "tucker r3=64 cap 32k len 16k": "cap"}
    d = json.loads((KERNEL / "sweep_1.json").read_text())
    seen = set()
    for r in d["rows"]:
        if "frac" in r:
            assert bk.fraction_of_copy(bk.case_bytes(bk.CASES[names[r["case"]]]), r["us"], d["copy_rate"]) == \
                pytest.approx(r["frac"], rel=1e-9)
            seen.add(names[r["case"]])
    assert seen == set(names.values())
    # the printed TB/s of the GQA line (487.6 us, 4.40 TB/s)
    assert bk.case_bytes(bk.CASES["GQA"]) / 487.6e-6 / 1e12 == pytest.approx(4.40, abs=0.005)


def test_knobs_and_no_launch_restore():
    before = (da.NUM_WARPS, da.ROPE_FP32)
    with bk.knobs(NUM_WARPS=8, ROPE_FP32=True):
        assert (da.NUM_WARPS, da.ROPE_FP32) == (8, True)
    assert (da.NUM_WARPS, da.ROPE_FP32) == before
    with pytest.raises(AttributeError):
        with bk.knobs(NO_SUCH_KNOB=1):
            pass
    for k in ("NUM_WARPS", "BLOCK_N", "NUM_STAGES", "ROPE_MODE", "ROPE_FP32", "CTAS_PER_SM", "MIN_SPLIT_TOKENS",
              "MIN_SPLIT_TOKENS_WIDE", "TUCKER_QCORE"):
        assert hasattr(da, k), k  # every knob the groups set
    if da._triton_available():
        real = da._combine_kernel
        with bk.no_launch("_combine_kernel"):
            assert da._combine_kernel[(1, 1)](1, 2, x=3) is None
        assert da._combine_kernel is real
        assert hasattr(da, "_combine_outcore_kernel")


def _run(args, **env_extra):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", **env_extra}
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)


def test_exits_without_cuda():
    p = _run(["-m", "scripts.bench_decode_kernel", "--quick"])
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"bench_decode_kernel: no CUDA GPU here", lines[0]), p.stderr
    assert p.stdout == ""


def test_refuses_to_run_as_file():
    p = _run(["scripts/bench_decode_kernel.py", "--quick"])
    assert p.returncode == 1 and "python -m scripts.bench_decode_kernel" in p.stderr


def test_knob_sweeps_set_each_combination_and_name_it():
    """The rope / tiles / splits groups run every combination of their options, each with its knobs set
    while it runs (and restored after), under the case names of the committed sweeps."""
    args = bk.parse_args(["--groups", "rope,tiles,splits", "--cases", "T64r,T64,MQA", "--warps", "2,4",
                          "--rope_fp32", "true", "--block_n", "32", "--stages", "2", "--ctas", "1,2",
                          "--min_split", "64"])
    before = {k: getattr(bk.da, k) for k in ("ROPE_MODE", "NUM_WARPS", "BLOCK_N", "CTAS_PER_SM", "MIN_SPLIT_TOKENS",
                                             "MIN_SPLIT_TOKENS_WIDE")}

    class Recorder:
        runs = []

        def run(self, group, key, name, settings=None, **kw):
            assert all(getattr(bk.da, k) == v for k, v in settings.items())  # set while the case runs
            if group == "splits":  # --min_split is every case's minimum, wide head groups' too (MQA: 32 heads)
                assert bk.da.MIN_SPLIT_TOKENS == bk.da.MIN_SPLIT_TOKENS_WIDE == 64
            self.runs.append((group, key, name))
    bk.sweep(Recorder(), args)
    names = {(g, n) for g, _, n in Recorder.runs}
    mode = args.rope_modes[0]
    assert {("rope", f"{mode} fp32=True warps=2"), ("rope", f"{mode} fp32=True warps=4"),
            ("tiles", "warps=2 BLOCK_N=32 stages=2"), ("splits", "CTAS=1 MIN_SPLIT=64"),
            ("splits", "CTAS=2 MIN_SPLIT=64")} <= names
    per_case = {g: len(args.rope_modes) * 2 if g == "rope" else 2 for g in ("rope", "tiles", "splits")}
    for g, n in per_case.items():
        keys = [k for k in ("T64r", "T64", "MQA") if k in bk.GROUP_CASES[g]]
        assert sum(1 for gg, _, _ in Recorder.runs if gg == g) == n * len(keys)
    assert {k: getattr(bk.da, k) for k in before} == before
