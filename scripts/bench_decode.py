"""
Per-token decode latency of every attention variant with its own KV cache, against the
memory-bandwidth floor.

    python scripts/bench_decode.py --out_dir results/bench                  # H200: all variants, B 1/32, 1k/4k/16k
    python scripts/bench_decode.py --variants mha,tucker_shared_8_64_64 --batches 1 --contexts 16384
    python scripts/bench_decode.py --device=cpu --tiny --out_dir /tmp/bench  # smoke test, seconds

What one measurement is. The model (bf16 weights, eval mode, GPT-2 124M shapes with
block_size = max context + 64) holds a KV cache of `context` tokens per sequence; one decode
step is `model(idx[:, -1:], caches=caches, last_only=True)`: one new token per sequence reads
every weight once and the whole cache of every layer, appends its own K/V (or latent) and
returns the last logits. MLA runs absorbed (its cache path), Tucker attends MQA-style to its
one latent key/value head.

How the cache is filled. Not by prefilling with the model: the cache buffers are written with
random-normal values and each layer's `cache.pos` is set to the context length. A decode
step's cost does not depend on what the cached values are (no data-dependent control flow in
attention), only on how many there are, and random values rather than zeros keep the timing
honest (zeros can run faster than real data).

How it is timed. LayerCache slices by a python int `pos`, so the shapes of a step are fixed
once `pos` is: the step at pos = context is captured in a CUDA graph (after eager warm-up steps
on a side stream) and replayed. Every replay rewrites the same cache slot at position `context`
and attends over the same context + 1 tokens: the same work as a real step at that position,
without the per-kernel launch overhead of eager PyTorch (which at batch 1 would dominate and
hide the differences between variants). Each replay is bracketed by CUDA events; the table
gives the median over --iters replays after --warmup replays. The graph's logits are checked
against an eager step at the same position. On CPU (--tiny smoke test) eager steps are timed
with perf_counter.

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
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

# bench_train holds the variant list and the helpers both benchmarks share (and puts the repo on sys.path)
from bench_train import (VARIANTS, add_common_args, Clock, add_ratios, fmt, markdown_table,  # noqa: E402
                         model_config, parse_ints, peak_memory_gib, release, reset_peak_memory, run_info,
                         sdpa_context, select_variants, short_error, write_report)
from model import GPT  # noqa: E402

BYTES_BF16 = 2


def weight_bytes_per_step(model) -> int:
    """Bytes of weights one decode step reads: every (unique) parameter in bf16, except tables
    that are only indexed (wpe; wte when it is not tied to the lm_head)."""
    lookups = set()
    if model.transformer.wpe is not None:
        lookups.add(id(model.transformer.wpe.weight))
    if model.transformer.wte.weight is not model.lm_head.weight:
        lookups.add(id(model.transformer.wte.weight))
    return BYTES_BF16 * sum(p.numel() for p in model.parameters() if id(p) not in lookups)


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


@torch.no_grad()
def bench_case(model, batch_size: int, context: int, args, device: torch.device) -> dict:
    gen = torch.Generator(device=device).manual_seed(args.seed)
    caches = model.new_caches(batch_size, max_len=context + 1)  # room for the one new token
    fill_caches(caches, context, gen)
    idx = torch.randint(model.config.vocab_size, (batch_size, context + 1), device=device, generator=gen)
    clock = Clock(device)

    def step():
        for cache in caches:  # every step (and the captured one) runs at pos = context
            cache.pos = context
        logits, _ = model(idx[:, -1:], caches=caches, last_only=True)
        return logits

    stamps = []  # (start, end) of each timed step
    if args.graphs:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # eager warm-up off the default stream, as capture wants it
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        for _ in range(args.warmup):
            graph.replay()
        for _ in range(args.iters):
            a = clock.stamp()
            graph.replay()
            stamps.append((a, clock.stamp()))
        clock.sync()  # events can be read only once the device has passed them
        # the graph computes what an eager step computes (same slot, same tokens, same cache)
        graph_logits = logits.float().clone()
        eager_logits = step().float()
        check = ((graph_logits - eager_logits).norm() / eager_logits.norm()).item()
        del graph
    else:
        for _ in range(args.warmup):
            step()
        for _ in range(args.iters):
            a = clock.stamp()
            logits = step()
            stamps.append((a, clock.stamp()))
        clock.sync()
        eager_logits = logits.float()
        check = 0.0
    if not (torch.isfinite(eager_logits).all().item() and check < 1e-2):
        raise FloatingPointError(f"decode step check failed: graph vs eager rel. error {check:.2e}")

    times = [clock.ms(a, b) for a, b in stamps]
    latency = statistics.median(times)
    kv_bytes = model.kv_cache_bytes(context, batch_size)
    w_bytes = weight_bytes_per_step(model)
    floor = memory_floor_ms(w_bytes, kv_bytes, args.hbm_tbps)
    return dict(latency_ms=latency, latency_ms_min=min(times), latency_ms_max=max(times),
                tokens_per_s=batch_size / (latency / 1e3), kv_cache_bytes=kv_bytes, kv_cache_mb=kv_bytes / 1e6,
                weight_bytes=w_bytes, weight_mb=w_bytes / 1e6, floor_ms=floor, floor_fraction=floor / latency,
                peak_mem_gib=peak_memory_gib(device), graph_vs_eager_rel_err=check)


def render(rows, info) -> str:
    headers = ["variant", "batch", "context", "ms/token", "tokens/s", "latency ×MHA", "KV cache MB",
               "weights MB", "floor ms", "floor / latency", "peak GiB", "note"]
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        body.append([
            r["label"], r["batch_size"], r["context"],
            fmt(r.get("latency_ms"), ".4f"), fmt(r.get("tokens_per_s"), ",.0f"),
            fmt(r.get("latency_ms_vs_mha"), ".3f"), fmt(r.get("kv_cache_mb"), ".2f"),
            fmt(r.get("weight_mb"), ".1f"), fmt(r.get("floor_ms"), ".4f"), fmt(r.get("floor_fraction"), ".3f"),
            fmt(r.get("peak_mem_gib"), ".2f"), "" if ok else r["error"].replace("|", "/"),
        ])
    a = info["args"]
    head = (f"# Decode step, {'tiny model' if a['tiny'] else 'GPT-2 124M'}"
            f" ({'RoPE' if a['rope'] else 'learned positions'}, bias=False), bf16 weights and KV cache\n\n"
            f"{info['date']} on {info['gpu'] or info['device']}, torch {info['torch']}, "
            f"{'CUDA graph replays' if a['graphs'] else 'eager steps'}, SDPA backend {a['sdpa_backend']}; "
            f"median of {a['iters']} after {a['warmup']} warm-up; floor at {a['hbm_tbps']:g} TB/s.\n\n"
            f"`{info['command']}`\n\n")
    return head + markdown_table(headers, body)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", default="all",
                   help="comma-separated ids or 'all': " + ", ".join(v.id for v in VARIANTS))
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,32; --tiny: 1,2)")
    p.add_argument("--contexts", default=None, help="cached tokens (default 1024,4096,16384; --tiny: 16,32)")
    p.add_argument("--rope", action="store_true", help="RoPE instead of learned positions (MLA: decoupled)")
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="time CUDA graph replays (default: on for cuda; cpu always eager)")
    p.add_argument("--iters", type=int, default=None, help="timed steps / replays (default 100; --tiny: 3)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up replays (default 10; --tiny: 1)")
    p.add_argument("--hbm_tbps", type=float, default=4.3, help="HBM bandwidth for the floor, TB/s (measured copy rate)")
    add_common_args(p, name="bench_decode")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --device=cpu --tiny for a smoke test")
    args.graphs = device.type == "cuda" and (True if args.graphs is None else args.graphs)
    args.iters = args.iters or (3 if args.tiny else 100)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 10)
    args.batches = args.batches or ("1,2" if args.tiny else "1,32")
    args.contexts = args.contexts or ("16,32" if args.tiny else "1024,4096,16384")
    batches, contexts = parse_ints(args.batches, "batches"), parse_ints(args.contexts, "contexts")
    variants = select_variants(args.variants)
    block_size = max(contexts) + 64  # every position up to context (+1 new token) has an embedding / rotation

    info = run_info(args, device)
    rows = []
    print(f"{info['command']}\n{info['gpu'] or info['device']}, torch {info['torch']}", flush=True)
    for v in variants:
        model, build_error = None, None
        try:
            reset_peak_memory(device)
            torch.manual_seed(args.seed)
            model = build_model(v, args, block_size, device)
        except Exception as e:
            traceback.print_exc()
            build_error = short_error(e)
        for batch_size in batches:
            for context in contexts:
                row = {"variant": v.id, "label": v.label, "batch_size": batch_size, "context": context,
                       "block_size": block_size}
                t0 = time.perf_counter()
                try:
                    if build_error:
                        raise RuntimeError(f"model build failed: {build_error}")
                    reset_peak_memory(device)
                    with sdpa_context(args.sdpa_backend):
                        row.update(bench_case(model, batch_size, context, args, device))
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
                       f"({row['floor_fraction']:.2f})" if row["status"] == "ok" else row["error"])
                print(f"[B={batch_size} ctx={context}] {v.id:24s} {msg}", flush=True)
                rows.sort(key=lambda r: (r["batch_size"], r["context"], [x.id for x in VARIANTS].index(r["variant"])))
                add_ratios(rows, ["latency_ms", "tokens_per_s"], ["batch_size", "context"])
                markdown = render(rows, info)
                write_report(args.out_dir, args.name, markdown, {**info, "rows": rows})
        del model
        release(device)
    print("\n" + markdown, flush=True)
    return rows


if __name__ == "__main__":
    main()
