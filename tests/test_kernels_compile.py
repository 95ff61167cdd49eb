"""Every Triton kernel (the decode step's, the training loss head's, the GELU's, master_adamw's) compiles for Hopper on
a machine without a GPU.

The interpreted tests (tests/interpreted.py) run each kernel as Python, so they cannot see what Triton's compiler
refuses (a variable whose type changes in a loop, a name one constexpr branch leaves for another, an op the GPU
backend lacks); until now only a GPU call could. Here each wrapper runs as it would on the GPU up to its launches,
which are recorded instead of run, and each recorded launch (its argument types and constexprs: the variant's
branches) is lowered to TTIR for sm_90 by Triton's front end, PDL's branches included. (Session 13 found a loss kernel
that passed every interpreted test and was refused by the compiler on the GPU; the loss test below fails on it.)
"""
import math

import pytest
import torch

pytest.importorskip("triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import decode_attention as da  # noqa: E402
import decode_linear as dl  # noqa: E402
import fused_gelu as fg  # noqa: E402
import fused_loss as fl  # noqa: E402
import fused_mla_rope as fm  # noqa: E402
import fused_norm as fn  # noqa: E402
import fused_sample as fs  # noqa: E402
import master_adamw as ma  # noqa: E402
from model import LayerNorm, RMSNorm, rope_cache  # noqa: E402
from scripts.kernel_compile import Recorder, compile_to_ttir, typed  # noqa: E402

if not da._triton_available():
    pytest.skip("triton does not import", allow_module_level=True)


def compile_launches(recorder, *, pdl=(False, True)) -> int:
    """Lower every recorded launch (and its PDL twin, where the kernel has a PDL constexpr) to TTIR."""
    n = 0
    for args, kwargs in recorder.launches:
        sig, const, warps = typed(recorder.kernel, args, kwargs)
        for flag in (pdl if "PDL" in const else (None,)):
            if flag is not None:
                const = {**const, "PDL": flag}
            compile_to_ttir(recorder.kernel, sig, const, num_warps=warps)
            n += 1
    return n


@pytest.fixture
def record(monkeypatch):
    """record(module, 'name'): the module's kernel replaced by a Recorder for the test. The CPU counts as a Triton
    device, as under TRITON_INTERPRET=1 (the wrappers' one device gate, `_interpret`), so every other check and
    choice of the public wrappers runs as it does on the GPU."""
    monkeypatch.setattr(da, "_interpret", lambda: True)  # decode_attention, and decode_linear's / fused_norm's checks
    monkeypatch.setattr(fl, "_interpret", lambda: True)
    monkeypatch.setattr(fg, "_interpret", lambda: True)
    monkeypatch.setattr(fm, "_interpret", lambda: True)
    monkeypatch.setattr(ma, "_interpret", lambda: True)
    monkeypatch.setattr(fs, "_interpret", lambda: True)
    for module in (fl, fg, fm):  # their torch.library ops, as a CUDA process registers them at import (a CPU-only
        assert module.register_ops()  # one registers none: this file run alone would find no op to call)

    def install(module, name):
        rec = Recorder(getattr(module, name))
        monkeypatch.setattr(module, name, rec)
        return rec
    return install


def rnd(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


ATTENTION_CASES = {
    # name: (B, nH, nG, L, Dk, Dv, kv, rope: None / 'as_read' / 'stored', new token written by the call)
    "mha": (2, 4, 4, 64, 64, 64, "separate", None, False),
    "mqa shared latent, keys rotated as read, new token": (2, 12, 1, 64, 64, 64, "same", "as_read", True),
    "gqa rotated keys stored, new token": (2, 8, 2, 64, 64, 64, "separate", "stored", True),
    "mla decoupled: Dk 160, v a view": (2, 16, 1, 64, 160, 128, "view", None, False),
    "32 heads of 128 (4 warps)": (1, 32, 1, 64, 128, 128, "same", "as_read", False),
    "odd dims": (3, 8, 2, 70, 24, 40, "separate", None, False),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_decode_attention_kernels_compile(case, record):
    B, nH, nG, L, Dk, Dv, kv, rope, new = ATTENTION_CASES[case]
    split, combine = record(da, "_split_kernel"), record(da, "_combine_kernel")
    q, k = rnd(B, nH, Dk), rnd(B, nG, L, Dk)
    v = k if kv == "same" else (k[..., :Dv] if kv == "view" else rnd(B, nG, L, Dv))
    new_kv = (rnd(B, nG, Dk), None if kv == "same" else rnd(B, nG, Dv)) if new else None
    da.decode_attention(q, k, v, torch.full((B,), L // 2), scale=1 / math.sqrt(Dk),
                        rope=rope_cache(Dk, L, theta=1e4) if rope else None, rope_keys=rope or "as_read",
                        rotate_q=rope is not None, new_kv=new_kv, backend="triton")
    assert len(split.launches) == 1 and len(combine.launches) == 1
    assert compile_launches(split) == 2 and compile_launches(combine) == 2


@pytest.mark.parametrize("qcore", ["dot", "bcast"])
@pytest.mark.parametrize("shared", [True, False])
def test_tucker_decode_kernels_compile(qcore, shared, record, monkeypatch):
    monkeypatch.setattr(da, "TUCKER_QCORE", qcore)
    split, combine = record(da, "_split_kernel"), record(da, "_combine_outcore_kernel")
    B, nH, r2, r3, p2, L = 2, 12, 64, 64, 64, 64
    k = rnd(B, 1, L, r3)
    v = k if shared else rnd(B, 1, L, r3)
    da.tucker_decode_attention(rnd(B, r2), rnd(nH, r2, r3), k, v, rnd(nH, p2, r3), torch.full((B,), 9), scale=0.125,
                               rope=rope_cache(r3, L, theta=1e4), backend="triton")
    assert len(split.launches) == 1 and len(combine.launches) == 1
    assert compile_launches(split) == 2 and compile_launches(combine) == 2


LINEAR_CASES = {
    # name: (M, N, K, norm, act, bias, residual)
    "layernorm + qkv": (1, 2304, 768, "layernorm", None, False, False),
    "layernorm with bias + gelu": (3, 3072, 768, "layernorm_bias", "gelu", True, False),
    "proj + residual, K 3072": (1, 768, 3072, None, None, False, True),
    "rmsnorm + swiglu, K loop": (2, 1024, 8192, "rmsnorm", "swiglu", False, False),
}


@pytest.mark.parametrize("case", list(LINEAR_CASES))
def test_decode_linear_kernel_compiles(case, record):
    M, N, K, norm_kind, act, bias, residual = LINEAR_CASES[case]
    rec = record(dl, "_decode_linear_kernel")
    norm = {None: None, "layernorm": LayerNorm(K, bias=False), "layernorm_bias": LayerNorm(K, bias=True),
            "rmsnorm": RMSNorm(K)}[norm_kind]
    if norm is not None:
        norm = norm.to(torch.bfloat16)
    dl.decode_linear(rnd(M, K), rnd(N, K), rnd(N) if bias else None, norm=norm, act=act,
                     weight2=rnd(N, K) if act == "swiglu" else None, residual=rnd(M, N) if residual else None,
                     backend="triton")
    assert len(rec.launches) == 1 and compile_launches(rec) == 2


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_add_norm_kernel_compiles(kind, record):
    rec = record(fn, "_add_norm_kernel")
    norm = (LayerNorm(768, bias=True) if kind == "layernorm" else RMSNorm(768)).to(torch.bfloat16)
    fn.add_norm(rnd(4, 768), rnd(4, 768), norm, backend="triton")
    assert compile_launches(rec) == 1


@pytest.mark.parametrize("want_grad", [True, False])
@pytest.mark.parametrize("l2_hints", [True, False])
def test_loss_kernel_compiles(want_grad, l2_hints, record, monkeypatch):
    """fused_loss's row kernel, both passes (with the gradient) or the loss alone, with and without its L2 hints."""
    rec = record(fl, "_cross_entropy_rows_kernel")
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)  # the recorder, launched as it is
    monkeypatch.setattr(fl, "L2_HINTS", l2_hints)
    fl.cross_entropy_rows(rnd(8, 50304), torch.randint(0, 50304, (8,)), want_grad, backend="triton")
    assert compile_launches(rec) == 1
    args, kwargs = rec.launches[0]
    sig, const, warps = typed(rec.kernel, args, kwargs)
    ttir = compile_to_ttir(rec.kernel, sig, const, num_warps=warps)
    assert ttir.count("scf.for") == (2 if want_grad else 1)  # one loop per pass
    assert ("evict_last" in ttir) == l2_hints


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gelu_kernels_compile(dtype, record, monkeypatch):
    """fused_gelu's forward and backward kernels, through gelu and its autograd (the recorder launches nothing: the
    outputs are empty tensors)."""
    fwd, bwd = record(fg, "_gelu_fwd_kernel"), record(fg, "_gelu_bwd_kernel")
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)  # the recorders, launched as they are
    x = rnd(4, 3072, dtype=dtype).requires_grad_()
    fg.gelu(x, backend="triton").backward(rnd(4, 3072, dtype=dtype))
    assert compile_launches(fwd) == 1 and compile_launches(bwd) == 1
    for rec in (fwd, bwd):
        sig, const, warps = typed(rec.kernel, *rec.launches[0])
        ttir = compile_to_ttir(rec.kernel, sig, const, num_warps=warps)
        assert ttir.count("math.exp2") == 1 and "erf" not in ttir  # one exp2, no erf


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_mla_rope_kernels_compile(dtype, record, monkeypatch):
    """fused_mla_rope's forward and backward kernels at GPT-2 MLA's shapes (12 heads of 64 + 32: the heads and the
    widths padded to powers of two), through decoupled_qk and its autograd, the incoming gradient of Q transposed."""
    fwd, bwd = record(fm, "_qk_fwd_kernel"), record(fm, "_qk_bwd_kernel")
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)
    cos, sin = (t[:16] for t in rope_cache(32, 16, 10000.0))
    q = rnd(2, 16, 12, 96, dtype=dtype).requires_grad_()
    kv = rnd(2, 16, 1536, dtype=dtype).requires_grad_()
    k_rope = rnd(2, 16, 32, dtype=dtype).requires_grad_()
    Q, K = fm.decoupled_qk(q, kv[..., :768].view(2, 16, 12, 64), k_rope, cos, sin, backend="triton")
    torch.autograd.backward([Q, K], [rnd(2, 12, 16, 96, dtype=dtype).transpose(1, 2), rnd(2, 16, 12, 96, dtype=dtype)])
    assert compile_launches(fwd) == 1 and compile_launches(bwd) == 1
    sig, const, warps = typed(bwd.kernel, *bwd.launches[0])
    assert (const["BLOCK_H"], const["BLOCK_DH"], const["BLOCK_HALF"]) == (16, 64, 16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_mla_rope_in_place_kernels_compile(dtype, record, monkeypatch):
    """q_in_place's kernels at GPT-2 MLA's shapes: the rotation in place forward (R) and backward (R^T, on a gradient
    of Q in SDPA's layout), and the forward / backward kernels without their Q part."""
    rot, fwd, bwd = (record(fm, name) for name in ("_rotate_tail_kernel", "_qk_fwd_kernel", "_qk_bwd_kernel"))
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)
    cos, sin = (t[:16] for t in rope_cache(32, 16, 10000.0))
    q_leaf = rnd(2, 16, 12, 96, dtype=dtype).requires_grad_()
    k = rnd(2, 16, 12, 64, dtype=dtype).requires_grad_()
    k_rope = rnd(2, 16, 32, dtype=dtype).requires_grad_()
    Q, K = fm.decoupled_qk(q_leaf * 1, k, k_rope, cos, sin, backend="triton", q_in_place=True)
    torch.autograd.backward([Q, K], [rnd(2, 12, 16, 96, dtype=dtype).transpose(1, 2), rnd(2, 16, 12, 96, dtype=dtype)])
    assert compile_launches(rot) == 2 and compile_launches(fwd) == 1 and compile_launches(bwd) == 1
    assert [typed(rot.kernel, *launch)[1]["TRANSPOSE"] for launch in rot.launches] == [False, True]
    assert typed(fwd.kernel, *fwd.launches[0])[1]["WITH_Q"] is False
    assert typed(bwd.kernel, *bwd.launches[0])[1]["WITH_Q"] is False


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [False, True])
def test_mla_k_up_kernel_compiles(dtype, bias, record, monkeypatch):
    """K_UP_IN_KERNEL's forward kernel at GPT-2 MLA's shapes (a 128-wide latent, 12 heads of 64 + 32; the latent a
    column slice of the stacked down-projection), its tensor-core product in the dtype's precision, with and
    without a key bias; and the backward kernel without its dq part."""
    kup, bwd, rot = (record(fm, name) for name in ("_k_up_fwd_kernel", "_qk_bwd_kernel", "_rotate_tail_kernel"))
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)
    cos, sin = (t[:64] for t in rope_cache(32, 64, 10000.0))
    wide = rnd(2, 64, 288, dtype=dtype).requires_grad_()
    w = rnd(768, 128, dtype=dtype).requires_grad_()
    b = rnd(768, dtype=dtype).requires_grad_() if bias else None
    q = rnd(2, 64, 12, 96, dtype=dtype).requires_grad_()
    Q, K = fm.decoupled_qk_from_latent(q * 1, wide[..., 128:256], w, b, wide[..., 256:], cos, sin, backend="triton")
    torch.autograd.backward([Q, K], [rnd(2, 12, 64, 96, dtype=dtype).transpose(1, 2), rnd(2, 64, 12, 96, dtype=dtype)])
    assert compile_launches(kup) == 1 and compile_launches(bwd) == 1 and len(rot.launches) == 2
    const = typed(kup.kernel, *kup.launches[0])[1]
    assert (const["HAS_BIAS"], const["PRECISION"]) == (bias, "ieee" if dtype == torch.float32 else "tf32")
    assert (const["BLOCK_M"], const["BLOCK_DH"], const["BLOCK_DC"], const["BLOCK_HALF"]) == (64, 64, 128, 16)


@pytest.mark.parametrize("dtype, dc, nH, dH, dR, rows, stages", [
    (torch.bfloat16, 128, 12, 64, 32, 64, 3), (torch.float32, 128, 12, 64, 32, 64, 3),
    (torch.bfloat16, 512, 16, 128, 64, 64, 3), (torch.bfloat16, 512, 16, 128, 64, 32, 2),
    (torch.bfloat16, 128, 12, 64, 32, 16, 3), (torch.float32, 32, 4, 16, 8, 32, 1)])
def test_k_up_shared_memory_bound_holds_on_ampere_and_hopper(dtype, dc, nH, dH, dR, rows, stages, record,
                                                               monkeypatch):
    """fused_mla_rope.k_up_shared_bytes, what k_up_launch fits to the device, bounds the shared memory of
    _k_up_fwd_kernel's launch as Triton compiles it for sm_80 (A100; sm_86 / 89 compile the same) and sm_90, at the
    launch's own rows and stages (GPT-2 MLA's latent in bf16 and float32; DeepSeek-V2's 512 with heads of 128, which
    take 456 KB at 64 rows and 3 stages; fewer rows)."""
    from scripts.kernel_compile import compile_launch
    kernel, args, kwargs = k_up_launch_at(dtype, dc, nH, dH, dR, rows, stages, record, monkeypatch)
    assert (kwargs["BLOCK_M"], kwargs["num_stages"]) == (rows, stages)
    bound = fm.k_up_shared_bytes(rows, stages, dc, dH, torch.tensor([], dtype=dtype).element_size())
    for arch in (80, 90):
        assert compile_launch(kernel, args, kwargs, arch=arch).metadata.shared <= bound


def k_up_launch_at(dtype, dc, nH, dH, dR, rows, stages, record, monkeypatch):
    """_k_up_fwd_kernel's launch (kernel, args, kwargs) as _k_up_fwd_impl makes it for a latent of dc, nH heads of
    dH, dR rotary dims, 2 x 64 tokens, at `rows` a program and `stages` (k_up_launch's choice pinned), recorded."""
    monkeypatch.setattr(fm, "k_up_launch", lambda *a: (rows, stages))
    rec = record(fm, "_k_up_fwd_kernel")
    monkeypatch.setattr(torch.library, "wrap_triton", lambda kernel: kernel)
    cos, sin = (t[:64] for t in rope_cache(dR, 64, 10000.0))
    fm._k_up_fwd_impl(rnd(2, 64, dc, dtype=dtype), rnd(nH * dH, dc, dtype=dtype), None, rnd(2, 64, dR, dtype=dtype),
                      cos, sin, nH)
    return (rec.kernel,) + tuple(rec.launches[0])


@pytest.mark.parametrize("dtype, dc, nH, dH, dR, rows, stages, want", [
    (torch.float16, 128, 12, 64, 32, 64, 2, 65536), (torch.float32, 32, 4, 16, 8, 32, 1, 6144)])
def test_k_up_shared_memory_bound_holds_before_ampere(dtype, dc, nH, dH, dR, rows, stages, want, record,
                                                      monkeypatch):
    """Triton does not pipeline below sm_80 (decode_attention.PIPELINED_FROM): _k_up_fwd_kernel's sm_75 compile
    takes its product's row tile and a head's weights as float32, one step, whatever the dtype and stages
    (GPT-2 MLA's latent of 128 in fp16 at 2 stages: 65,536 B, a T4's whole program limit; a small float32 latent),
    exactly k_up_shared_bytes(pipelined=False), which k_up_launch sizes by there."""
    from scripts.kernel_compile import compile_launch
    kernel, args, kwargs = k_up_launch_at(dtype, dc, nH, dH, dR, rows, stages, record, monkeypatch)
    bound = fm.k_up_shared_bytes(rows, stages, dc, dH, torch.tensor([], dtype=dtype).element_size(), pipelined=False)
    assert compile_launch(kernel, args, kwargs, arch=75).metadata.shared == bound == want


@pytest.mark.parametrize("lr_tensor", [False, True])
def test_master_adamw_kernel_compiles(lr_tensor, record, monkeypatch):
    """master_adamw's update a launch per tensor (TENSORS_PER_LAUNCH=1), for a bf16 matrix (its bf16 copy written)
    and a float32 vector; lr a float or a tensor (the kernel reads it from the device either way: one variant)."""
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", 1)
    rec = record(ma, "_master_adamw_kernel")
    w, b = torch.nn.Parameter(torch.randn(64, 96)), torch.nn.Parameter(torch.randn(96))
    opt = ma.MasterAdamW([w, b], backend="triton")
    if lr_tensor:
        opt.param_groups[0]["lr"] = torch.full((), 1e-3)
    w.grad, b.grad = torch.zeros_like(w), torch.zeros_like(b)
    opt.step()
    assert compile_launches(rec) == 2
    assert [typed(rec.kernel, *launch)[1]["HAS_COPY"] for launch in rec.launches] == [True, False]
    lrs = [dict(zip(rec.kernel.arg_names, args))["LR"] for args, _ in rec.launches]
    assert all(lr is (opt.param_groups[0]["lr"] if lr_tensor else opt.param_groups[0]["lr_device"]) for lr in lrs)


def test_master_adamw_kernel_compiles_summing_micro_steps(record, monkeypatch):
    """With micro_steps=2 the matrix's gradient is its float32 sum, which the kernel zeroes (ZERO_G): that variant too
    (a launch per tensor)."""
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", 1)
    rec = record(ma, "_master_adamw_kernel")
    w, b = torch.nn.Parameter(torch.randn(64, 96)), torch.nn.Parameter(torch.randn(96))
    opt = ma.MasterAdamW([w, b], backend="triton", micro_steps=2)
    (w.float().sum() + b.sum()).backward()
    opt.step()
    assert compile_launches(rec) == 2
    assert [typed(rec.kernel, *launch)[1]["ZERO_G"] for launch in rec.launches] == [True, False]


@pytest.mark.parametrize("micro_steps", [1, 2])
def test_master_adamw_multi_tensor_kernel_compiles(micro_steps, record, monkeypatch):
    """TENSORS_PER_LAUNCH > 1: the multi-tensor kernel (tuples of pointers, sizes and first program ids) for the
    matrices (bf16 gradients and copies, or the float32 sums it zeroes) and the vectors, a short last chunk too."""
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", 2)
    rec = record(ma, "_master_adamw_multi_kernel")
    mats = [torch.nn.Parameter(torch.randn(64, 96)) for _ in range(3)]
    vecs = [torch.nn.Parameter(torch.randn(96)) for _ in range(2)]
    opt = ma.MasterAdamW([{"params": mats}, {"params": vecs, "weight_decay": 0.0}], backend="triton",
                         micro_steps=micro_steps)
    (sum(m.float().sum() for m in mats) + sum(v.sum() for v in vecs)).backward()
    opt.step()
    assert compile_launches(rec) == 3  # matrices in chunks of 2 and 1, the vectors in one
    consts = [typed(rec.kernel, *launch)[1] for launch in rec.launches]
    assert [(c["NT"], c["HAS_COPY"], c["ZERO_G"]) for c in consts] == [(2, True, micro_steps > 1),
                                                                      (1, True, micro_steps > 1), (2, False, False)]


@pytest.mark.parametrize("variant, knobs", [(v, {}) for v in ("mha", "gqa", "tucker", "tucker_shared")] + [
    ("tucker", dict(FUSED_MLP=False)), ("gqa", dict(MLP_PROJ_AHEAD=True)), ("mha", dict(VEC_AHEAD=False))])
def test_decode_mega_step_kernel_compiles(variant, knobs, record, monkeypatch):
    """decode_mega's one-launch step (ONLY=0: the grid barriers' spin loop, the atomics, every phase) and its
    phase-by-phase launches, bf16, for GroupedQueryAttention and Tucker (separate and shared latent K/V); the MLP
    fused (the default) and not, its W_proj^T tile loaded ahead."""
    import decode_mega as dm
    from model import GPT, GPTConfig
    monkeypatch.setattr(dm, "_interpret", lambda: True)
    for name, value in knobs.items():
        monkeypatch.setattr(dm, name, value)
    over = {"mha": dict(attn="mha"), "gqa": dict(attn="gqa", n_kv_head=2),
            "tucker": dict(attn="tucker", tucker_ranks=(2, 16, 16)),
            "tucker_shared": dict(attn="tucker", tucker_ranks=(2, 16, 16), shared_kv=True)}[variant]
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=101, bias=True,
                          **over)).to(torch.bfloat16).eval()
    caches = model.new_caches(1, 64)
    mega = dm.MegaDecoder(model, caches)
    rec = record(dm, "_mega_step_kernel")
    idx, pos = torch.tensor([[3]]), torch.tensor([10])
    mega.decode_step(idx, caches, pos)  # the interpreter's way: a launch per phase and layer, then the head
    mega._launch(mega._stacked_weights(), idx.view(-1), pos, 0, 0, 2, True)  # the GPU's: one launch, barriers
    mega.times = torch.zeros(mega.programs, 5 * 2 + 2, 4, dtype=torch.int64)  # timed_step's launch: the stamps
    mega._launch(mega._stacked_weights(), idx.view(-1), pos, 0, 0, 2, True)
    mega.times = None
    launched = sorted({typed(rec.kernel, *launch)[1]["ONLY"] for launch in rec.launches})
    assert launched == [0, *dm.PHASE_LAUNCHES[dm.FUSED_MLP], 6]
    seen = set()
    for args, kwargs in rec.launches:
        sig, const, warps = typed(rec.kernel, args, kwargs)
        key = (const["ONLY"], const["FINAL"], const["TIMING"])
        if key not in seen:
            seen.add(key)
            compile_to_ttir(rec.kernel, sig, const, num_warps=warps)
    assert {(0, True, False), (0, True, True)} <= seen


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_sample_kernels_compile(dtype, record, monkeypatch):
    """fused_sample's kernels, with and without a top-k (the radix rounds' histograms, or round 0's max alone, then
    the draw), with libdevice's log (the GPU's), with and without the score written, and the greedy argmax, compiled
    to the end (ptxas), at batch 1 and 3 and top_k 1 (an int argument of 1 is a constexpr to the JIT: session 34's
    call 4 failed on it)."""
    from scripts.kernel_compile import compile_sm90
    recs = [record(fs, name) for name in ("_histogram_kernel", "_draw_kernel", "_argmax_kernel")]
    for B, V in ((1, 50257), (3, 50257), (2, 7)):  # 7 ids: one program a row (another int argument of 1)
        logits = rnd(B, V + 47, dtype=dtype)[:, :V]
        for top_k in (200, 1, None):
            fs.draw(logits, torch.ones(B, V), 0.8, top_k, torch.ones((), dtype=torch.bool))
        fs.argmax(logits)  # greedy decoding's token
    fs.argmax(rnd(1, 1, dtype=dtype))  # one id: V and the programs both 1
    fs.draw(logits, torch.ones(B, V), 0.8, 3, torch.ones((), dtype=torch.bool), torch.zeros(B))  # the score written
    rounds = 4 if dtype == torch.float32 else 2
    # rounds for each top-k draw, one max-only round 0 for each without (top_k None, and 200 of 7 ids)
    assert [len(r.launches) for r in recs] == [6 * rounds + 4, 10, 4]
    assert sum(not kw["HISTOGRAM"] for _, kw in recs[0].launches) == 4
    for rec in recs:
        for args, kwargs in rec.launches:  # EXACT_LOG as on the GPU (tl.log's form runs in the interpreter only)
            compile_sm90(rec.kernel, args, {**kwargs, "EXACT_LOG": True} if "EXACT_LOG" in kwargs else kwargs)


def test_sample_grid_takes_rows_on_its_first_axis(record, monkeypatch):
    """Rows on the grid's first axis (up to 2^31 - 1), a row's blocks on the second (up to 65,535): a batch of
    200,000 rows (a statistical test's) put on the second axis was refused by the driver (session 34 call 4). More
    blocks than the second axis takes is a ValueError naming the knob."""
    recs = [record(fs, name) for name in ("_histogram_kernel", "_draw_kernel", "_argmax_kernel")]
    fs.draw(rnd(200_000, 7), torch.ones(200_000, 7), 0.8, 3, torch.ones((), dtype=torch.bool))
    fs.argmax(rnd(200_000, 7))
    assert [grid for rec in recs for grid in rec.grids] == [(200_000, 1)] * 4
    fs.draw(rnd(2, 50257), torch.ones(2, 50257), 0.8, 3, torch.ones((), dtype=torch.bool))
    fs.argmax(rnd(2, 50257))
    assert recs[1].grids[-1] == recs[2].grids[-1] == (2, 99)  # blocks of SMALL_BATCH_BLOCK = 512 at 2 rows
    fs.argmax(rnd(5, 50257))
    assert recs[2].grids[-1] == (5, 25)  # LARGE_BATCH_BLOCK = 2,048 above SMALL_BATCH rows
    monkeypatch.setattr(fs, "BLOCK", 16)
    V = 65_535 * 16 + 1
    with pytest.raises(ValueError, match="65,536 programs a row.*fused_sample.BLOCK"):
        fs.draw(torch.zeros(1, V, dtype=torch.bfloat16), torch.ones(1, V), 0.8, 3, torch.ones((), dtype=torch.bool))


@triton.jit
def _probe_kernel(X, C: tl.constexpr):  # one argument at a time beside a constexpr divisible by 16
    pass


def test_typed_and_specialization_are_the_launchers():
    """typed() types an argument as Triton's JIT launcher does (triton.runtime.jit.mangle_type): a tensor of every dtype
    in DTYPE_NAMES, integers either side of 2^31, -2^31 and 2^63, bools, floats, a tuple; specialization() marks
    tt.divisibility 16 exactly where the launcher's CUDA specialization (native_specialize_impl) marks 'D' (pointers
    16-byte aligned or not, integers divisible by 16, by 8 only or not at all, 0 and negatives among them), never a
    constexpr, and makes a constexpr of an integer exactly where the launcher does (1, never True); num_warps the
    launcher's default where the launch names none."""
    from triton._C.libtriton import native_specialize_impl
    from triton._utils import type_canonicalisation_dict
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import mangle_type

    from scripts.kernel_compile import DTYPE_NAMES, specialization
    canon = lambda t: type_canonicalisation_dict.get(t, t)  # 'i1' and 'u1' are one type (int1) to the front end
    tensors = [torch.zeros(64, dtype=dt) for dt in DTYPE_NAMES]
    values = ([*tensors, *(t[1:] for t in tensors), torch.zeros(64, dtype=torch.uint8)[16:]]
              + [0, 1, 2, 16, 17, 24, 48, -16, -1, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 16, -2 ** 31, -2 ** 31 - 1,
                 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 16, True, False, 0.5, 16.0])
    default_warps = CUDABackend(GPUTarget("cuda", 90, 32)).parse_options({}).num_warps
    for v in values:
        sig, const, warps = typed(_probe_kernel, (v, 16), {})
        assert const == {"C": 16} and warps == default_warps
        assert canon(sig["X"]) == canon(mangle_type(v)), v
        attrs = specialization(_probe_kernel, (v, 16), {}, sig, const)
        ty, key = native_specialize_impl(CUDABackend, v, False, True, True)
        assert (attrs.get((0,)) == [["tt.divisibility", 16]]) == (key == "D"), v
        assert set(attrs) <= {(0,)}
        assert (sig["X"] == "constexpr") == (ty == "constexpr"), v
        if ty == "constexpr":
            assert const["X"] == v and type(const["X"]) is int
    sig, _, _ = typed(_probe_kernel, ((2, tensors[0], 2 ** 31), 3), {})  # a tuple: its elements' types
    assert sig["X"] == tuple(mangle_type(x) for x in (2, tensors[0], 2 ** 31))
    assert typed(_probe_kernel, (2, 3), {"num_warps": 8})[2] == 8


@triton.jit
def _copy_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n), mask=offs < n)


def test_compile_sm90_takes_the_launchs_options_and_specialization():
    """compile_sm90 compiles a recorded launch for sm_90 with its num_warps, num_stages and maxnreg (Triton's defaults
    where the launch names none) and the launcher's specialization: 16-aligned pointers and a length divisible by 16
    marked tt.divisibility 16 in the TTIR (then 16-byte vector loads), none of them for pointers 2 bytes off and an
    odd length (2-byte loads)."""
    from pathlib import Path

    from scripts.kernel_compile import compile_sm90
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("Triton's wheel has no ptxas here")
    x = torch.zeros(4096, dtype=torch.bfloat16)
    rec = Recorder(_copy_kernel)
    rec[(2,)](x, x, 1024, BLOCK=512, num_warps=2, num_stages=2, maxnreg=64)
    rec[(4,)](x[1:], x[1:], 1023, BLOCK=256)
    aligned, odd = (compile_sm90(rec.kernel, *launch) for launch in rec.launches)
    assert (aligned.metadata.num_warps, aligned.metadata.num_stages, aligned.metadata.maxnreg) == (2, 2, 64)
    assert ".maxnreg 64" in aligned.asm["ptx"] and aligned.metadata.target.arch == 90
    assert (odd.metadata.num_warps, odd.metadata.num_stages, odd.metadata.maxnreg) == (4, 3, None)
    assert aligned.asm["ttir"].count("tt.divisibility = 16") == 3 and "tt.divisibility" not in odd.asm["ttir"]
    assert "ld.global.v4.b32" in aligned.asm["ptx"] and "ld.global.v" not in odd.asm["ptx"]


@triton.jit
def _fp8_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.float8e4nv))


def test_compile_to_ttir_targets_hopper():
    """compile_to_ttir lowers for sm_90: float8e4nv, which Triton's front end refuses below sm_89, is accepted."""
    ttir = compile_to_ttir(_fp8_kernel, {"X": "*fp32", "Y": "*fp8e4nv"}, {})
    assert "tt.fp_to_fp" in ttir and "f8E4M3FN" in ttir
