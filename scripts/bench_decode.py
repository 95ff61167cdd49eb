"""
Per-token decode latency of every attention variant with its own KV cache, against the
memory-bandwidth floor.

    python -m scripts.bench_decode --out_dir results/bench                  # H200: all variants, B 1/32, 4k/16k, 4 modes
    python -m scripts.bench_decode --variants mha,tucker_shared_8_64_64 --batches 1 --contexts 16384
    python -m scripts.bench_decode --device=cpu --tiny --out_dir /tmp/bench  # smoke test, seconds

What one measurement is. The model (bf16 weights, eval mode, GPT-2 124M shapes with
block_size = max context + 64) holds a KV cache of `context` tokens per sequence; one decode
step (model.StaticDecoder's caches, tokens and position, the mode's step function: the model's
decode_step, compiled or not, or the one-launch decoder of decode_mega / decode_wide) feeds one
new token per sequence: it reads every weight once and the whole cache of every layer, writes
its own K/V (or latent) at the position and returns the last logits. MLA runs absorbed (its
cache path), Tucker attends MQA-style to its one latent key/value head; `forward` times the
plain cached `model(idx[:, -1:], caches=caches, last_only=True)` instead.

How the cache is filled. Not by prefilling with the model: the cache buffers are written with
random-normal values and the position is set to the context length. A decode step's cost does
not depend on what the cached values are (no data-dependent control flow in attention), only
on how many there are, and random values rather than zeros keep the timing honest (zeros can
run faster than real data).

How it is timed. The step's position lives in a device tensor (StaticDecoder.position), so
one captured CUDA graph serves every position; here it stays at `context`: the step is
captured once (after eager warm-up steps on a side stream) and replayed. Every replay rewrites
the same cache slot at position `context` and attends over the same context + 1 tokens: the
same work as a real step at that position, without the per-kernel launch overhead of eager
PyTorch (which at batch 1 would dominate and hide the differences between variants). Each
replay is bracketed by CUDA events; the table gives the median over --iters replays after
--warmup replays. The graph's last logits are checked against the plain cached forward at the
same position (relative error under 5e-2, all finite; otherwise the case is reported as
failed). On CPU (--tiny smoke test) eager steps are timed with perf_counter.

The floor. A step must at least read the weights and the cache once from HBM:
    floor = (weight bytes + KV-cache bytes) / (--hbm_tbps * 1e12)
weight bytes: every parameter in bf16 once (a tied wte/lm_head once, as the lm_head reads it),
except embedding tables that are only looked up (the learned position table wpe, and wte when
untied): a step reads batch rows of them, not the table. KV bytes: model.kv_cache_bytes(context,
batch). 4.3 TB/s is the device-to-device copy rate measured on the H200.
The arithmetic (2 x params x batch FLOPs, ~8 GFLOP at batch 32) is far below the bandwidth term
on that card, so this floor is the binding one. "floor / latency" is the fraction of the floor
achieved (1.0 = at the bandwidth limit).
"""

import argparse
import functools
import statistics
import sys
import time
import traceback
from contextlib import contextmanager
from typing import Optional, Tuple

import torch

if __name__ == "__main__" and not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.bench_decode ...")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

from model import DECODE_COMPILE_MODES, GPT, GPTConfig, StaticDecoder  # noqa: E402
# bench_train holds the variant list and the helpers both benchmarks share
from scripts.bench_train import (VARIANTS, add_common_args, apply_blas, set_module_knobs, Clock, add_ratios, fmt, kernel_table,  # noqa: E402
                                 markdown_table, model_config, parse_ints, peak_memory_gib, profile_iterations,
                                 render_profile,
                                 release, reset_peak_memory, run_info, sdpa_context, select_variants, short_error,
                                 write_report)

BYTES_BF16 = 2


class _StoragesRead(TorchDispatchMode):
    """Records the storage of every tensor an aten op reads, except the table of a lookup (embedding,
    index_select: a few rows of it are read, not the table)."""

    LOOKUPS = (torch.ops.aten.embedding.default, torch.ops.aten.index_select.default)

    def __init__(self):
        super().__init__()
        self.reads = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        read = (args[1:], kwargs) if func in self.LOOKUPS else (args, kwargs)
        for t in tree_leaves(read):
            if isinstance(t, torch.Tensor):
                self.reads.add(t.untyped_storage().data_ptr())
        return func(*args, **kwargs)


@torch.no_grad()
def weight_bytes_per_step(model, step=None, batch_size: int = 1) -> int:
    """Bytes of weights one decode step reads, in bf16, found by running one: an eager step at batch_size (a layer's
    decode form may depend on it: TuckerAttention.merged_at), through the SDPA attention path and decode_linear's
    torch ops, so that every weight read is an aten read, after a first one that builds
    the inference forms; every weight it reads counts whole: parameters and the layers' inference forms
    (merged matrices included, and not the factors they replace), less tables that are only indexed (wpe,
    wte when not tied to the lm_head, RoPE rows). `step`: an eager callable to trace instead (the cached
    forward of bench mode 'forward')."""
    if step is None:
        decoder = StaticDecoder(model, batch_size, device=next(model.parameters()).device, max_len=4)
        step = lambda: model.decode_step(decoder.tokens, decoder.caches, decoder.position)  # noqa: E731
    import decode_linear
    enabled, decode_linear.ENABLED = decode_linear.ENABLED, False  # its Triton launches are not aten reads
    try:
        with attention_backend("sdpa"):
            step()  # builds the forms
            with _StoragesRead() as mode:
                step()
    finally:
        decode_linear.ENABLED = enabled
    weights = {}  # storage -> elements: a form tensor that is a view of a parameter counts once
    tensors = list(model.parameters())
    for module in model.modules():
        form = module.__dict__.get("_inference_form")
        if form is not None:
            tensors += [t for t in form[1].values() if isinstance(t, torch.Tensor)]
    for t in tensors:
        storage = t.untyped_storage()
        weights[storage.data_ptr()] = storage.nbytes() // t.element_size()
    return BYTES_BF16 * sum(n for ptr, n in weights.items() if ptr in mode.reads)


def memory_floor_ms(weight_bytes: int, kv_bytes: int, hbm_tbps: float) -> float:
    """The bandwidth floor of one decode step in ms: each weight and cached value read once."""
    return (weight_bytes + kv_bytes) / (hbm_tbps * 1e12) * 1e3


def fill_caches(caches, context: int, generator: torch.Generator):
    """Stand-in for a prefill of `context` tokens: random-normal cached values, pos = context."""
    for cache in caches:
        for buf in cache.store.values():
            buf.normal_(generator=generator)
        cache.pos = context


def build_model(variant, args, block_size: int, device: torch.device) -> GPT:
    """The variant's model for decoding: bf16 weights (and so a bf16 KV cache), eval mode."""
    cfg = model_config(variant, tiny=args.tiny, rope=args.rope, block_size=block_size)
    with torch.device(device):  # initialize on the device: fast for 124M
        return GPT(cfg).to(torch.bfloat16).eval()


MODES = ("forward", "step", "graph_sdpa", "graph", "graph_default", "graph_compiled", "graph_fused", "graph_merged",
         "graph_merged_compiled", "graph_autotune", "graph_merged_autotune", "graph_mega",
         "graph_mega_phases")
MODE_NOTES = {
    "forward": "eager GPT.forward with the cache (the path before the static step)",
    "step": "eager GPT.decode_step (inference form, decode_attention's auto backend)",
    "graph_sdpa": "decode_step in one CUDA graph, attention through the SDPA fallback",
    "graph": "decode_step in one CUDA graph, decode_attention's auto backend (Triton on CUDA); Tucker and MLA "
             "unmerged (merged_decode=False in this and every mode but graph_merged* and graph_mega* (merged) and "
             "graph_default (the model's own), whatever the model's default)",
    "graph_default": "as graph, each Tucker and MLA layer in its own default decode form (merged_decode, "
                     "or TuckerAttention.merged_at's choice for the batch, and fused_decode as the model sets them: "
                     "what generate and sample.py run)",
    "graph_compiled": "as graph, the step torch.compiled first (fused elementwise kernels)",
    "graph_fused": "as graph, Tucker layers through the fused-core kernel (TuckerAttention.fused_decode; "
                   "other variants as graph)",
    "graph_merged": "as graph, Tucker layers with the query core merged into the down-projection and the output "
                    "core into U~2 (TuckerAttention.merged_decode: 2 matmuls per layer, not 4), MLA layers with "
                    "everything x feeds in one matrix and W_UV W_O in another (LatentAttention.merged_decode: 2, "
                    "not 5); others as graph",
    "graph_merged_compiled": "as graph_merged, the step torch.compiled first",
    "graph_mega": "the whole step as ONE persistent kernel (decode_mega.step_decoder: MegaDecoder's GEMV tiles at "
                  "batch <= 4, decode_wide.WideDecoder's tensor-core tiles above; grid barriers between its phases, "
                  "Tucker in its merged form), captured in a graph with the memset of its counters",
    "graph_mega_phases": "as graph_mega, each phase of each layer a launch of its own instead of the barriers (where "
                         "the time goes: the phases' own work against the barriers)",
    "graph_autotune": "as graph_compiled with mode='max-autotune-no-cudagraphs' (Triton GEMM templates: "
                      "elementwise work fused into the matmuls' epilogues; minutes of autotuning)",
    "graph_merged_autotune": "as graph_merged, compiled as graph_autotune",
}


KNOB_MODULES = ("decode_attention", "decode_linear", "decode_mega", "decode_wide", "model")  # whose upper-case
#                                                                                           constants --knob may set


def set_knobs(pairs) -> dict:
    """--knob [MODULE.]NAME=VALUE: a module constant (upper-case name it defines) of decode_attention (the
    default), decode_linear, decode_mega, decode_wide or model (e.g. model.TUCKER_MERGE_MAX_EXTRA=8388608: the bound
    of TuckerAttention.merged_at, read as each model is built), the value a Python literal
    (bench_train.set_module_knobs)."""
    return set_module_knobs(pairs, KNOB_MODULES)


@contextmanager
def attention_backend(name: str):
    """Force decode_attention's backend (and the fused Tucker kernel's) for the model's decode steps
    ('auto' leaves them alone)."""
    import decode_attention as module
    originals = {f: getattr(module, f) for f in ("decode_attention", "tucker_decode_attention")}
    if name != "auto":
        for f, fn in originals.items():
            setattr(module, f, functools.partial(fn, backend=name))
    try:
        yield
    finally:
        for f, fn in originals.items():
            setattr(module, f, fn)


def decode_paths(mode: str) -> Optional[Tuple[bool, bool]]:
    """(fused_decode, merged_decode) that a mode sets on every Tucker / MLA layer (fused_decode: Tucker's only);
    None for graph_default, which times each layer's own default. graph_merged* and graph_mega: the merged forms,
    graph_fused: Tucker's fused cores, every other mode the factored (unmerged) forms."""
    if mode == "graph_default":
        return None
    return mode == "graph_fused", mode.startswith(("graph_merged", "graph_mega"))


@torch.no_grad()
def bench_case(model, batch_size: int, context: int, args, device: torch.device, mode: str) -> dict:
    gen = torch.Generator(device=device).manual_seed(args.seed)
    decoder = StaticDecoder(model, batch_size, device=device, max_len=context + 1)  # room for the new token
    fill_caches(decoder.caches, context, gen)
    decoder.position.fill_(context)
    decoder.tokens.copy_(torch.randint(model.config.vocab_size, (batch_size, 1), device=device, generator=gen))
    clock = Clock(device)

    def forward_step():  # every step (and the captured one) writes the slot at `context` and reads 0..context
        for cache in decoder.caches:
            cache.pos = context
        return model(decoder.tokens, caches=decoder.caches, last_only=True)[0][:, -1]

    if mode.endswith("_compiled") or mode.endswith("_autotune"):
        compile_mode = DECODE_COMPILE_MODES["max-autotune" if mode.endswith("_autotune") else "default"]
        from model import disable_opaque_calls
        disable_opaque_calls()  # as StaticDecoder does before its compile
        step_fn = torch.compile(model.decode_step, dynamic=False, mode=compile_mode)  # graphs: captured below
    elif mode.startswith("graph_mega"):
        from decode_mega import step_decoder
        mega = step_decoder(model, decoder.caches)  # the caches' contents copied into its stacked ones (batch > 4:
        #                                             decode_wide's tensor-core step)
        step_fn = functools.partial(mega.decode_step, phases=mode == "graph_mega_phases")
    else:
        step_fn = model.decode_step

    def static_step():  # the position stays at `context`: the same work as a real step there
        return step_fn(decoder.tokens, decoder.caches, decoder.position)

    step = forward_step if mode == "forward" else static_step
    backend = "sdpa" if mode == "graph_sdpa" else "auto"
    stamps = []  # (start, end) of each timed step
    switchable = [block.attn for block in model.transformer.h if hasattr(block.attn, "merged_decode")]
    defaults = [(getattr(attn, "fused_decode", None), attn.merged_decode) for attn in switchable]  # put back after
    paths = decode_paths(mode)
    for attn in switchable if paths is not None else ():  # Tucker and MLA layers: the decode path this mode times
        if hasattr(attn, "fused_decode"):  # Tucker only
            attn.fused_decode = paths[0]
        attn.merged_decode = paths[1]
    try:
        w_bytes = weight_bytes_per_step(model, forward_step if mode == "forward" else None,  # this mode's path
                                        batch_size)
        with attention_backend(backend):
            if mode.startswith("graph"):
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):  # warm-up off the default stream (Triton compiles here)
                    for _ in range(3):
                        step()
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    logits = step()
                run = graph.replay
            else:
                run = step
            for _ in range(args.warmup):
                run()
            for _ in range(args.iters):
                a = clock.stamp()
                run()
                stamps.append((a, clock.stamp()))
            clock.sync()  # events can be read only once the device has passed them
            out = (logits if mode.startswith("graph") else step()).float().clone()
            profile = None
            if args.profile_rows:  # where this row's step time goes (after the timing: it does not perturb it)
                pairs, source = profile_iterations(lambda i: run(), args.profile_rows, device, clock)
                profile = {**kernel_table(pairs, args.profile_rows, statistics.median(clock.ms(a, b) for a, b in stamps)),
                           "source": source}
    finally:  # the model's own paths again, also when this mode failed (the caller goes on to the next)
        for attn, (fused_default, merged_default) in zip(switchable, defaults):
            if fused_default is not None:
                attn.fused_decode = fused_default
            attn.merged_decode = merged_default
    # every mode computes what the plain forward computes at that position (bf16 rounding apart)
    ref = forward_step().float()
    check = ((out - ref).norm() / ref.norm()).item()
    if not (torch.isfinite(out).all().item() and check < 5e-2):
        raise FloatingPointError(f"decode step check failed: {mode} vs forward rel. error {check:.2e}")

    times = [clock.ms(a, b) for a, b in stamps]
    latency = statistics.median(times)
    kv_bytes = model.kv_cache_bytes(context, batch_size)
    floor = memory_floor_ms(w_bytes, kv_bytes, args.hbm_tbps)
    return dict(latency_ms=latency, latency_ms_min=min(times), latency_ms_max=max(times),
                tokens_per_s=batch_size / (latency / 1e3), kv_cache_bytes=kv_bytes, kv_cache_mb=kv_bytes / 1e6,
                weight_bytes=w_bytes, weight_mb=w_bytes / 1e6, floor_ms=floor, floor_fraction=floor / latency,
                peak_mem_gib=peak_memory_gib(device), vs_forward_rel_err=check, **({"profile": profile} if profile else {}),
                attention_backend="sdpa (forward)" if mode == "forward" else decode_backend_name(model, decoder, backend))


def decode_backend_name(model, decoder, forced: str) -> str:
    """Which kernel decode_attention picks for this model's cache (as the timed steps did)."""
    if forced != "auto":
        return forced
    import decode_attention as module
    attn, cache = model.transformer.h[0].attn, decoder.caches[0]
    k, v = attn.cached_kv(cache) if hasattr(attn, "cached_kv") else (cache.store["k"], cache.store["v"])
    dk = k.size(-1)
    q = k.new_empty(k.size(0), attn.n_head, dk)
    return module.decode_backend(q, k, v)


def render(rows, info) -> str:
    headers = ["variant", "mode", "batch", "context", "ms/token", "tokens/s", "latency ×MHA", "KV cache MB",
               "weights MB", "floor ms", "floor / latency", "attention", "peak GiB", "note"]
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        body.append([
            r["label"], r["mode"], r["batch_size"], r["context"],
            fmt(r.get("latency_ms"), ".4f"), fmt(r.get("tokens_per_s"), ",.0f"),
            fmt(r.get("latency_ms_vs_mha"), ".3f"), fmt(r.get("kv_cache_mb"), ".2f"),
            fmt(r.get("weight_mb"), ".1f"), fmt(r.get("floor_ms"), ".4f"), fmt(r.get("floor_fraction"), ".3f"),
            r.get("attention_backend", ""), fmt(r.get("peak_mem_gib"), ".2f"),
            "" if ok else r["error"].replace("|", "/"),
        ])
    a = info["args"]
    model = "LLaMA-3 1B" if a["suite"] == "llama1b" else ("tiny model" if a["tiny"] else "GPT-2 124M")
    modes = "; ".join(f"`{m}`: {MODE_NOTES[m]}" for m in a["modes"].split(","))
    head = (f"# Decode step, {model} "
            f"({'RoPE' if a['rope'] or a['suite'] == 'llama1b' else 'learned positions'}, bias=False), "
            f"bf16 weights and KV cache\n\n"
            f"{info['date']} on {info['gpu'] or info['device']}, torch {info['torch']}, SDPA backend "
            f"{a['sdpa_backend']}; median of {a['iters']} after {a['warmup']} warm-up; floor at "
            f"{a['hbm_tbps']:g} TB/s. Modes: {modes}. Ratios ×MHA within each mode, batch and context.\n\n"
            f"`{info['command']}`\n\n")
    return head + markdown_table(headers, body)


GENERATE_MODES = {  # --generate_modes: name -> GPT.generate's (decode, compile, compile_mode), i.e. sample.py's keys
    "eager": ("eager", False, "default"), "graph": ("graph", False, "default"),
    "graph_compiled": ("graph", True, "default"), "eager_compiled": ("eager", True, "default"),
    "graph_autotune": ("graph", True, "max-autotune"), "mega": ("mega", False, "default"),
}


@torch.no_grad()
def bench_generate(model, args, device: torch.device) -> list:
    """What sample.py does, end to end: model.generate at batch 1 from a --generate_prompt-token prompt,
    greedy (--temperature 0, the default) or sampled (sample.py's own defaults: --temperature 0.8 --top_k 200),
    max_new_tokens = --generate, once per --generate_modes entry (decode mode and torch.compile of the step,
    as sample.py's --decode and --compile). Tokens/s counts new tokens over the wall time of the whole call
    (prefill, capture and sampling included; the one-time compile and capture happen in a warm-up call
    before); the tokens of every mode (sampled: from the same seeded generator) must equal the first mode's
    (same_tokens_as_first; earlier JSON files, whose first mode was always eager, call it
    same_tokens_as_eager)."""
    gen = torch.Generator(device=device).manual_seed(args.seed)
    prompt = torch.randint(model.config.vocab_size, (1, args.generate_prompt), device=device, generator=gen)
    rows, reference = [], None
    for mode in args.generate_modes:
        decode, compile, compile_mode = GENERATE_MODES[mode]
        kw = dict(temperature=args.temperature, top_k=args.top_k or None, decode=decode, compile=compile,
                  compile_mode=compile_mode)
        model.generate(prompt, 8, generator=gen, **kw)  # warm-up: compile, capture
        for _ in range(2):  # the second call is the one reported (the first may still warm caches)
            gen.manual_seed(args.seed + 1)  # every mode draws from the same stream
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(prompt, args.generate, generator=gen, **kw)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        reference = out if reference is None else reference
        rows.append(dict(generate_mode=mode, prompt_tokens=args.generate_prompt, new_tokens=args.generate, seconds=seconds,
                         tokens_per_s=args.generate / seconds, same_tokens_as_first=bool(torch.equal(out, reference)),
                         temperature=args.temperature, top_k=(args.top_k or None) if args.temperature else None))
        if args.generate_profile:
            rows[-1]["profile"] = profile_generate(model, prompt, kw, args.generate_profile, device)
    return rows


def profile_generate(model, prompt, kw: dict, n_tokens: int, device: torch.device) -> dict:
    """Where a generated token's time goes: one generate call of n_tokens under torch.profiler, as the
    kernels per token (calls_per_step), kernel time per token, and busy_pct = kernel time / wall time
    per token of an unprofiled call (below 100: the GPU waited for the host)."""
    clock = Clock(device)
    clock.sync()
    t0 = time.perf_counter()
    model.generate(prompt, n_tokens, **kw)
    clock.sync()
    ms_per_token = (time.perf_counter() - t0) * 1e3 / n_tokens
    pairs, source = profile_iterations(
        lambda i: model.generate(prompt, n_tokens, **kw), 1, device, clock)
    return {**kernel_table(pairs, n_tokens, ms_per_token), "source": source, "tokens": n_tokens}


def llama_variants():
    """The LLaMA-3 1B rows of the paper's timing table (scripts/paper_tables.py), as (id, label, GPTConfig
    fields) from their config files, resolved exactly as train.py would."""
    from scripts.paper_tables import TABLES, build_config
    return [(row.id, row.label, build_config(row, "on")) for row in TABLES["llama1b"].rows]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="all",
                   help="comma-separated ids or 'all': " + ", ".join(v.id for v in VARIANTS)
                   + " (--suite llama1b: the ids of scripts/paper_tables.py's llama1b rows)")
    p.add_argument("--suite", default="gpt2", choices=("gpt2", "llama1b"),
                   help="gpt2: GPT-2 124M variants; llama1b: the paper's LLaMA-3 1B rows (RoPE, config files)")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,32; llama1b: 1; --tiny: 1,2)")
    p.add_argument("--contexts", default=None,
                   help="cached tokens (default 4096,16384; llama1b: 4096; --tiny: 16,32)")
    p.add_argument("--rope", action="store_true", help="RoPE instead of learned positions (MLA: decoupled)")
    p.add_argument("--modes", default=None,
                   help="comma-separated of " + ", ".join(MODES) + " (default: forward,step,graph_sdpa,graph on cuda, forward,step on cpu)")
    p.add_argument("--generate", type=int, default=0,
                   help="also time model.generate end to end (sample.py's loop) for this many new tokens at batch 1")
    p.add_argument("--generate_prompt", type=int, default=16, metavar="N",
                   help="with --generate: the prompt's tokens (the context the generated tokens attend to grows from "
                        "N; below the model's block size, max(--contexts) + 64, beyond which generate refills its "
                        "cache from the last half block, as sample.py does)")
    p.add_argument("--generate_modes", default=None,
                   help="comma-separated of " + ", ".join(GENERATE_MODES) + " (default eager,graph on cuda, eager on cpu; "
                        "*_compiled: the step torch.compiled, sample.py --compile=True)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="with --generate: 0 = greedy (the default); sample.py's default is 0.8 (with --top_k 200)")
    p.add_argument("--top_k", type=int, default=200,
                   help="with --generate and --temperature > 0: sample from the top_k most likely tokens (0 = all)")
    p.add_argument("--generate_profile", type=int, default=0, metavar="N",
                   help="with --generate: also profile one generate call of N tokens per mode (kernels per token, "
                        "kernel time per token, how busy the GPU is)")
    p.add_argument("--profile_rows", type=int, default=0, metavar="N",
                   help="also profile N replays of every row's step after timing it: kernels per step and where the "
                        "time goes (the top kernels, in the report)")
    p.add_argument("--iters", type=int, default=None, help="timed steps / replays (default 100; --tiny: 3)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up replays (default 10; --tiny: 1)")
    p.add_argument("--hbm_tbps", type=float, default=4.3, help="HBM bandwidth for the floor, TB/s (measured copy rate)")
    p.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of decode_attention's (or, prefixed, decode_linear's, decode_mega's, decode_wide's or "
                        "model's) tuning knobs for the whole run (a Python literal; repeatable), e.g. --knob "
                        "NUM_WARPS=4, --knob decode_linear.ENABLED=False")
    add_common_args(p, name="bench_decode")
    args = p.parse_args(argv)
    set_knobs(args.knob)
    apply_blas(args.blas)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device=cpu --tiny for a smoke test")
    args.modes = args.modes or ("forward,step,graph_sdpa,graph" if device.type == "cuda" else "forward,step")
    modes = [m.strip() for m in args.modes.split(",")]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}: allowed {', '.join(MODES)}")
        if m.startswith("graph") and device.type != "cuda":
            raise SystemExit(f"mode {m!r} captures a CUDA graph: it needs --device=cuda")
    args.generate_modes = [m.strip() for m in (args.generate_modes or
                                               ("eager,graph" if device.type == "cuda" else "eager")).split(",")]
    for m in args.generate_modes if args.generate else []:  # (checked only where generate runs)
        if m not in GENERATE_MODES:
            raise SystemExit(f"unknown --generate_modes entry {m!r}: allowed {', '.join(GENERATE_MODES)}")
        if GENERATE_MODES[m][0] in ("graph", "mega") and device.type != "cuda":
            raise SystemExit(f"--generate_modes {m!r} captures a CUDA graph: it needs --device=cuda")
    if not (args.temperature >= 0 and args.top_k >= 0):  # (nan too)
        raise SystemExit(f"--temperature {args.temperature} and --top_k {args.top_k} must be >= 0 (0: greedy / every token)")
    llama = args.suite == "llama1b"
    args.iters = args.iters or (3 if args.tiny else 100)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 10)
    args.batches = args.batches or ("1,2" if args.tiny else ("1" if llama else "1,32"))
    args.contexts = args.contexts or ("16,32" if args.tiny else ("4096" if llama else "4096,16384"))
    batches, contexts = parse_ints(args.batches, "batches"), parse_ints(args.contexts, "contexts")
    block_size = max(contexts) + 64  # every position up to context (+1 new token) has an embedding / rotation
    if args.generate and not 1 <= args.generate_prompt < block_size:
        raise SystemExit(f"--generate_prompt {args.generate_prompt} must be 1 .. {block_size - 1} tokens: the model's "
                         f"block size is {block_size} (max(--contexts) + 64)")
    if llama:
        chosen = llama_variants()
        if args.variants != "all":
            wanted = [s.strip() for s in args.variants.split(",")]
            known = {vid for vid, _, _ in chosen}
            for w in wanted:
                if w not in known:
                    raise SystemExit(f"unknown llama1b row {w!r}; known: {', '.join(sorted(known))}")
            chosen = [c for c in chosen if c[0] in wanted]
        order = [vid for vid, _, _ in chosen]
        specs = [(vid, label, lambda fields=fields: GPTConfig(**{**fields, "block_size": block_size, "dropout": 0.0}))
                 for vid, label, fields in chosen]
        if args.tiny:
            raise SystemExit("--tiny is for the gpt2 suite (the LLaMA rows are built from their config files)")
    else:
        variants = select_variants(args.variants)
        order = [v.id for v in VARIANTS]
        specs = [(v.id, v.label, lambda v=v: model_config(v, tiny=args.tiny, rope=args.rope, block_size=block_size))
                 for v in variants]

    info = run_info(args, device)
    rows, generated = [], []
    markdown = ""
    print(f"{info['command']}\n{info['gpu'] or info['device']}, torch {info['torch']}", flush=True)
    for vid, label, make_config in specs:
        model, build_error = None, None
        try:
            reset_peak_memory(device)
            torch.manual_seed(args.seed)
            with torch.device(device):  # initialize on the device: fast even for 1B
                model = GPT(make_config()).to(torch.bfloat16).eval()
        except Exception as e:
            traceback.print_exc()
            build_error = short_error(e)
        if args.generate and not build_error:
            for g in bench_generate(model, args, device):
                g.update(variant=vid, label=label)
                generated.append(g)
                print(f"[generate {g['generate_mode']:5s}] {vid:24s} {g['tokens_per_s']:,.0f} tokens/s "
                      f"(same tokens as {args.generate_modes[0]}: {g['same_tokens_as_first']})", flush=True)
        for mode in modes:
            for batch_size in batches:
                for context in contexts:
                    row = {"variant": vid, "label": label, "mode": mode, "batch_size": batch_size,
                           "context": context, "block_size": block_size}
                    t0 = time.perf_counter()
                    try:
                        if build_error:
                            raise RuntimeError(f"model build failed: {build_error}")
                        reset_peak_memory(device)
                        with sdpa_context(args.sdpa_backend):
                            row.update(bench_case(model, batch_size, context, args, device, mode))
                        row.update(status="ok", error=None)
                    except Exception as e:  # OOM, backend without a kernel, capture failure: report, go on
                        if not build_error:
                            traceback.print_exc()
                        row.update(status="error", error=short_error(e))
                    release(device)
                    row["wall_s"] = time.perf_counter() - t0
                    if model is not None:
                        row["attn_params_mb"] = model.attn_params() * 2 / 1e6
                        row["kv_values_per_token_per_layer"] = model.kv_values_per_token_per_layer()
                    rows.append(row)
                    msg = (f"{row['latency_ms']:.4f} ms/token, floor {row['floor_ms']:.4f} ms "
                           f"({row['floor_fraction']:.2f}), {row['attention_backend']}"
                           if row["status"] == "ok" else row["error"])
                    print(f"[{mode:10s} B={batch_size} ctx={context}] {vid:24s} {msg}", flush=True)
        rows.sort(key=lambda r: (modes.index(r["mode"]), r["batch_size"], r["context"], order.index(r["variant"])))
        add_ratios(rows, ["latency_ms", "tokens_per_s"], ["mode", "batch_size", "context"])  # vs MHA
        markdown = render(rows, info)
        if generated:
            how = "greedy" if args.temperature == 0 else f"sampled at temperature {args.temperature:g}, top_k {args.top_k or 'all'}"
            markdown += (f"\n\n## model.generate end to end (batch 1, {how}, {args.generate_prompt}-token prompt)\n\n"
                         + markdown_table(
                ["variant", "mode", "new tokens", "s", "tokens/s", f"same tokens as {args.generate_modes[0]}",
                 "kernels / token", "kernel ms / token", "busy %"],
                [[g["label"], g["generate_mode"], g["new_tokens"], fmt(g["seconds"], ".3f"),
                  fmt(g["tokens_per_s"], ",.0f"), g["same_tokens_as_first"],
                  fmt(g.get("profile", {}).get("calls_per_step"), ".0f"),
                  fmt(g.get("profile", {}).get("kernel_ms_per_step"), ".3f"),
                  fmt(g.get("profile", {}).get("busy_pct"), ".0f")] for g in generated]))
        for r in rows:
            if r.get("profile"):
                markdown += "\n\n" + render_profile(r["profile"], f"{r['label']}, {r['mode']}, batch {r['batch_size']}, "
                                                                 f"{r['context']} cached")
        write_report(args.out_dir, args.name, markdown, {**info, "rows": rows, "generate": generated})
        del model
        release(device)
    print("\n" + markdown, flush=True)
    return rows


if __name__ == "__main__":
    main()
