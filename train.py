"""
Train a GPT with any attention of the paper, on one device or with DDP under torchrun.

    python train.py config/shakespeare_tucker.py --max_iters=2000
    python train.py config/shakespeare_tucker.py --device=cpu --compile=False --n_layer=2 --max_iters=50
    torchrun --standalone --nproc_per_node=8 train.py config/owt_tucker.py

Every key below and every GPTConfig field can be set from a config file or as --key=value
(configurator.py: type-checked, unknown keys rejected). The run writes into out_dir:
config.json (the resolved config), log.jsonl (one JSON line per log/eval), ckpt.pt (model,
optimizer, config, iteration, best val loss, RNG and sampler state; written atomically) and
summary.json (the results file every table reads).
"""

import json
import math
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import fields

import numpy as np
import torch

from configurator import format_config, parse_config
from model import GPT, GPTConfig

# ----------------------------------------------------------------------------------------
# Defaults (training keys; every GPTConfig field is added below with its model default)
TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",  # run folder: config.json, log.jsonl, ckpt.pt, summary.json
    eval_interval=2000,  # iterations between evaluations (and checkpoints)
    log_interval=1,  # iterations between log lines
    eval_iters=200,  # batches per split in an evaluation (random batches)
    eval_full_val=False,  # evaluate val on the whole split, in order (deterministic) instead of eval_iters batches
    eval_only=False,  # evaluate once and exit
    always_save_checkpoint=True,  # checkpoint at every evaluation, not only when val improves
    save_checkpoint=True,  # False: never write ckpt.pt (sweeps that only need summary.json)
    init_from="scratch",  # 'scratch' | 'resume' (continue from out_dir/ckpt.pt exactly where it stopped)
    patience=0,  # early stopping: stop after this many evaluations without a new best val loss (0 = off)
    # wandb (imported only when wandb_log=True; WANDB_MODE=offline works)
    wandb_log=False,
    wandb_project="tucker-attention",
    wandb_run_name="run",
    # data
    dataset="shakespeare",  # data/<dataset>/{train,val}.bin from data/<dataset>/prepare.py
    data_dir="",  # overrides data/<dataset>
    gradient_accumulation_steps=1,  # micro-steps per iteration, over all DDP ranks together
    batch_size=12,  # sequences per micro-step per rank
    # AdamW and schedule
    learning_rate=6e-4,  # peak learning rate
    max_iters=600000,  # total iterations
    weight_decay=1e-1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,  # clip gradients at this norm (0 = off)
    decay_lr=True,  # linear warmup then cosine decay to min_lr; False: constant learning_rate
    warmup_iters=2000,
    lr_decay_iters=600000,  # cosine reaches min_lr here (usually = max_iters)
    min_lr=6e-5,
    # system
    backend="nccl",  # DDP backend on GPU (gloo is used on CPU)
    device="",  # 'cuda', 'cuda:1', 'cpu', 'mps'; '' = cuda if available else cpu
    dtype="",  # 'float32' | 'bfloat16' | 'float16'; '' = bfloat16 on a GPU that has it, else float32
    compile=False,  # torch.compile the model (worth it on GPU)
    seed=1337,  # model init, data sampling and dropout
    peak_tflops=790.0,  # bf16 matmul TFLOP/s of the GPU, for MFU (790 = measured on H200)
)
MODEL_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
DEFAULTS = {**TRAIN_DEFAULTS, **MODEL_DEFAULTS}


def fail(msg: str):
    """A one-line error that says what to do, before any work is done."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def git_commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def atomic_write(path: str, write) -> None:
    """write(tmp_path) then rename: a kill never leaves a half-written file at `path`."""
    tmp = f"{path}.tmp.{os.getpid()}"
    write(tmp)
    os.replace(tmp, path)


def write_json(path: str, obj) -> None:
    def w(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
    atomic_write(path, w)


def get_lr(it: int, cfg: dict) -> float:
    """Linear warmup to learning_rate, then cosine decay to min_lr at lr_decay_iters."""
    if not cfg["decay_lr"]:
        return cfg["learning_rate"]
    if it < cfg["warmup_iters"]:
        return cfg["learning_rate"] * (it + 1) / (cfg["warmup_iters"] + 1)
    if it > cfg["lr_decay_iters"]:
        return cfg["min_lr"]
    ratio = (it - cfg["warmup_iters"]) / max(1, cfg["lr_decay_iters"] - cfg["warmup_iters"])
    return cfg["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg["learning_rate"] - cfg["min_lr"])


class Batches:
    """Random windows of block_size + 1 tokens from a uint16 token file.

    One generator, seeded identically on every rank, draws the offsets of the whole global
    batch (all micro-steps of all ranks) each iteration; rank r takes its own micro-steps. So the
    data seen per iteration is the same for 1 or K processes, and the generator state in the
    checkpoint makes a resumed run draw exactly the batches it would have drawn."""

    def __init__(self, path: str, block_size: int, batch_size: int, seed: int):
        self.path, self.block_size, self.batch_size = path, block_size, batch_size
        self.n_tokens = len(np.memmap(path, dtype=np.uint16, mode="r"))
        if self.n_tokens <= block_size + 1:
            fail(f"{path} has {self.n_tokens} tokens, fewer than block_size + 1 = {block_size + 1}")
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, n_micro: int) -> torch.Tensor:
        return torch.randint(self.n_tokens - self.block_size - 1, (n_micro, self.batch_size), generator=self.gen)

    def get(self, offsets: torch.Tensor, device):
        # re-open the memmap each time: a long-lived memmap grows resident memory (nanoGPT's note)
        data = np.memmap(self.path, dtype=np.uint16, mode="r")
        x = torch.stack([torch.from_numpy(data[i:i + self.block_size].astype(np.int64)) for i in offsets.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + self.block_size].astype(np.int64)) for i in offsets.tolist()])
        if device.type == "cuda":
            return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        return x.to(device), y.to(device)


@torch.no_grad()
def split_loss(model, path: str, block_size: int, batch_size: int, n_batches: int, full: bool, device,
               autocast=nullcontext(), seed: int = 0, rank: int = 0, world: int = 1) -> float:
    """Token-mean loss of `model` on a token file: every non-overlapping block_size window in order
    (full=True, deterministic), or n_batches random batches from a generator seeded with `seed`
    (the same batches every call). Under DDP each rank takes every world-th batch and the sums
    are reduced, so every rank returns the same number."""
    batches = Batches(path, block_size, batch_size, seed=seed)
    if full:
        chunks = list(torch.arange(0, batches.n_tokens - block_size, block_size).split(batch_size))
    else:
        chunks = list(batches.draw(n_batches))
    was_training = model.training
    model.eval()
    total = torch.zeros(2, device=device, dtype=torch.float64)  # (sum of token losses, tokens)
    for j in range(rank, len(chunks), world):
        X, Y = batches.get(chunks[j], device)
        with autocast:
            _, loss = model(X, Y)
        total[0] += loss.double() * Y.numel()
        total[1] += Y.numel()
    if world > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    return (total[0] / total[1]).item()


class PhaseTimer:
    """Forward / backward / optimizer milliseconds per iteration (CUDA events on GPU: no syncs
    in the step; perf_counter on CPU). Read out at log time, medians in the summary."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.pending, self.samples = [], {"fwd": [], "bwd": [], "opt": []}

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    @staticmethod
    def _ms(a, b):
        return a.elapsed_time(b) if not isinstance(a, float) else (b - a) * 1e3

    def add(self, marks):
        """marks: [(phase, start, end), ...] of one iteration."""
        self.pending.append(marks)

    def flush(self, skip: bool):
        if self.cuda and self.pending:
            torch.cuda.synchronize()
        for marks in self.pending:
            if skip:
                continue
            per = {"fwd": 0.0, "bwd": 0.0, "opt": 0.0}
            for phase, a, b in marks:
                per[phase] += self._ms(a, b)
            for k, v in per.items():
                self.samples[k].append(v)
        self.pending = []

    def medians(self):
        med = {k: float(np.median(v)) if v else None for k, v in self.samples.items()}
        med["total"] = sum(v for v in med.values() if v is not None) if all(v is not None for v in med.values()) else None
        return med


def main(argv):
    # ---- configuration: every error here is one line, before any model is built ----
    try:
        cfg = parse_config(argv, DEFAULTS)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    if cfg["init_from"] not in ("scratch", "resume"):
        fail(f"init_from={cfg['init_from']!r} is unknown: allowed 'scratch', 'resume'")
    model_args = {k: cfg[k] for k in MODEL_DEFAULTS}
    if cfg["init_from"] == "scratch":
        try:
            GPTConfig(**model_args)
        except ValueError as e:
            fail(f"invalid model configuration: {e}")

    ddp = int(os.environ.get("RANK", -1)) != -1
    if ddp:
        rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        rank, local_rank, world = 0, 0, 1
    master = rank == 0
    device_name = cfg["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    if ddp and device_name.startswith("cuda"):
        device_name = f"cuda:{local_rank}"
    device = torch.device(device_name)
    if cfg["gradient_accumulation_steps"] % world != 0:
        fail(f"gradient_accumulation_steps={cfg['gradient_accumulation_steps']} must be a multiple of the "
             f"{world} DDP processes")
    accum_global = cfg["gradient_accumulation_steps"]
    accum = accum_global // world  # micro-steps on this rank
    dtype_name = cfg["dtype"] or ("bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32")
    if dtype_name not in ("float32", "bfloat16", "float16"):
        fail(f"dtype={dtype_name!r} is unknown: allowed 'float32', 'bfloat16', 'float16'")
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    data_dir = cfg["data_dir"] or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", cfg["dataset"])
    for split in ("train", "val"):
        if not os.path.exists(os.path.join(data_dir, f"{split}.bin")):
            fail(f"{os.path.join(data_dir, split + '.bin')} not found: run `python data/{cfg['dataset']}/prepare.py` "
                 f"first (or set --data_dir)")
    out_dir = cfg["out_dir"]
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if cfg["init_from"] == "resume" and not os.path.exists(ckpt_path):
        fail(f"init_from='resume' but {ckpt_path} does not exist")

    if ddp:
        backend = cfg["backend"] if device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend=backend)
        if device.type == "cuda":
            torch.cuda.set_device(device)
    if master:
        os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(cfg["seed"])
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = (torch.autocast(device_type=device.type, dtype=ptdtype)
                if ptdtype != torch.float32 else nullcontext())

    # ---- model, optimizer, state ----
    iter_num, best_val, best_iter, bad_evals = 0, float("inf"), -1, 0
    train_batches = Batches(os.path.join(data_dir, "train.bin"), cfg["block_size"], cfg["batch_size"], cfg["seed"])
    checkpoint = None
    if cfg["init_from"] == "resume":
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=False)  # CPU first: no GPU spike
        model_args = checkpoint["model_config"]
        for k, v in model_args.items():  # the model is what the checkpoint says it is
            cfg[k] = v
        train_batches = Batches(os.path.join(data_dir, "train.bin"), model_args["block_size"], cfg["batch_size"], cfg["seed"])
    gptconf = GPTConfig(**model_args)
    model = GPT(gptconf)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        iter_num, best_val, best_iter = checkpoint["iter_num"], checkpoint["best_val_loss"], checkpoint["best_iter"]
        bad_evals = checkpoint.get("bad_evals", 0)
        train_batches.gen.set_state(checkpoint["sampler_state"])
    model.to(device)
    optimizer = model.configure_optimizers(cfg["weight_decay"], cfg["learning_rate"], (cfg["beta1"], cfg["beta2"]),
                                           device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=(ptdtype == torch.float16))
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
        if rank == 0 and "torch_rng_state" in checkpoint:  # dropout continues exactly (rank 0; others reseed)
            torch.set_rng_state(checkpoint["torch_rng_state"])
            if device.type == "cuda" and checkpoint.get("cuda_rng_state") is not None:
                torch.cuda.set_rng_state(checkpoint["cuda_rng_state"], device)
        else:
            torch.manual_seed(cfg["seed"] + 1000 * rank + iter_num)
    else:
        torch.manual_seed(cfg["seed"] + 1000 * rank)  # dropout differs per rank
    checkpoint = None  # free memory
    raw_model = model
    tokens_per_iter = accum_global * cfg["batch_size"] * gptconf.block_size
    if master:
        print(format_config(cfg))
        print(f"model: {raw_model.get_num_params() / 1e6:.2f}M params, attention {raw_model.attn_params() / 1e6:.3f}M, "
              f"KV cache {raw_model.kv_values_per_token_per_layer()} values/token/layer; "
              f"{tokens_per_iter:,} tokens/iter; device {device} {dtype_name}; {world} process(es)")
        write_json(os.path.join(out_dir, "config.json"), {**cfg, "device": str(device), "dtype": dtype_name,
                                                          "world_size": world})
    if cfg["compile"]:
        model = torch.compile(model)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)

    wandb = None
    if cfg["wandb_log"] and master:
        import wandb  # noqa: lazy, optional
        wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"], config=cfg)

    log_path = os.path.join(out_dir, "log.jsonl")

    def log(record):
        if master:
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            if wandb is not None:
                wandb.log(record, step=record["iter"])

    def evaluate():
        """Mean loss on train (eval_iters random batches, a fixed generator: the same batches
        at every evaluation) and val (the same, or the whole split in order), over all ranks."""
        out = {}
        for split in ("train", "val"):
            full = split == "val" and cfg["eval_full_val"]
            out[split] = split_loss(model, os.path.join(data_dir, f"{split}.bin"), gptconf.block_size,
                                    cfg["batch_size"], cfg["eval_iters"], full, device, autocast,
                                    seed=cfg["seed"] + 1, rank=rank, world=world)
        return out

    def save_checkpoint(path):
        state = {
            "model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "model_config": gptconf.to_dict(),
            "config": cfg, "iter_num": iter_num, "best_val_loss": best_val, "best_iter": best_iter,
            "bad_evals": bad_evals, "sampler_state": train_batches.gen.get_state(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "git_commit": git_commit(),
        }
        atomic_write(path, lambda tmp: torch.save(state, tmp))

    def summary(finished: bool, reason: str, final_val, wall, timer):
        return {
            "config": {**cfg, "dtype": dtype_name, "world_size": world}, "model_config": gptconf.to_dict(),
            "git_commit": git_commit(), "best_val_loss": best_val if best_iter >= 0 else None, "best_iter": best_iter,
            "final_val_loss": final_val, "iters": iter_num, "tokens": iter_num * tokens_per_iter,
            "wall_time_s": wall, "ms_per_iter": timer.medians(), "attn_params": raw_model.attn_params(),
            "kv_values_per_token_per_layer": raw_model.kv_values_per_token_per_layer(),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch_version": torch.__version__, "finished": finished, "stopped_reason": reason,
        }

    # ---- training loop ----
    timer = PhaseTimer(device)
    t_start = time.time()
    t_log = time.time()
    start_iter, start_best_iter = iter_num, best_iter
    final_val = None
    reason = "max_iters"
    running_mfu = -1.0
    peak_flops = cfg["peak_tflops"] * 1e12
    while True:
        lr = get_lr(iter_num, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr

        # a resumed run has already evaluated (and checkpointed) this iteration, unless the checkpoint
        # never saw an evaluation (best_iter < 0: e.g. a converted model about to be fine-tuned);
        # eval_only asks anew
        resumed_here = (cfg["init_from"] == "resume" and iter_num == start_iter and start_best_iter >= 0
                        and not cfg["eval_only"])
        if (iter_num % cfg["eval_interval"] == 0 or iter_num >= cfg["max_iters"]) and not resumed_here:
            losses = evaluate()
            final_val = losses["val"]
            if not all(math.isfinite(v) for v in losses.values()):
                reason = f"non-finite eval loss at iter {iter_num}"
                break
            improved = losses["val"] < best_val
            if improved:
                best_val, best_iter, bad_evals = losses["val"], iter_num, 0
            else:
                bad_evals += 1
            if master:
                print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
                      f"(best {best_val:.4f} @ {best_iter})")
            log({"iter": iter_num, "train_loss": losses["train"], "val_loss": losses["val"], "lr": lr,
                 "best_val_loss": best_val, "best_iter": best_iter, "elapsed_s": time.time() - t_start})
            if master and cfg["save_checkpoint"] and iter_num > start_iter and (improved or cfg["always_save_checkpoint"]):
                save_checkpoint(ckpt_path)
            if cfg["patience"] and bad_evals >= cfg["patience"]:
                reason = f"early stop: no val improvement in {cfg['patience']} evaluations"
                break
        if iter_num >= cfg["max_iters"] or cfg["eval_only"]:
            reason = "eval_only" if cfg["eval_only"] else reason
            break

        # one iteration: accum micro-steps on this rank, gradient sync only on the last one
        offsets = train_batches.draw(accum_global)[rank * accum:(rank + 1) * accum]
        marks = []
        loss_sum = torch.zeros((), device=device)  # mean loss of this rank's micro-steps, no sync
        for micro in range(accum):
            X, Y = train_batches.get(offsets[micro], device)
            sync = nullcontext() if (not ddp or micro == accum - 1) else model.no_sync()
            with sync:
                t0 = timer.mark()
                with autocast:
                    _, loss = model(X, Y)
                    loss = loss / accum  # the mean over the global batch after DDP's average
                loss_sum += loss.detach()
                t1 = timer.mark()
                scaler.scale(loss).backward()
                t2 = timer.mark()
            marks += [("fwd", t0, t1), ("bwd", t1, t2)]
        t3 = timer.mark()
        if cfg["grad_clip"] != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        marks.append(("opt", t3, timer.mark()))
        timer.add(marks)
        iter_num += 1

        if iter_num % cfg["log_interval"] == 0 or iter_num == cfg["max_iters"]:
            if ddp:  # the loss of the whole global batch, and the same decision on every rank
                torch.distributed.all_reduce(loss_sum)
                loss_sum /= world
            lossf = loss_sum.item()  # a sync point: only at log time
            finite = math.isfinite(lossf)
            if not finite:
                reason = (f"non-finite training loss at iter {iter_num}; stopped, the last good checkpoint "
                          f"(if any) is kept in {ckpt_path}")
                break
            timer.flush(skip=iter_num - start_iter <= 5)  # compile / warm-up iterations are not timed
            now = time.time()
            dt = (now - t_log) / cfg["log_interval"]
            t_log = now
            if iter_num - start_iter > 5:
                mfu = raw_model.estimate_mfu(tokens_per_iter, dt, peak_flops)
                running_mfu = mfu if running_mfu < 0 else 0.9 * running_mfu + 0.1 * mfu
            if master:
                print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}, {dt * 1e3:.1f} ms/iter, "
                      f"{tokens_per_iter / dt:,.0f} tok/s, mfu {running_mfu * 100:.1f}%")
            log({"iter": iter_num, "loss": lossf, "lr": lr, "ms_per_iter": dt * 1e3,
                 "tokens_per_s": tokens_per_iter / dt, "mfu": running_mfu})

    wall = time.time() - t_start
    finished = reason == "max_iters" or reason.startswith("early stop") or reason == "eval_only"
    # a checksum of the weights on every rank: DDP must leave them identical
    with torch.no_grad():
        flat = torch.cat([p.detach().double().flatten() for p in raw_model.parameters()])
        checksum = [flat.sum().item(), flat.abs().sum().item(), (flat * torch.arange(flat.numel(), device=flat.device,
                                                                                       dtype=torch.float64)).sum().item()]
    checksums = [checksum]
    if ddp:
        checksums = [None] * world
        torch.distributed.all_gather_object(checksums, checksum)
    if master:
        result = summary(finished, reason, final_val, wall, timer)
        result["rank_weight_checksums"] = checksums
        write_json(os.path.join(out_dir, "summary.json"), result)
        print(f"{'done' if finished else 'stopped'}: {reason}; best val loss {best_val:.4f} at iter {best_iter}; "
              f"{wall:.1f} s")
    if wandb is not None:
        wandb.finish()
    if ddp:
        torch.distributed.destroy_process_group()
    if not finished:
        print(f"error: {reason}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
