"""
The whole training iteration as one CUDA graph: every micro-step's forward, loss and backward,
the gradient clip and the AdamW step, captured once and replayed each iteration.

Why: a step launched from Python leaves the GPU idle while the host works. That happens after
every sync (a loop that reads the loss each iteration, as nanoGPT's bench.py does: the host
then spends ~1 ms in the compiled model's entry before the first kernel starts) and wherever
kernels are shorter than their launches (Tucker's small matmuls). A replay is one launch and
the GPU runs the same kernels back to back. torch.compile's 'reduce-overhead' mode graphs the
forward and the backward separately; the optimizer, the clip and the Python between them stay
outside, and it copies tensors in and out of its graphs' memory.

What it asks of the run (`check_graph_step` says why not, naming the key):
- one CUDA process (no DDP or FSDP: their collectives are left to their own machinery);
- bfloat16 or float32 (float16's GradScaler skips a step by a host-side decision);
- a model compiled without CUDA graphs of its own (compile_mode 'default' or
  'max-autotune-no-cudagraphs'), or not compiled at all;
- no activation checkpointing (its recomputation reads the CUDA RNG state, which a capture forbids).

The first `warmup` iterations run as plain steps (real iterations, the same updates as without
the graph) on a side stream, so that torch.compile, cuBLAS and Triton's autotuner do their
one-time work outside the capture, as PyTorch's whole-network capture recipe asks. The next
iteration is captured, then replayed; every later one is a replay. The inputs, the learning
rate and the loss live in static tensors: a replay reads the batch and the learning rate
copied into them and writes the loss there. The graph's memory pool keeps one iteration's
activations and gradients for the whole run; an evaluation between iterations allocates beside it.
"""
from contextlib import nullcontext
from typing import Optional, Sequence

import torch

from model import weights_written

GRAPH_COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")  # modes without CUDA graphs of their own
WARMUP = 3  # plain iterations before the capture (GraphedTrainStep's default, train.py's)


def check_graph_step(device: torch.device, dtype: str, distributed: bool, compile_on: bool,
                     compile_mode: str, activation_checkpointing: bool = False) -> Optional[str]:
    """Why graph_step=True cannot serve this run (a message naming the key and what is allowed), or None."""
    if device.type != "cuda":
        return f"graph_step=True needs a CUDA device, not device={str(device)!r}: allowed on 'cuda' only"
    if distributed:
        return ("graph_step=True runs one process without DDP or FSDP: allowed only without torchrun "
                "(or set graph_step=False)")
    if dtype == "float16":
        return ("graph_step=True with dtype='float16' is not supported: allowed dtype 'bfloat16' or 'float32' "
                "(float16's gradient scaler decides on the host whether to skip a step)")
    if activation_checkpointing:
        return ("graph_step=True with activation_checkpointing=True is not supported: allowed "
                "activation_checkpointing=False (its recomputation saves the CUDA RNG state, which a capture forbids)")
    if compile_on and compile_mode not in GRAPH_COMPILE_MODES:
        return (f"graph_step=True with compile_mode={compile_mode!r} is not supported: allowed "
                f"{', '.join(repr(m) for m in GRAPH_COMPILE_MODES)} (that mode captures CUDA graphs of its own)")
    return None


def clip_gradients(optimizer: torch.optim.Optimizer, params: Sequence, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_(params, max_norm), or the optimizer's own where it has one
    (master_adamw.MasterAdamW: the norm in float32, the scaling done inside its step). The total norm."""
    own = getattr(optimizer, "clip_grad_norm_", None)
    if own is not None:
        return own(max_norm)
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


class GraphedTrainStep:
    """One training iteration of `model` (micro-steps of (B, T) batches, mean loss, clip, AdamW
    step), replayed from a CUDA graph after `warmup` plain iterations. Call it with the
    iteration's batches [(X, Y)] (one per micro-step, on the device) and its learning rate;
    it returns the iteration's mean loss (a fresh 0-d tensor: no sync)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, accum: int, batch_size: int,
                 seq_len: int, device: torch.device, dtype: str, grad_clip: float = 0.0, warmup: int = WARMUP):
        if accum < 1 or warmup < 1:
            raise ValueError(f"accum={accum} and warmup={warmup} must be >= 1")
        self.model, self.optimizer = model, optimizer
        self.accum, self.grad_clip, self.warmup = accum, grad_clip, warmup
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        # autocast's weight cast cache must be off in a captured graph (PyTorch's CUDA graph notes): a cached
        # bf16 copy made during capture would be read by every replay even after the weights change
        self.autocast = (torch.autocast(device_type="cuda", dtype=getattr(torch, dtype), cache_enabled=False)
                         if dtype != "float32" else nullcontext())
        self.x = torch.zeros((accum, batch_size, seq_len), dtype=torch.long, device=device)  # (accum, B, T) inputs
        self.y = torch.zeros_like(self.x)  # (accum, B, T) targets
        self.lr = None  # one 0-d float32 tensor per param group once captured: what the replays read
        self.graph = None
        self.loss = None  # (): the mean loss the graph writes
        self.iterations = 0

    def _iteration(self) -> torch.Tensor:
        """One iteration on the static inputs, as train.py's plain step (without its scaler)."""
        loss_sum = torch.zeros((), device=self.x.device)
        for micro in range(self.accum):
            with self.autocast:
                _, loss = self.model(self.x[micro], self.y[micro])
                loss = loss / self.accum
            loss_sum += loss.detach()
            loss.backward()
        if self.grad_clip != 0.0:  # no host sync: the coefficient stays on the device
            clip_gradients(self.optimizer, self.params, self.grad_clip)
        self.optimizer.step()
        return loss_sum

    def _load(self, batches: Sequence, lr: float) -> None:
        if len(batches) != self.accum:
            raise ValueError(f"{len(batches)} batches given for {self.accum} micro-steps")
        for micro, (x, y) in enumerate(batches):
            if x.shape != self.x.shape[1:] or y.shape != self.y.shape[1:]:  # copy_ would broadcast a (1, T) batch
                raise ValueError(f"micro-batch {micro}: inputs {tuple(x.shape)} and targets {tuple(y.shape)}, the "
                                 f"captured step takes {tuple(self.x.shape[1:])} (batch_size, block_size) each")
            self.x[micro].copy_(x, non_blocking=True)
            self.y[micro].copy_(y, non_blocking=True)
        if self.lr is None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        else:
            for t in self.lr:
                t.fill_(lr)

    def __call__(self, batches: Sequence, lr: float) -> torch.Tensor:
        self._load(batches, lr)
        self.iterations += 1
        if self.iterations <= self.warmup:  # a plain iteration on a side stream (the recipe's warm-up)
            side = torch.cuda.Stream(self.x.device)
            side.wait_stream(torch.cuda.current_stream(self.x.device))
            with torch.cuda.stream(side):
                loss = self._iteration()
                self.optimizer.zero_grad(set_to_none=True)  # the capture then allocates the gradients in its pool
            torch.cuda.current_stream(self.x.device).wait_stream(side)
            return loss
        if self.graph is None:
            self._capture(lr)
        self.graph.replay()
        weights_written()  # the replayed update bumped no version counter: a later generate rebuilds its forms
        return self.loss.clone()

    def _device_lr(self, lr: float) -> None:
        """The learning rate becomes a device tensor the replays read (a float would be frozen into the graph);
        fused AdamW takes a tensor lr, and capturable=True lets it step inside a capture."""
        self.lr = []
        for group in self.optimizer.param_groups:
            group["lr"] = torch.full((), lr, dtype=torch.float32, device=self.x.device)
            group["capturable"] = True
            self.lr.append(group["lr"])

    def optimizer_state_dict(self) -> dict:
        """optimizer.state_dict() as a plain run saves it: each group's lr a float and capturable False (the
        device lr tensor and the flag are the graph's own), so the checkpoint resumes with or without a graph."""
        state = self.optimizer.state_dict()  # its param_groups are copies: the optimizer keeps its tensors
        for group in state["param_groups"]:
            group["lr"] = float(group["lr"])
            group["capturable"] = False
        return state

    def _capture(self, lr: float) -> None:
        self._device_lr(lr)
        self.graph = torch.cuda.CUDAGraph()  # (entering the capture syncs and empties the allocator's cache)
        with torch.cuda.graph(self.graph):
            self.loss = self._iteration()
