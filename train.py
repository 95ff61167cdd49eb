"""
Train a GPT with any attention of the paper, on one device or with DDP under torchrun.

    python train.py config/shakespeare_tucker.py --max_iters=2000
    python train.py config/shakespeare_tucker.py --device=cpu --compile=False --n_layer=2 --max_iters=50
    torchrun --standalone --nproc_per_node=8 train.py config/owt_tucker.py
    torchrun --standalone --nproc_per_node=8 train.py config/owt2_llama1b_tucker_32_64_64.py --fsdp=True

Every training key (train_config.py) and every GPTConfig field (model.py) can be set from a config
file or as --key=value (configurator.py: type-checked, unknown keys rejected). Any invalid key,
data file, checkpoint or out_dir stops the run with one line `error: ...` (exit 2) before anything
is built or written. The run writes into out_dir: config.json (the resolved config), log.jsonl
(one JSON line per log/eval), ckpt.pt (checkpoint.py: written atomically; --init_from=resume
continues exactly, the run's data, batch, schedule and seed read from the checkpoint unless given:
train_config.RUN_KEYS) and summary.json (the results file every table reads). A fresh run in a
folder that holds an earlier one sets that run's ckpt.pt and summary.json aside (ckpt.earlier.pt,
summary.earlier.json) as it starts.

With --fsdp=True under torchrun, each block and then the whole model are sharded with FSDP2
(torch.distributed.fsdp.fully_shard) instead of wrapped in DDP; ckpt.pt stays the same single file
(full weights, AdamW state in optimizer.state_dict()'s layout), so a run resumes on any number of
processes, FSDP or not, and sample.py reads it as any other.

The steps, in order: configure (keys, checkpoint, data checked) -> setup (DDP, device, out_dir)
-> build (model, optimizer, data; fresh or resumed) -> the loop (evaluate and checkpoint every
eval_interval, one train_step per iteration, a log line every log_interval) -> write_summary.
"""

import faulthandler
import gc
import inspect
import json
import math
import os
import signal
import statistics
import sys
import time
from collections import deque
from contextlib import nullcontext
from dataclasses import dataclass, fields
from typing import Optional

import numpy as np
import torch

from checkpoint import (CKPT_NAME, TRAINING_KEYS, git_commit, make_checkpoint, model_from_checkpoint,
                        read_checkpoint, read_json, remove_stale_temps, rng_state, save_checkpoint, saved_rng_state,
                        write_json)
from configurator import (check_device, default_dtype, float64_device, format_config, help_requested, make_current,
                          parse_config)
from evaluate import Batches, check_token_file, split_loss
from graph_step import GraphedTrainStep, check_graph_step
from master_adamw import check_supported as check_master_weights
from model import COMPUTE_KEYS, GPT, GPTConfig, train_compile_options
from train_config import RUN_KEYS, TRAIN_DEFAULTS, data_dir_of, validate_train_config

MODEL_DEFAULTS = {f.name: f.default for f in fields(GPTConfig)}
DEFAULTS = {**TRAIN_DEFAULTS, **MODEL_DEFAULTS}
EARLIER_CKPT, EARLIER_SUMMARY = "ckpt.earlier.pt", "summary.earlier.json"  # a fresh run's out_dir: the run before's
SILENT_FAIL_DELAY_S = 2.0  # fail(): how long a process that does not print the error waits before it exits
UNTIMED_ITERS = 5  # the first iterations of a (re)start (torch.compile, allocator warm-up) are not timed


def says_for_node() -> bool:
    """Whether this process prints a message every process of the job meets: one a node (LOCAL_RANK 0, or no
    torchrun), as torchrun would otherwise show it once for each."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def fail(msg: str, says: Optional[bool] = None, code: int = 2):
    """A one-line error that says what to do: exit 2 for a bad key, file or checkpoint (before any work is done), 1
    for a run stopped in training. Every process exits; the line comes from one process a node (LOCAL_RANK 0, or no
    torchrun): the others meet the same key or file, and torchrun would print it once for each of them. `says`
    overrides that for an error that only some processes meet."""
    if says is None:
        says = says_for_node()
    if says:
        print(f"error: {msg}", file=sys.stderr)
    else:  # torchrun stops the other processes when one ends: the silent ones end later, not the one that says why
        time.sleep(SILENT_FAIL_DELAY_S)
    sys.exit(code)


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


# ----------------------------------------------------------------------------------------
# Timing


class PhaseTimer:
    """Forward / backward / optimizer milliseconds per iteration (CUDA events on GPU: no syncs
    in the step; perf_counter on CPU). Read out at log time, medians in the summary. A graphed
    iteration (graph_step) is one phase, 'step': only its total is known."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.pending, self.samples = [], {"fwd": [], "bwd": [], "opt": [], "total": []}

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    @staticmethod
    def _ms(a, b):
        return a.elapsed_time(b) if not isinstance(a, float) else (b - a) * 1e3

    def add(self, marks, timed: bool = True):
        """marks: [(phase, start, end), ...] of one iteration; timed=False drops them (warm-up)."""
        if timed:
            self.pending.append(marks)

    def flush(self):
        if self.cuda and self.pending:
            torch.cuda.synchronize()
        for marks in self.pending:
            per = {}
            for phase, a, b in marks:
                per[phase] = per.get(phase, 0.0) + self._ms(a, b)
            for k, v in per.items():
                if k != "step":
                    self.samples[k].append(v)
            self.samples["total"].append(sum(per.values()))
        self.pending = []

    def medians(self):
        """Median ms per phase (None for a phase never timed) and of the per-iteration totals."""
        return {k: float(np.median(v)) if v else None for k, v in self.samples.items()}


class SteadyMFU:
    """Model FLOPs utilization of one GPU in the steady state: the FLOPs of this GPU's share of the
    tokens (tokens_per_iter / world) over the median iteration time of the last `window` log
    intervals, counting only intervals after the first `untimed` iterations of a (re)start (their
    compile and warm-up times would skew it). -1 until there is such an interval."""

    def __init__(self, raw_model: GPT, tokens_per_iter: int, world: int, peak_flops: float,
                 untimed: int = UNTIMED_ITERS, window: int = 20):
        self.raw_model, self.tokens_per_gpu, self.peak_flops = raw_model, tokens_per_iter / world, peak_flops
        self.untimed, self.times = untimed, deque(maxlen=window)

    def update(self, iters_done: int, n: int, seconds: float) -> float:
        """The interval of the last n iterations, ending after iters_done iterations of this (re)start, took seconds."""
        if n > 0 and iters_done - n >= self.untimed:
            self.times.append(seconds / n)
        return self.mfu

    @property
    def mfu(self) -> float:
        if not self.times:
            return -1.0
        return self.raw_model.estimate_mfu(self.tokens_per_gpu, statistics.median(self.times), self.peak_flops)


# ----------------------------------------------------------------------------------------
# The steps


@dataclass
class Env:
    """Where and how this process runs."""
    ddp: bool
    rank: int
    local_rank: int
    world: int
    device: torch.device
    dtype: str  # 'float32' | 'bfloat16' | 'float16'
    autocast: object  # torch.autocast for bf16/fp16, else a no-op context
    data_dir: str
    out_dir: str
    fsdp: bool = False  # FSDP2-sharded (under torchrun with fsdp=True), else DDP when ddp

    @property
    def master(self) -> bool:
        return self.rank == 0


@dataclass
class State:
    """What the loop changes and a checkpoint keeps."""
    iter_num: int = 0
    best_val: float = math.inf
    best_iter: int = -1  # -1: never evaluated
    bad_evals: int = 0  # evaluations since the best one (early stopping)
    val_loss: Optional[float] = None  # val loss of the last evaluation
    wall_s: float = 0.0  # seconds of training up to the last evaluation, the runs this one resumes included
    tokens: int = 0  # tokens trained on, the runs this one resumes included (their batch sizes may differ)


@dataclass
class Run:
    """Everything built once: config, process, model, optimizer, data, state."""
    cfg: dict
    env: Env
    model: torch.nn.Module  # what forward and backward run on: compiled and/or DDP-wrapped
    raw_model: GPT  # what is saved and measured (under FSDP: the sharded GPT, parameters are DTensors)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    batches: Batches  # training windows
    state: State
    resumed: bool
    wandb: object = None
    graph: Optional[GraphedTrainStep] = None  # graph_step=True: the captured iteration

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.env.out_dir, CKPT_NAME)

    @property
    def log_path(self) -> str:
        return os.path.join(self.env.out_dir, "log.jsonl")

    @property
    def tokens_per_iter(self) -> int:
        return self.cfg["gradient_accumulation_steps"] * self.cfg["batch_size"] * self.raw_model.config.block_size


IMPLEMENTATION_KEYS = ("gelu", "mla_rope_kernels")  # how a part is computed, not what the model is


def inert_on_command_line(argv, cfg: dict, gptconf: GPTConfig) -> list:
    """[(key, why)] for the model keys set on the command line, to another value than their default, that this
    model never reads (GPTConfig.inert_keys): they would change nothing. configure refuses them, and notes the
    implementation choices (IMPLEMENTATION_KEYS: 'torch' for every variant is a plain reference run's setting).
    Config files may set such keys for the rows they serve (a sweep's --pos_emb override of an MLA latent-RoPE
    row's file), so only the command line is held to it."""
    on_command_line = {arg[2:].partition("=")[0] for arg in argv if arg.startswith("--")}
    return [(key, f"{key}={cfg[key]!r} has no effect on this model ({why}: attn={gptconf.attn!r}, pos_emb="
                  f"{gptconf.pos_emb!r}, mlp={gptconf.mlp!r})")
            for key, why in gptconf.inert_keys().items()
            if key in on_command_line and cfg[key] != MODEL_DEFAULTS[key]]


def configure(argv):
    """(cfg, GPTConfig, checkpoint dict or None), every key, the checkpoint (resume) and the data
    files checked: any error is one line and exit 2, before anything is built or written."""
    given = set()
    try:
        cfg = parse_config(argv, DEFAULTS, given)
        # every key now, before a checkpoint is read; a resume's keys against each other once the checkpoint's run
        # keys are in (below): a given lr_decay_iters against the run's own warmup_iters, not train.py's default
        validate_train_config(cfg, schedule=cfg["init_from"] != "resume")
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    checkpoint, notes = None, []
    says = int(os.environ.get("RANK", 0)) == 0  # notes from one process (under torchrun: rank 0)
    if cfg["init_from"] == "scratch":
        try:
            gptconf = GPTConfig(**{k: cfg[k] for k in MODEL_DEFAULTS})
        except ValueError as e:
            fail(f"invalid model configuration: {e}")
        for key, what in inert_on_command_line(argv, cfg, gptconf):
            if key not in IMPLEMENTATION_KEYS:
                fail(f"{what}: remove it, or set the keys it belongs with")
            if says:
                print(f"note: {what}", file=sys.stderr)
        cfg.update(gptconf.to_dict())  # the model keys as the model has them (tucker_ranks_post=None as tucker_ranks),
        #                                as a resume's config holds them: config.json, the checkpoint, the summary
        earlier = os.path.join(cfg["out_dir"], CKPT_NAME)
        if os.path.isfile(earlier):
            if cfg["eval_only"]:  # it would evaluate a new random model and replace the run's log and summary
                fail(f"eval_only=True with init_from='scratch' evaluates a new random model, and out_dir holds a trained "
                     f"one ({earlier}): --init_from=resume evaluates that, or give another out_dir")
            if says:  # said once every check has passed (below): an error after it would have replaced nothing
                notes.append(f"note: {earlier} holds an earlier run; this one starts from scratch and replaces its log "
                             f"now, its checkpoint and summary set aside as {EARLIER_CKPT} and {EARLIER_SUMMARY} "
                             "(--init_from=resume continues it instead)")
    else:
        ckpt_path = os.path.join(cfg["out_dir"], CKPT_NAME)
        try:
            checkpoint = read_checkpoint(ckpt_path, TRAINING_KEYS)
        except FileNotFoundError:
            earlier = os.path.join(cfg["out_dir"], EARLIER_CKPT)
            fail(f"init_from='resume' but {ckpt_path} does not exist" + (
                f" ({earlier} is the run before: a fresh run set it aside before its first save; rename it to "
                f"{CKPT_NAME} to resume that one)" if os.path.isfile(earlier) else ""))
        except ValueError as e:
            fail(str(e))
        gptconf = GPTConfig.from_dict(checkpoint["model_config"])  # the model is what the checkpoint says
        conflicts = resume_conflicts(cfg, given - set(COMPUTE_KEYS), gptconf.to_dict())
        if conflicts:
            fail(f"init_from='resume' continues the model of {ckpt_path}, but model keys given here differ from it: "
                 f"{'; '.join(conflicts)} (remove them, or train from scratch in another out_dir)")
        # how the model is computed may change (activation checkpointing for a run that ran out of memory, the
        # loss head in chunks, the plain torch kernels): the same weights, the same function
        computed = {k: cfg[k] for k in COMPUTE_KEYS if k in given}
        if computed:
            try:
                gptconf = GPTConfig.from_dict({**gptconf.to_dict(), **computed})
            except ValueError as e:
                fail(f"invalid model configuration: {e}")
        cfg.update(gptconf.to_dict())
        if says:  # as a fresh run notes them (any other key given differed, or is the
            for _, what in inert_on_command_line(argv, cfg, gptconf):  # checkpoint's own: nothing to refuse)
                print(f"note: {what}", file=sys.stderr)
        saved = checkpoint.get("config") or {}
        taken = {k: saved[k] for k in RUN_KEYS if k not in given and k in saved and saved[k] != cfg[k]}
        cfg.update(taken)  # the run's own data, batch, schedule, ...: not the defaults
        try:
            validate_train_config(cfg)
        except ValueError as e:
            fail(f"{e}" + (f" (with {ckpt_path}'s run keys not given here: "
                           f"{', '.join(f'{k}={v!r}' for k, v in taken.items())})" if taken else ""))
        if taken:
            if says:
                print(f"note: resuming with the checkpoint's run keys that are not given here: "
                      f"{', '.join(f'{k}={v!r}' for k, v in taken.items())}", file=sys.stderr)
        ended = summary_of(cfg["out_dir"])
        if str(ended.get("stopped_reason", "")).startswith("early stop") and not cfg["eval_only"] and \
                cfg["patience"] == (ended.get("config") or {}).get("patience"):
            # training on from its checkpoint (the last evaluation's, or the best one's with always_save_checkpoint=
            # False) with the same patience would stop again (a sweep skips such a run; a resume by hand redid them)
            if says:
                print(f"done: the run in {cfg['out_dir']} stopped early ({ended['stopped_reason']}); nothing to "
                      f"resume (a larger --patience, or 0, trains on from its checkpoint at iteration "
                      f"{checkpoint['iter_num']})")
            sys.exit(0)
        if checkpoint["iter_num"] > cfg["max_iters"] and says:
            notes.append(f"note: {ckpt_path} is at iteration {checkpoint['iter_num']}, past max_iters="
                         f"{cfg['max_iters']}: nothing is trained")
    for split in ("train", "val"):
        path = os.path.join(data_dir_of(cfg), f"{split}.bin")
        try:
            check_token_file(path, gptconf.vocab_size, gptconf.block_size)
        except FileNotFoundError:
            prep = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", cfg["dataset"], "prepare.py")
            if os.path.isfile(prep):
                fail(f"{path} not found: run `python -m data.{cfg['dataset']}.prepare` first (or set --data_dir)")
            fail(f"{path} not found, and the repository has no data/{cfg['dataset']}/prepare.py to make it: give "
                 "--data_dir=FOLDER with train.bin and val.bin (the config file's comment says which data stands in)")
        except ValueError as e:
            fail(str(e))
    for note in notes:
        print(note, file=sys.stderr)
    return cfg, gptconf, checkpoint


def resume_conflicts(cfg: dict, given: set, saved: dict) -> list:
    """'key=value (checkpoint: value)' for every model key set in argv that differs from the checkpoint's
    model (compared after GPTConfig's normalization: defaults filled, lists as tuples)."""
    keys = [k for k in MODEL_DEFAULTS if k in given]
    try:
        asked = GPTConfig.from_dict({**saved, **{k: cfg[k] for k in keys}}).to_dict()
    except ValueError:
        asked = {k: tuple(cfg[k]) if isinstance(cfg[k], list) else cfg[k] for k in keys}
    return [f"{k}={cfg[k]!r} (checkpoint: {saved[k]!r})" for k in keys if asked[k] != saved[k]]


def setup(cfg: dict, gptconf: GPTConfig) -> Env:
    """This process: DDP rank (under torchrun), device, dtype, autocast; out_dir created (master)."""
    ddp = int(os.environ.get("RANK", -1)) != -1
    rank, local_rank, world = ((int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))
                               if ddp else (0, 0, 1))
    device_name = check_device(cfg["device"])
    if ddp and device_name.startswith("cuda"):
        if local_rank >= torch.cuda.device_count():  # else an 'invalid device ordinal' traceback from this rank
            fail(f"torchrun started process {local_rank} of this node on cuda:{local_rank}, but "
                 f"{torch.cuda.device_count()} GPU(s) are visible: give --nproc_per_node at most "
                 f"{torch.cuda.device_count()} (or make more visible: CUDA_VISIBLE_DEVICES)",
                 says=local_rank == torch.cuda.device_count())  # the first process without a GPU, not all of them
        device_name = f"cuda:{local_rank}"
    device = torch.device(device_name)
    make_current(device)  # cuda:N current, DDP or not: Triton launches its kernels (and graphs capture) there
    if cfg["gradient_accumulation_steps"] % world != 0:
        fail(f"gradient_accumulation_steps={cfg['gradient_accumulation_steps']} must be a multiple of the "
             f"{world} DDP processes")
    dtype = cfg["dtype"] or default_dtype(device)
    if cfg["graph_step"]:
        why_not = check_graph_step(device, dtype, ddp, cfg["compile"], cfg["compile_mode"],
                                   gptconf.activation_checkpointing)
        if why_not:
            fail(why_not)
    if cfg["master_weights"]:
        why_not = check_master_weights(dtype, ddp)
        if why_not:
            fail(f"master_weights=True cannot train this run: {why_not}; allowed with dtype 'bfloat16' in one "
                 "process, else master_weights=False")
    out_dir = cfg["out_dir"]
    if rank == 0:
        make_out_dir(out_dir)
    if ddp:
        torch.distributed.init_process_group(backend=cfg["backend"] if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = (torch.autocast(device_type=device.type, dtype=getattr(torch, dtype)) if dtype != "float32"
                else nullcontext())
    if cfg["fsdp"] and not ddp and rank == 0:
        print("fsdp=True without torchrun: one process, nothing to shard; training unsharded")
    return Env(ddp, rank, local_rank, world, device, dtype, autocast, data_dir_of(cfg), out_dir, fsdp=cfg["fsdp"] and ddp)


def make_out_dir(out_dir: str) -> None:
    """Create out_dir (if needed) and check that files can be written there; else exit 2, one line."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        fail(f"out_dir={out_dir!r} exists and is not a folder")
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".write_test.{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except (OSError, ValueError) as e:  # ValueError: e.g. a NUL byte in the path
        fail(f"out_dir={out_dir!r} cannot be created or written: {getattr(e, 'strerror', None) or e}")


def build(cfg: dict, gptconf: GPTConfig, checkpoint: Optional[dict], env: Env) -> Run:
    """The model (on the device, compiled and DDP-wrapped as asked), optimizer, grad scaler,
    training batches and loop state: fresh, or exactly as the checkpoint left them."""
    torch.manual_seed(cfg["seed"])
    batches = Batches(os.path.join(env.data_dir, "train.bin"), gptconf.block_size, cfg["batch_size"], cfg["seed"])
    if checkpoint is None:
        model, state = GPT(gptconf), State()
    else:
        # gptconf: the checkpoint's model, with the compute keys this resume may have changed (configure)
        model = model_from_checkpoint({**checkpoint, "model_config": gptconf.to_dict()},
                                      os.path.join(cfg["out_dir"], CKPT_NAME)).float().train()
        iter_num = checkpoint["iter_num"]
        val_loss = checkpoint.get("val_loss", checkpoint["best_val_loss"] if checkpoint["best_iter"] == iter_num else None)
        saved = checkpoint.get("config") or {}  # a checkpoint from before the count: its run's own batch a step
        per_iter = math.prod(saved.get(k, cfg[k]) for k in ("gradient_accumulation_steps", "batch_size")) * \
            gptconf.block_size
        state = State(iter_num, checkpoint["best_val_loss"], checkpoint["best_iter"], checkpoint.get("bad_evals", 0),
                      val_loss, checkpoint.get("wall_s", 0.0), checkpoint.get("tokens", iter_num * per_iter))
        if checkpoint.get("sampler_state") is not None:  # else: a fresh sampler from this run's seed
            batches.gen.set_state(checkpoint["sampler_state"])
    model.to(env.device)
    if env.fsdp:  # every rank holds the same full weights (same seed, or the checkpoint): each keeps its shard
        shard_model(model, env)
    # master_weights: the optimizer turns the model's matrices bf16 (the float32 weights built or loaded above become
    # its masters)
    optimizer = model.configure_optimizers(cfg["weight_decay"], cfg["learning_rate"], (cfg["beta1"], cfg["beta2"]),
                                           env.device.type, master_weights=cfg["master_weights"],
                                           micro_steps=cfg["gradient_accumulation_steps"] // env.world)
    scaler = torch.amp.GradScaler(env.device.type, enabled=(env.dtype == "float16"))
    # dropout: every rank continues its own saved RNG stream, or starts its own seeded one
    saved = None
    if checkpoint is not None:
        if env.fsdp:
            load_sharded_optimizer_state(model, optimizer, checkpoint["optimizer"])
        else:
            load_optimizer_state(optimizer, checkpoint["optimizer"])
        if checkpoint.get("scaler"):
            scaler.load_state_dict(checkpoint["scaler"])
        saved = saved_rng_state(checkpoint, env.rank)
    if saved is not None:
        torch.set_rng_state(saved["torch"])
        if env.device.type == "cuda" and saved.get("cuda") is not None:
            torch.cuda.set_rng_state(saved["cuda"], env.device)
        if env.device.type == "mps" and saved.get("mps") is not None:
            torch.mps.set_rng_state(saved["mps"])
    else:
        torch.manual_seed(cfg["seed"] + 1000 * env.rank + state.iter_num)
    raw_model = model
    if cfg["compile"]:
        model = compile_model(model, cfg, env)
    if env.ddp and not env.fsdp:
        # No buffer sync in forward: the only buffers are the RoPE tables, constants equal on every rank. DDP would
        # otherwise broadcast them in a forward (the first after a synced step), a collective that a rank with
        # no evaluation batch never joins: the job hung at its first evaluation (eval_iters < world size).
        # (torch 2.13 calls it forward_sync_buffers and deprecates broadcast_buffers; torch 2.11 has only the latter.)
        ddp_class = torch.nn.parallel.DistributedDataParallel
        no_forward_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(ddp_class).parameters
                           else {"broadcast_buffers": False})
        model = ddp_class(model, device_ids=[env.local_rank] if env.device.type == "cuda" else None, **no_forward_sync)
    graph = None
    if cfg["graph_step"]:  # setup() has checked that it can serve this run
        graph = GraphedTrainStep(model, optimizer, accum=cfg["gradient_accumulation_steps"],
                                 batch_size=cfg["batch_size"], seq_len=gptconf.block_size, device=env.device,
                                 dtype=env.dtype, grad_clip=cfg["grad_clip"])
    return Run(cfg, env, model, raw_model, optimizer, scaler, batches, state, resumed=checkpoint is not None,
               graph=graph)


RUN_FLAGS = ("fused", "foreach", "capturable")  # how this run's AdamW steps: its own choice, not the checkpoint's


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """optimizer.load_state_dict(state), keeping the implementation flags this run built its AdamW with: torch would
    take the saved groups' (a checkpoint from MasterAdamW, or from a CPU run, says fused=None: the run would
    continue on foreach AdamW, and a graph_step capture would fail on CPU step counters). Step counters go to the
    parameters' device where fused or capturable AdamW reads them there, as torch's own loading does."""
    flags = [{k: g[k] for k in RUN_FLAGS if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, own in zip(optimizer.param_groups, flags):
        group.update(own)
        if group.get("fused") or group.get("capturable"):
            for p in group["params"]:
                st = optimizer.state.get(p, {})
                if torch.is_tensor(st.get("step")) and st["step"].device != p.device:
                    st["step"] = st["step"].to(p.device, torch.float32)


def compile_model(model: GPT, cfg: dict, env: Env):
    """torch.compile(model) with compile_mode's options and ours (model.train_compile_options); under DDP,
    with Dynamo's graph split at the gradient buckets or without it (ddp_split_graph). Dynamo reads that
    flag when it compiles, at the first call."""
    if env.ddp and not env.fsdp:
        from torch import _dynamo
        _dynamo.config.optimize_ddp = bool(cfg["ddp_split_graph"])
    return torch.compile(model, options=train_compile_options(cfg["compile_mode"]))


# ----------------------------------------------------------------------------------------
# FSDP2: sharding, and the full (single-file) checkpoint state gathered from and scattered to the shards

FULL_STATE = dict(full_state_dict=True, cpu_offload=True)


def shard_model(model: GPT, env: Env) -> None:
    """The FSDP2 recipe: fully_shard each transformer block, then the whole model (embeddings, final
    norm, lm_head: the tied wte/lm_head weight lives in the root group). On CUDA with bf16 the
    weights are all-gathered in that dtype and gradients reduced in float32 (autocast stays on)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    kw = {}
    if env.device.type == "cuda" and env.dtype != "float32":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, env.dtype), reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, **kw)
    fully_shard(model, **kw)


def _param_names(model, optimizer) -> list:
    """The parameter names in optimizer.state_dict()'s numbering (its groups' parameters, in order)."""
    names = {id(p): n for n, p in model.named_parameters()}  # a tied weight: its first name, as FSDP's own
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def full_optimizer_state(model, optimizer) -> dict:
    """All ranks: the sharded AdamW state gathered into optimizer.state_dict()'s layout (integer ids);
    full on rank 0, {} elsewhere."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict
    osd = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(**FULL_STATE))
    if not osd:
        return {}
    ids = {name: i for i, name in enumerate(_param_names(model, optimizer))}
    return {"state": {ids[k]: v for k, v in osd["state"].items()},
            "param_groups": [{**g, "params": [ids[k] for k in g["params"]]} for g in osd["param_groups"]]}


def load_sharded_optimizer_state(model, optimizer, state: dict) -> None:
    """Every rank: optimizer.state_dict()-layout `state` (full tensors, from ckpt.pt) into the sharded
    optimizer; each rank keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    names = _param_names(model, optimizer)
    groups = state["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in optimizer.param_groups]:
        raise ValueError("the checkpoint's optimizer state does not match the model's parameters")
    osd = {"state": {names[i]: v for i, v in state["state"].items()},
           "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in groups]}
    set_optimizer_state_dict(model, optimizer, osd, options=StateDictOptions(full_state_dict=True))


def full_model_state(run) -> Optional[dict]:
    """The model's state_dict with plain full tensors: gathered on every rank under FSDP (rank 0 gets
    it, the others {}); with master_weights, the float32 masters in place of the bf16 matrices; None
    otherwise (make_checkpoint then takes model.state_dict())."""
    if run.cfg["master_weights"]:
        return run.optimizer.model_state_dict(run.raw_model)
    if not run.env.fsdp:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(run.raw_model, options=StateDictOptions(**FULL_STATE))


def evaluate(run: Run) -> dict:
    """Mean loss on train (eval_iters random batches from a fixed generator: the same batches at
    every evaluation) and val (the same, or the whole split in order), over all ranks."""
    cfg, env = run.cfg, run.env

    def progress_printer(split):  # a long evaluation (the whole val split at a small block_size: minutes) says
        # how far it has got, from one process
        if not env.master:
            return None
        return lambda done, total: print(f"evaluating {split} at iter {run.state.iter_num}: batch {done} of {total}",
                                         flush=True)
    losses = {split: split_loss(run.model, os.path.join(env.data_dir, f"{split}.bin"), run.raw_model.config.block_size,
                                cfg["batch_size"], cfg["eval_iters"], split == "val" and cfg["eval_full_val"], env.device,
                                env.autocast, seed=cfg["seed"] + 1, rank=env.rank, world=env.world, even=env.fsdp,
                                progress=progress_printer(split))
              for split in ("train", "val")}
    if env.fsdp:  # a no-grad forward leaves the root group (embeddings, final norm) gathered: shard it again
        run.raw_model.reshard()
    return losses


def train_step(run: Run, timer: PhaseTimer, timed: bool, lr: float) -> torch.Tensor:
    """One iteration: this rank's micro-steps of the global batch, gradient sync on the last one,
    clip, optimizer step. Returns this rank's mean loss (a tensor: no sync here). A plain iteration
    reads its learning rate from the optimizer's groups (the loop sets them); a graphed one gets lr."""
    cfg, env, model = run.cfg, run.env, run.model
    accum = cfg["gradient_accumulation_steps"] // env.world  # micro-steps on this rank
    offsets = run.batches.draw(cfg["gradient_accumulation_steps"])[env.rank * accum:(env.rank + 1) * accum]
    if run.graph is not None:  # the same iteration, replayed from its CUDA graph (one process, no scaler)
        batches = [run.batches.get(offset, env.device) for offset in offsets]  # untimed, as in the plain path
        t0 = timer.mark()
        loss = run.graph(batches, lr)
        timer.add([("step", t0, timer.mark())], timed)
        run.state.iter_num += 1
        run.state.tokens += run.tokens_per_iter
        return loss
    marks = []
    loss_sum = torch.zeros((), device=env.device)
    for micro in range(accum):
        X, Y = run.batches.get(offsets[micro], env.device)
        last = micro == accum - 1
        if env.fsdp:  # reduce-scatter gradients only after the last micro-step (DDP: no_sync before it)
            run.raw_model.set_requires_gradient_sync(last)
        sync = nullcontext() if (not env.ddp or env.fsdp or last) else model.no_sync()
        with sync:
            t0 = timer.mark()
            with env.autocast:
                _, loss = model(X, Y)
                loss = loss / accum  # the mean over the global batch after DDP's average
            loss_sum += loss.detach()
            t1 = timer.mark()
            run.scaler.scale(loss).backward()
            t2 = timer.mark()
        marks += [("fwd", t0, t1), ("bwd", t1, t2)]
    t3 = timer.mark()
    if cfg["grad_clip"] != 0.0:
        run.scaler.unscale_(run.optimizer)
        if cfg["master_weights"]:  # the norm in float32, the scaling inside the optimizer's step
            run.optimizer.clip_grad_norm_(cfg["grad_clip"])
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])  # FSDP: DTensor grads, global norm
    run.scaler.step(run.optimizer)
    run.scaler.update()
    run.optimizer.zero_grad(set_to_none=True)
    marks.append(("opt", t3, timer.mark()))
    timer.add(marks, timed)
    run.state.iter_num += 1
    run.state.tokens += run.tokens_per_iter
    return loss_sum


def save(run: Run) -> None:
    """Checkpoint (called on every rank: each rank's RNG state is gathered, and under FSDP the full
    weights and AdamW state; rank 0 writes)."""
    rng = [rng_state(run.env.device)]
    if run.env.ddp:
        rng = [None] * run.env.world
        torch.distributed.all_gather_object(rng, rng_state(run.env.device))
    model_state = full_model_state(run)
    optimizer_state = (full_optimizer_state(run.raw_model, run.optimizer) if run.env.fsdp else
                       run.graph.optimizer_state_dict() if run.graph is not None else None)
    if run.env.master:
        s = run.state
        save_checkpoint(run.ckpt_path, make_checkpoint(
            run.raw_model, run.optimizer, run.cfg, iter_num=s.iter_num, best_val_loss=s.best_val,
            best_iter=s.best_iter, bad_evals=s.bad_evals, val_loss=s.val_loss, wall_s=s.wall_s, tokens=s.tokens,
            sampler_state=run.batches.gen.get_state(), rng_states=rng, scaler=run.scaler.state_dict(),
            model_state=model_state, optimizer_state=optimizer_state))


def log(run: Run, record: dict) -> None:
    """One line of log.jsonl (and wandb), from rank 0."""
    if run.env.master:
        with open(run.log_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if run.wandb is not None:
            run.wandb.log(record, step=record["iter"])


def trim_log(path: str, last_iter: int) -> None:
    """Keep the records of iterations <= last_iter (a resumed run redoes the later ones; a fresh run
    keeps none) and drop a line cut short by a kill."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as f:
        for line in f:
            try:
                if json.loads(line)["iter"] <= last_iter:
                    kept.append(line if line.endswith("\n") else line + "\n")
            except (ValueError, KeyError, TypeError):
                continue
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.writelines(kept)
    os.replace(tmp, path)


def after_eval(run: Run, losses: dict, lr: float, elapsed: float, start_iter: int) -> Optional[str]:
    """Book-keeping after an evaluation: best loss, print, log, checkpoint; a reason to stop, or None.
    elapsed: seconds of training so far, the runs this one resumes included."""
    cfg, s = run.cfg, run.state
    s.val_loss, s.wall_s = losses["val"], elapsed
    if not all(math.isfinite(v) for v in losses.values()):
        return f"non-finite eval loss at iter {s.iter_num}"
    improved = losses["val"] < s.best_val
    if improved:
        s.best_val, s.best_iter, s.bad_evals = losses["val"], s.iter_num, 0
    else:
        s.bad_evals += 1
    if run.env.master:
        print(f"step {s.iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f} "
              f"(best {s.best_val:.4f} @ {s.best_iter})")
    # the checkpoint first, then the record: a logged evaluation's checkpoint is on disk (a job killed
    # in between leaves the previous checkpoint and no record of this one)
    if cfg["save_checkpoint"] and s.iter_num > start_iter and (improved or cfg["always_save_checkpoint"]):
        save(run)
    record = {"iter": s.iter_num, "train_loss": losses["train"], "val_loss": losses["val"], "lr": lr,
              "best_val_loss": s.best_val, "best_iter": s.best_iter, "elapsed_s": elapsed}
    if cfg["eval_only"]:  # a second record at an iteration the log already holds: say which one this is (the
        record["eval_only"] = True  # readers keep the last record an iteration has, as the summary does)
    log(run, record)
    if cfg["patience"] and s.bad_evals >= cfg["patience"]:
        return f"early stop: no val improvement in {cfg['patience']} evaluations"
    return None


def weight_checksums(run: Run) -> list:
    """Three checksums of the weights per rank: DDP must leave them identical (FSDP: of the full
    weights each rank gathers from the shards, one parameter at a time: no full float64 copy)."""
    with torch.no_grad():
        if run.env.fsdp:
            sums, offset = torch.zeros(3, dtype=torch.float64, device=run.env.device), 0
            for p in run.raw_model.parameters():
                flat = p.full_tensor().detach().double().flatten()
                index = torch.arange(offset, offset + flat.numel(), device=flat.device, dtype=torch.float64)
                sums += torch.stack([flat.sum(), flat.abs().sum(), (flat * index).sum()])
                offset += flat.numel()
            checksum = sums.tolist()
        else:
            at = float64_device(run.env.device)  # the device, or the CPU for MPS (no float64 there)
            flat = torch.cat([p.detach().to(at, torch.float64).flatten() for p in run.raw_model.parameters()])
            index = torch.arange(flat.numel(), device=flat.device, dtype=torch.float64)
            checksum = [flat.sum().item(), flat.abs().sum().item(), (flat * index).sum().item()]
    if not run.env.ddp:
        return [checksum]
    checksums = [None] * run.env.world
    torch.distributed.all_gather_object(checksums, checksum)
    return checksums


def peak_memory(run: Run) -> Optional[list]:
    """Peak GPU memory allocated by tensors, GiB, one entry per rank (DDP vs FSDP); None on CPU."""
    if run.env.device.type != "cuda":
        return None
    mine = torch.cuda.max_memory_allocated(run.env.device) / 2**30
    if not run.env.ddp:
        return [mine]
    peaks = [None] * run.env.world
    torch.distributed.all_gather_object(peaks, mine)
    return peaks


def write_summary(run: Run, finished: bool, reason: str, wall: float, timer: PhaseTimer, checksums: list,
                  peak_gib: Optional[list] = None) -> None:
    """out_dir/summary.json: the results file every table reads (valid JSON: non-finite numbers are null)."""
    cfg, env, s, m = run.cfg, run.env, run.state, run.raw_model
    path = os.path.join(env.out_dir, "summary.json")
    ms_per_iter = timer.medians()
    if all(v is None for v in ms_per_iter.values()):  # a resume that timed no iteration (a finished run, eval_only):
        ms_per_iter = earlier_summary(run).get("ms_per_iter") or ms_per_iter  # the run's own timing stays
    write_json(path, {
        "config": {**cfg, "dtype": env.dtype, "world_size": env.world}, "model_config": m.config.to_dict(),
        "git_commit": git_commit(), "best_val_loss": s.best_val if s.best_iter >= 0 else None, "best_iter": s.best_iter,
        "final_val_loss": s.val_loss, "iters": s.iter_num, "tokens": s.tokens,
        "wall_time_s": wall, "ms_per_iter": ms_per_iter, "attn_params": m.attn_params(),
        "kv_values_per_token_per_layer": m.kv_values_per_token_per_layer(),
        "device_name": torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else "cpu",
        "torch_version": torch.__version__, "finished": finished, "stopped_reason": reason,
        "rank_weight_checksums": checksums, "peak_memory_gib": peak_gib,
    })


def open_outputs(run: Run) -> None:
    """Rank 0: print the config and the model, write config.json, drop log records this run redoes
    (a fresh run: all of them), remove temp files a killed save left, start wandb."""
    cfg, env, m = run.cfg, run.env, run.raw_model
    if not env.master:
        return
    print(format_config(cfg))
    print(f"model: {m.get_num_params() / 1e6:.2f}M params, attention {m.attn_params() / 1e6:.3f}M, KV cache "
          f"{m.kv_values_per_token_per_layer()} values/token/layer; {run.tokens_per_iter:,} tokens/iter; "
          f"device {env.device} {env.dtype}{' (bf16 matrices, float32 masters)' if cfg['master_weights'] else ''}; "
          f"{env.world} process(es){' (FSDP)' if env.fsdp else ''}")
    if cfg["wandb_log"]:  # first: a wandb that cannot start (no API key, offline without WANDB_MODE) is one line
        # before the folder is touched (it was raised after an earlier run's checkpoint had been set aside)
        try:
            import wandb  # noqa: lazy, optional
        except ImportError:
            fail("wandb_log=True, but wandb is not installed: pip install wandb (requirements.txt pins it), or give "
                 "--wandb_log=False")
        try:
            wandb.init(project=cfg["wandb_project"], name=cfg["wandb_run_name"], config=cfg)
        except Exception as e:  # wandb raises its own kinds (UsageError, CommError, ...)
            why = (str(e).strip().splitlines() or [""])[0]
            fail(f"wandb_log=True, but wandb.init failed ({type(e).__name__}: {why}): log in (`wandb login`), set "
                 "WANDB_MODE=offline, or give --wandb_log=False")
        run.wandb = wandb
    write_json(os.path.join(env.out_dir, "config.json"), {**cfg, "device": str(env.device), "dtype": env.dtype,
                                                          "world_size": env.world})
    if not run.resumed:  # an earlier run's checkpoint and summary set aside with its log emptied, all at once: a
        # resume before this run's first save then finds no checkpoint (instead of the earlier run's, under this
        # run's log), and no summary says the folder holds a finished run
        for name, aside in ((CKPT_NAME, EARLIER_CKPT), ("summary.json", EARLIER_SUMMARY)):
            if os.path.isfile(os.path.join(env.out_dir, name)):
                os.replace(os.path.join(env.out_dir, name), os.path.join(env.out_dir, aside))
    trim_log(run.log_path, run.state.iter_num if run.resumed else -1)
    remove_stale_temps(run.ckpt_path)


def log_progress(run: Run, loss: torch.Tensor, lr: float, n: int, seconds: float, mfu: SteadyMFU,
                 iters_done: int) -> Optional[str]:
    """The log line of the last n iterations (seconds long): a reason to stop if the loss is not finite."""
    env, s = run.env, run.state
    if env.ddp:  # the loss of the whole global batch, and the same decision on every rank
        torch.distributed.all_reduce(loss)
        loss /= env.world
    lossf = loss.item()  # a sync point: only at log time
    if not math.isfinite(lossf):
        return (f"non-finite training loss at iter {s.iter_num}; stopped, the last good checkpoint (if any) "
                f"is kept in {run.ckpt_path}")
    dt = seconds / n
    util = mfu.update(iters_done, n, seconds)
    if env.master:
        # MFU is against a GPU's bf16 peak: on a CPU it would only print 0.0%
        mfu_text = "" if env.device.type != "cuda" else \
            f", mfu/GPU {f'{util * 100:.1f}%' if util >= 0 else '(warm-up)'}"
        print(f"iter {s.iter_num}: loss {lossf:.4f}, lr {lr:.2e}, {dt * 1e3:.1f} ms/iter, "
              f"{run.tokens_per_iter / dt:,.0f} tok/s{mfu_text}")
    log(run, {"iter": s.iter_num, "loss": lossf, "lr": lr, "ms_per_iter": dt * 1e3,
              "tokens_per_s": run.tokens_per_iter / dt, "mfu": util if util >= 0 else None})
    return None


def earlier_summary(run: Run) -> dict:
    """The summary.json a resumed run's folder holds (the run's own, from its last end), or {}."""
    return summary_of(run.env.out_dir) if run.resumed else {}


def summary_of(out_dir: str) -> dict:
    """out_dir's summary.json (a run's, from its last end), or {} where there is none or it does not read."""
    summary = read_json(os.path.join(out_dir, "summary.json"))
    return summary if isinstance(summary, dict) else {}


def finish(run: Run, reason: str, wall: float, timer: PhaseTimer) -> None:
    """summary.json, the last line, process group down; exit 1 unless the run finished (or only evaluated)."""
    env, s = run.env, run.state
    finished = reason == "max_iters" or reason.startswith("early stop")
    if reason == "eval_only":  # an evaluation trains nothing: the run is as finished as it was (a sweep reads this)
        before = str(earlier_summary(run).get("stopped_reason") or "")
        finished = s.iter_num >= run.cfg["max_iters"] or before.startswith("early stop")
        reason = before if finished and before.startswith("early stop") else reason
    peak_gib = peak_memory(run)  # before the checksums' gathers add to it
    checksums = weight_checksums(run)
    if env.master:
        write_summary(run, finished, reason, wall, timer, checksums, peak_gib)
        print(f"{'done' if finished else 'stopped'}: {reason}; best val loss {s.best_val:.4f} at iter {s.best_iter}; "
              f"{wall:.1f} s")
    if run.wandb is not None:
        run.wandb.finish()
    if env.ddp:
        # wait here (GIL released) until gloo has finished the last gather
        torch.distributed.barrier(device_ids=[env.local_rank] if env.device.type == "cuda" else None)
        # DDP's reducer holds the process group from C++, and its destructor keeps the GIL. Were it the group's
        # last holder (destroy_process_group drops only the registry's reference), the group would be torn down
        # there, joining gloo's worker threads with the GIL held, and a worker that needs the GIL to free a tensor
        # never ends: seen, a 2-process CPU job that printed its last line and hung at main's return. So the DDP
        # wrapper goes first, and the registry's reference is the last, released without the GIL.
        run.model = None
        gc.collect()
        torch.distributed.destroy_process_group()
    if not finished and reason != "eval_only":
        fail(reason, says=env.master, code=1)  # every process stopped for the same reason: said once


def train_loop(run: Run, timer: PhaseTimer, mfu: SteadyMFU):
    """Evaluate, checkpoint, step and log until the run stops; return (why it stopped, its wall seconds)."""
    cfg, s = run.cfg, run.state
    start_iter = s.iter_num
    # a resumed run has already evaluated (and checkpointed) its first iteration, unless the checkpoint
    # never saw an evaluation (best_iter < 0: e.g. a converted model about to be fine-tuned); eval_only asks anew
    skip_eval = run.resumed and s.best_iter >= 0 and not cfg["eval_only"]
    t_start = t_last = time.time()
    t_before = s.wall_s  # a resumed run's clock goes on from its checkpoint's (log elapsed_s, summary wall_time_s)
    n_since = 0  # iterations since t_last
    while True:
        lr = get_lr(s.iter_num, cfg)
        if run.graph is None:  # the graph holds its learning rate in a tensor of its own (train_step passes lr)
            for group in run.optimizer.param_groups:
                group["lr"] = lr

        if (s.iter_num % cfg["eval_interval"] == 0 or s.iter_num >= cfg["max_iters"] or cfg["eval_only"]) \
                and not skip_eval:
            reason = after_eval(run, evaluate(run), lr, t_before + time.time() - t_start, start_iter)
            if reason and not (cfg["eval_only"] and reason.startswith("early stop")):  # patience counts training
                break
            t_last, n_since = time.time(), 0  # evaluation time is not iteration time
        skip_eval = False
        if s.iter_num >= cfg["max_iters"] or cfg["eval_only"]:
            reason = "eval_only" if cfg["eval_only"] else "max_iters"
            break

        loss = train_step(run, timer, timed=s.iter_num - start_iter >= UNTIMED_ITERS, lr=lr)
        n_since += 1
        if s.iter_num % cfg["log_interval"] == 0 or s.iter_num == cfg["max_iters"]:
            timer.flush()
            now = time.time()
            reason = log_progress(run, loss, lr, n_since, now - t_last, mfu, s.iter_num - start_iter)
            if reason:
                break
            t_last, n_since = now, 0
    return reason, t_before + time.time() - t_start


def say_interrupted(run: Run) -> None:
    """After a Ctrl-C: one line (from one process a node, as fail's) saying where the run stopped and how it goes
    on. The checkpoint on disk is whole whenever the interrupt came (atomic writes)."""
    if not says_for_node():
        return
    if os.path.isfile(run.ckpt_path):
        how = (f"`python train.py <the same arguments> --init_from=resume` continues from its last checkpoint, "
               f"{run.ckpt_path}")
    elif not run.cfg["save_checkpoint"]:
        how = "this run writes no checkpoint (save_checkpoint=False): running it again starts over"
    else:
        how = "no checkpoint was written yet: running it again starts over"
    print(f"interrupted at iteration {run.state.iter_num}: {how}", file=sys.stderr, flush=True)


def end_by_sigint() -> None:
    """End this process by SIGINT's default action: the status an uncaught KeyboardInterrupt gives (a shell's 130, a
    parent's -2: a sweep or torchrun sees what it saw before), without the traceback."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    sys.exit(130)  # not reached where the signal ends the process (POSIX)


def main(argv):
    cfg, gptconf, checkpoint = configure(argv)
    env = setup(cfg, gptconf)
    try:
        run = build(cfg, gptconf, checkpoint, env)
    except ValueError as e:  # weights that do not fit the checkpoint's own model_config
        fail(str(e))
    checkpoint = None  # free memory
    open_outputs(run)
    timer = PhaseTimer(env.device)
    mfu = SteadyMFU(run.raw_model, run.tokens_per_iter, env.world, run.cfg["peak_tflops"] * 1e12)
    try:
        reason, wall = train_loop(run, timer, mfu)
    except KeyboardInterrupt:  # Ctrl-C: say how the run goes on; an in-process caller still gets the exception
        say_interrupted(run)
        raise
    finish(run, reason, wall, timer)


if __name__ == "__main__":
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <pid>` prints every thread's stack: where a hung job waits
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    if help_requested(sys.argv[1:], __doc__, DEFAULTS):
        sys.exit(0)
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:  # the traceback through the loop tells a user nothing: main said what to do
        end_by_sigint()
