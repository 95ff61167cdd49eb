"""
The training keys of train.py: their defaults and their allowed values.

Every model key is a field of model.GPTConfig, validated there; these are the rest. train.py
accepts both from a config file or as --key=value (configurator.py checks types and names);
validate_train_config checks the values before anything is built or written, and raises a
ValueError naming the key and the allowed range.
"""
import math
import os

from configurator import check_device

TRAIN_DEFAULTS = dict(
    # I/O
    out_dir="out",  # run folder: config.json, log.jsonl, ckpt.pt, summary.json
    eval_interval=2000,  # iterations between evaluations (and checkpoints)
    log_interval=1,  # iterations between log lines
    eval_iters=200,  # batches per split in an evaluation (random batches: the same windows at every evaluation of a
    #                  run, drawn from `seed` + 1, so runs of different seeds see different windows; eval_full_val is
    #                  the same for every run)
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
    # torch.compile's mode: 'default'; 'reduce-overhead' also captures the step in CUDA graphs (for
    # launch-bound steps: small models, many small matmuls as in Tucker); 'max-autotune' tunes matmuls
    compile_mode="default",
    # capture the whole iteration (micro-steps, clip, AdamW) in one CUDA graph after 3 plain iterations and replay
    # it: no host time between kernels or after a sync (graph_step.py). One CUDA process, bf16/fp32, a compile_mode
    # without CUDA graphs of its own ('default', 'max-autotune-no-cudagraphs')
    graph_step=False,
    # the model's matrices held in bf16, their float32 masters and AdamW's moments in the optimizer
    # (master_adamw.MasterAdamW): no per-step autocast casts of the weights to bf16 and of their gradients back
    # to float32, one Triton launch per 16 tensors for the update (master_adamw.TENSORS_PER_LAUNCH) with the clip
    # folded into it (GPT-2 MHA on an H200: 1.6-1.8% off the step, results/bench/LOG.md). Micro-steps' gradients
    # are summed in float32. Checkpoints hold the
    # float32 masters, so a run resumes with either value. One process (no DDP/FSDP), dtype 'bfloat16'
    master_weights=False,
    # DDP + compile: True splits the compiled graph at DDP's gradient buckets so that all-reduce overlaps
    # the backward (torch._dynamo.config.optimize_ddp, torch's default). False (ours): one graph, gradients
    # all-reduced after the backward: fewer, larger kernels, and with many micro-steps per iteration only
    # the last one all-reduces anyway. Measured (results/multigpu/): Tucker [8,64,64] at 480 x 1024 on 4
    # H200s scales 90.8% without the split, 69.4% with it
    ddp_split_graph=False,
    fsdp=False,  # under torchrun: shard weights, gradients and AdamW state over the processes (FSDP2) instead of DDP
    seed=1337,  # model init, data sampling and dropout
    peak_tflops=790.0,  # bf16 matmul TFLOP/s of one GPU, for MFU (790 = measured on H200)
)

# What the run is (its data, batch, optimizer, schedule, evaluation and length): with init_from='resume' each of these
# that neither a config file nor the command line sets is the checkpoint's run's value, not the default, so that
# `train.py --init_from=resume --out_dir=X` continues the run it names. The other training keys (out_dir,
# init_from, eval_only, device, dtype, compile, graph_step, master_weights, DDP/FSDP, wandb, peak_tflops) are how
# this process runs it, and take their defaults as on a fresh run.
RUN_KEYS = ("eval_interval", "log_interval", "eval_iters", "eval_full_val", "always_save_checkpoint", "save_checkpoint",
            "patience", "dataset", "data_dir", "gradient_accumulation_steps", "batch_size", "learning_rate",
            "max_iters", "weight_decay", "beta1", "beta2", "grad_clip", "decay_lr", "warmup_iters", "lr_decay_iters",
            "min_lr", "seed")
INIT_FROM_CHOICES = ("scratch", "resume")
DTYPE_CHOICES = ("float32", "bfloat16", "float16")
BACKEND_CHOICES = ("nccl", "gloo")
COMPILE_MODE_CHOICES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def validate_train_config(cfg: dict, schedule: bool = True) -> None:
    """Raise ValueError (naming the key and the allowed values) for the first invalid training key. schedule=False
    leaves out the checks of one run key against another (warmup_iters against lr_decay_iters, min_lr against
    learning_rate): a resume makes them once the checkpoint's run keys are in."""
    def at_least(key, lo, finite=False):
        if not cfg[key] >= lo:  # NaN too
            raise ValueError(f"{key}={cfg[key]} is out of range: allowed >= {lo}")
        if finite and not math.isfinite(cfg[key]):  # 1e999 parses as inf: a run of nan losses, not a run
            raise ValueError(f"{key}={cfg[key]} is out of range: allowed a finite number >= {lo}")

    def in_unit_interval(key):
        if not 0.0 <= cfg[key] < 1.0:
            raise ValueError(f"{key}={cfg[key]} is out of range: allowed [0, 1)")

    def one_of(key, choices):
        if cfg[key] not in choices:
            raise ValueError(f"{key}={cfg[key]!r} is unknown: allowed {', '.join(repr(c) for c in choices)}")

    one_of("init_from", INIT_FROM_CHOICES)
    for key in ("batch_size", "gradient_accumulation_steps", "eval_interval", "log_interval", "eval_iters"):
        at_least(key, 1)
    for key in ("max_iters", "warmup_iters", "lr_decay_iters", "patience"):
        at_least(key, 0)
    for key in ("learning_rate", "min_lr", "weight_decay", "grad_clip"):
        at_least(key, 0.0, finite=True)
    for key in ("beta1", "beta2"):
        in_unit_interval(key)
    if schedule and cfg["decay_lr"]:  # warmup to learning_rate, then cosine down to min_lr at lr_decay_iters
        if cfg["lr_decay_iters"] < cfg["warmup_iters"]:
            raise ValueError(f"lr_decay_iters={cfg['lr_decay_iters']} is out of range: allowed >= warmup_iters="
                             f"{cfg['warmup_iters']} (the decay starts where the warmup ends; or decay_lr=False)")
        if cfg["min_lr"] > cfg["learning_rate"]:
            raise ValueError(f"min_lr={cfg['min_lr']} is out of range: allowed <= learning_rate={cfg['learning_rate']} "
                             "(the cosine decays from learning_rate to min_lr; or decay_lr=False)")
    if not 0 <= cfg["seed"] < 2**63:  # torch.manual_seed's range (a larger one failed inside the data sampler)
        raise ValueError(f"seed={cfg['seed']} is out of range: allowed 0 .. 2**63 - 1")
    if not 0 < cfg["peak_tflops"] < math.inf:
        raise ValueError(f"peak_tflops={cfg['peak_tflops']} is out of range: allowed a finite number > 0")
    if cfg["dtype"]:
        one_of("dtype", DTYPE_CHOICES)
    one_of("backend", BACKEND_CHOICES)
    one_of("compile_mode", COMPILE_MODE_CHOICES)
    if cfg["compile_mode"] != "default" and not cfg["compile"]:
        raise ValueError(f"compile_mode={cfg['compile_mode']!r} is a mode of the compiled model: it needs compile=True "
                         "(allowed without it: 'default')")
    if not cfg["out_dir"]:
        raise ValueError("out_dir='' is empty: give the run folder")
    if not cfg["data_dir"] and not cfg["dataset"]:
        raise ValueError("dataset='' is empty: give the dataset name (data/<dataset>) or data_dir")
    check_device(cfg["device"])
    if cfg["fsdp"]:
        if cfg["dtype"] == "float16":
            raise ValueError("fsdp=True with dtype='float16' is not supported: allowed dtype 'bfloat16' or 'float32' "
                             "(float16 needs a gradient scaler over sharded gradients)")
        if cfg["device"].startswith("mps"):
            raise ValueError(f"fsdp=True on device={cfg['device']!r} is not supported: allowed 'cuda' or 'cpu'")


def data_dir_of(cfg: dict) -> str:
    """The folder a run reads train.bin and val.bin from: data_dir, or the repository's data/<dataset> (a relative
    data_dir is the working directory's, where train.py runs)."""
    return cfg["data_dir"] or os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", cfg["dataset"])
