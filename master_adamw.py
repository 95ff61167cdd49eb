"""
AdamW over float32 master weights for a model that holds its matrices in bf16: train.py's `master_weights=True`.

Under bf16 autocast every step casts each float32 weight to bf16 for its matmul and each bf16 weight gradient back to
float32 for the optimizer: on an H200, 98 kernels and 0.58 ms of GPT-2's 23.5 ms step at 12 x 1024
(results/bench/session14/profile_mha_full.md), 40 bytes a parameter with AdamW's own 28. Here the matrices (every
parameter of 2 or more dims) are bf16 in the model, so the matmuls read them as they are and their gradients come
out in bf16; the optimizer keeps the float32 master copy of each and, in one pass over each tensor, reads the
bf16 gradient, updates master, exp_avg and exp_avg_sq as torch's AdamW does (decoupled weight decay, bias
corrections) and writes the new bf16 weight in the same pass: 28 bytes a parameter in all. Vectors (norm weights,
biases) stay float32 and take the same update in place, by Triton kernels on CUDA; the same
arithmetic in torch ops serves the CPU. TENSORS_PER_LAUNCH (16) tensors of a kind go through one launch of a
multi-tensor kernel: small tensors (norm weights, Tucker's cores) cost a launch's fixed time each (session 16: Tucker's
update 1.06 -> 0.74 ms a step, 147 launches -> 10; 1 restores a launch per tensor).

    optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cuda", master_weights=True)  # converts the model

The conversion happens in the constructor: build the model in float32 (load a checkpoint first, or later through
`load_model_state_dict(model, sd)`, which sets the masters too), then the optimizer. `model_state_dict(model)` is
model.state_dict() with the float32 masters in place of the bf16 matrices (what a checkpoint should hold).
state_dict() has AdamW's layout (per parameter 'step', 'exp_avg', 'exp_avg_sq') and loads both ways. The residual
stream stays float32 (GPT.forward and decode_step take the embeddings in the norms' dtype), and the model runs under
bf16 autocast. `clip_grad_norm_(max_norm)` is torch's clip with each norm taken in float32; its coefficient is applied
by the next step's kernel as it reads each gradient (no pass to scale the gradients, no bf16 rounding of the scaled
ones). With `micro_steps > 1` each micro-step's bf16 gradient is added to a float32 sum as soon as the backward has
made it (a post-accumulate-grad hook) and dropped, so that gradients never add in bf16; the step reads the sum and
zeroes it in its pass (10 bytes a parameter a micro-step, against autocast's float32 accumulation's 18). DDP and
FSDP would reduce the gradients in bf16, so this is for one process (`check_supported`). Measured on an H200
(results/bench/LOG.md, session 15): GPT-2 MHA's step 1.6-1.8% faster (`bench_train --graph_step
--master_weights`), 0.8% at 4 micro-steps; the 200-iteration Shakespeare loss curve within 0.055 of fused AdamW's.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

import torch

from decode_attention import _interpret, _triton_available

BLOCK = 2048  # elements per program
NUM_WARPS = 4
# tensors updated by one launch: the tensors of a group (same device, gradient dtype, bf16 copy or not) go
# TENSORS_PER_LAUNCH at a time through the multi-tensor kernel; 1 = a launch per tensor (session 15's kernel). On an
# H200 (results/bench/LOG.md, session 16) 16 took GPT-2 Tucker's update from 147 launches and 1.06 ms a step to
# 10 and 0.74 ms, MHA's and Tucker's steps 0.3-0.9% faster
TENSORS_PER_LAUNCH = 16
BACKENDS = ("auto", "triton", "torch")
_HAVE_TRITON = _triton_available()

if _HAVE_TRITON:
    import triton
    import triton.language as tl

    @triton.jit
    def _adamw_block(G, P, M, V, COPY, STEP, n, block, lr, scale, beta1, beta2, log2_beta1, log2_beta2, eps,
                     weight_decay, BLOCK: tl.constexpr, HAS_COPY: tl.constexpr, ZERO_G: tl.constexpr):
        """Block `block` of one tensor's AdamW step: gradient G (bf16 or float32) times scale (the clip
        coefficient), float32 weights P, moments M and V updated in place; with HAS_COPY the new weights are also
        written to COPY in bf16 (the model's); with ZERO_G, G (a float32 sum over micro-steps) is zeroed for the
        next iteration. STEP: the tensor's 0-d float32 step, already counted for this step."""
        offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        step = tl.load(STEP)
        g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32) * scale
        p = tl.load(P + offs, mask=mask, other=0.0)
        m = tl.load(M + offs, mask=mask, other=0.0)
        v = tl.load(V + offs, mask=mask, other=0.0)
        p = p * (1.0 - lr * weight_decay)
        m = beta1 * m + (1.0 - beta1) * g
        v = beta2 * v + (1.0 - beta2) * g * g
        bias1 = 1.0 - tl.exp2(step * log2_beta1)  # 1 - beta1^step
        bias2 = 1.0 - tl.exp2(step * log2_beta2)
        p = p - (lr / bias1) * m / (tl.sqrt(v) / tl.sqrt(bias2) + eps)
        tl.store(P + offs, p, mask=mask)
        tl.store(M + offs, m, mask=mask)
        tl.store(V + offs, v, mask=mask)
        if HAS_COPY:
            tl.store(COPY + offs, p.to(COPY.dtype.element_ty), mask=mask)
        if ZERO_G:
            tl.store(G + offs, tl.zeros([BLOCK], dtype=G.dtype.element_ty), mask=mask)

    @triton.jit
    def _master_adamw_kernel(G, P, M, V, COPY, n, LR, STEP, SCALE, beta1, beta2, log2_beta1, log2_beta2, eps,
                             weight_decay, BLOCK: tl.constexpr, HAS_COPY: tl.constexpr, ZERO_G: tl.constexpr):
        """One tensor's AdamW step (_adamw_block), a program per block. lr, the step and the scale are read from
        the device (LR, STEP, SCALE: 0-d float32), so that a CUDA graph's replays see their new values."""
        _adamw_block(G, P, M, V, COPY, STEP, n, tl.program_id(0), tl.load(LR), tl.load(SCALE), beta1, beta2,
                     log2_beta1, log2_beta2, eps, weight_decay, BLOCK, HAS_COPY, ZERO_G)

    @triton.jit
    def _master_adamw_multi_kernel(Gs, Ps, Ms, Vs, COPYs, STEPs, Ns, STARTs, LR, SCALE, beta1, beta2, log2_beta1,
                                   log2_beta2, eps, weight_decay, NT: tl.constexpr, BLOCK: tl.constexpr,
                                   HAS_COPY: tl.constexpr, ZERO_G: tl.constexpr):
        """The AdamW steps of NT tensors in one launch (tuples of pointers, sizes, and the tensors' first program
        ids STARTs, NT + 1 of them): program pid updates block pid - STARTs[i] of the tensor i it falls in. One
        launch instead of NT: small tensors (norm weights, Tucker's cores) cost a launch's fixed time each."""
        pid = tl.program_id(0)
        lr = tl.load(LR)
        scale = tl.load(SCALE)
        for i in tl.static_range(NT):
            if (pid >= STARTs[i]) & (pid < STARTs[i + 1]):
                _adamw_block(Gs[i], Ps[i], Ms[i], Vs[i], COPYs[i], STEPs[i], Ns[i], pid - STARTs[i], lr, scale,
                             beta1, beta2, log2_beta1, log2_beta2, eps, weight_decay, BLOCK, HAS_COPY, ZERO_G)


def _torch_update(grad, master, exp_avg, exp_avg_sq, copy, lr, step, beta1, beta2, eps, weight_decay,
                  scale=None) -> None:
    """The kernel's arithmetic for one tensor in torch ops (float32), in place; scale: the clip coefficient."""
    g = grad.float() if scale is None else grad.float() * scale
    master.mul_(1.0 - lr * weight_decay)
    exp_avg.mul_(beta1).add_(g, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
    bias1 = 1.0 - beta1 ** step
    bias2 = 1.0 - beta2 ** step
    master.sub_((lr / bias1) * exp_avg / (exp_avg_sq.sqrt() / math.sqrt(bias2) + eps))
    if copy is not None:
        copy.copy_(master)


# the keys torch's AdamW writes in each param group of its state_dict besides the hyperparameters: a MasterAdamW state
# loaded into an AdamW then reads plain AdamW's choices (the loader's fused/foreach: train.load_optimizer_state)
ADAMW_GROUP_FLAGS = dict(amsgrad=False, maximize=False, foreach=None, capturable=False, differentiable=False,
                         fused=None, decoupled_weight_decay=True)


class MasterAdamW(torch.optim.Optimizer):
    """AdamW whose matrices (parameters of 2 or more dims) are bf16 in the model and float32 here (see the module
    docstring). lr may be a float or a 0-d float32 tensor on the parameters' device (graph_step's). The model then
    runs under bf16 autocast (its vectors are float32). micro_steps: the backward passes per step; above 1 the
    matrices' gradients are summed in float32 (hooks), not in p.grad."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, backend: str = "auto", micro_steps: int = 1):
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
        if not (isinstance(micro_steps, int) and micro_steps >= 1):
            raise ValueError(f"micro_steps={micro_steps!r}: expected an int >= 1")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.backend = backend
        self.micro_steps = micro_steps
        self._summed = set()  # the bf16 matrices whose float32 gradient sum holds this iteration's gradient
        self._hooks = []
        # the clip coefficient the next step multiplies the gradients by, one per device (clip_grad_norm_ sets it)
        self.grad_scale = {p.device: torch.ones((), dtype=torch.float32, device=p.device)
                           for group in self.param_groups for p in group["params"]}
        self._clipped = False  # clip_grad_norm_ was called since the last step: the step resets the scale to 1
        for group in self.param_groups:
            device = group["params"][0].device if group["params"] else torch.device("cpu")
            # the lr the kernel reads: the group's own tensor where graph_step made lr one, else this, filled per step
            # (one kernel variant whatever lr is, so none is first loaded inside a graph capture)
            group["lr_device"] = torch.zeros((), dtype=torch.float32, device=device)
            for p in group["params"]:
                if p.dtype != torch.float32:
                    raise ValueError(f"MasterAdamW takes float32 parameters (it makes the bf16 copies); got {p.dtype}")
                state = self.state[p]
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)  # AdamW's, per parameter
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                if p.dim() >= 2:
                    state["master"] = p.detach().clone(memory_format=torch.contiguous_format)
                    # the model's copy, contiguous as the kernel writes it (Module.half() converts the same way)
                    p.data = p.data.to(torch.bfloat16, memory_format=torch.contiguous_format)
                    if micro_steps > 1:  # each micro-step's bf16 gradient added into a float32 sum, then dropped
                        state["grad_sum"] = torch.zeros_like(state["master"])
                        self._hooks.append(p.register_post_accumulate_grad_hook(self._add_to_sum))

    @torch.no_grad()
    def _add_to_sum(self, p: torch.Tensor) -> None:
        """After a backward has put p's bf16 gradient in p.grad: add it to p's float32 sum and drop it, so that the
        next micro-step's gradient is not added to it in bf16."""
        self.state[p]["grad_sum"].add_(p.grad)
        p.grad = None
        self._summed.add(p)

    def _gradient(self, p: torch.Tensor) -> Optional[torch.Tensor]:
        """This iteration's gradient of p: its float32 sum over micro-steps, p.grad, or None (no gradient)."""
        return self.state[p]["grad_sum"] if p in self._summed else p.grad

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's zero_grad; the float32 sums and the clip coefficient of an iteration that did not step are
        dropped too."""
        super().zero_grad(set_to_none)
        for p in self._summed:
            self.state[p]["grad_sum"].zero_()
        self._summed.clear()
        if self._clipped:
            for scale in self.grad_scale.values():
                scale.fill_(1.0)
            self._clipped = False

    def master(self, p: torch.Tensor) -> torch.Tensor:
        """The float32 weights behind p (p itself where it is float32)."""
        return self.state[p].get("master", p)

    def _masters_by_address(self) -> dict:
        return {p.data_ptr(): (p, self.state[p]["master"]) for g in self.param_groups for p in g["params"]
                if "master" in self.state[p]}

    def model_state_dict(self, model: torch.nn.Module) -> dict:
        """model.state_dict() with each bf16 matrix replaced by its float32 master (the same keys; tied weights,
        listed under two keys, both get it): what a checkpoint holds."""
        masters = self._masters_by_address()
        return {k: masters[v.data_ptr()][1] if v.dtype == torch.bfloat16 and v.data_ptr() in masters else v
                for k, v in model.state_dict().items()}

    def load_model_state_dict(self, model: torch.nn.Module, state_dict: dict) -> None:
        """model.load_state_dict(state_dict) for a converted model: float32 weights go to the masters as they are
        and to the model's bf16 copies rounded (loading into the model alone would leave the masters stale)."""
        model.load_state_dict(state_dict)  # the bf16 copies rounded, the vectors and buffers as they are
        masters = self._masters_by_address()
        for k, v in model.state_dict().items():
            if v.dtype == torch.bfloat16 and v.data_ptr() in masters:
                masters[v.data_ptr()][1].copy_(state_dict[k])

    def state_dict(self) -> dict:
        """AdamW's layout: per parameter 'step', 'exp_avg', 'exp_avg_sq' (parameters that never had a gradient:
        none, as AdamW); each group's hyperparameters with lr a float. No masters: they are the model's float32
        weights (model_state_dict)."""
        state, groups, index = {}, [], 0
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                st = self.state[p]
                if float(st["step"]) > 0:
                    state[index] = {"step": st["step"].detach().cpu().clone(), "exp_avg": st["exp_avg"],
                                    "exp_avg_sq": st["exp_avg_sq"]}
                ids.append(index)
                index += 1
            groups.append({**ADAMW_GROUP_FLAGS, **{k: v for k, v in group.items() if k not in ("params", "lr_device")},
                           "lr": float(group["lr"]), "params": ids})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """AdamW's or this optimizer's state_dict (parameters matched in order, as torch does): the moments, the
        steps, lr, betas, eps and weight decay. The masters stay (load_model_state_dict loads them)."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(len(s["params"]) != len(g["params"])
                                                       for s, g in zip(saved, self.param_groups)):
            raise ValueError("MasterAdamW.load_state_dict: the saved groups do not match this optimizer's "
                             f"({[len(s['params']) for s in saved]} against "
                             f"{[len(g['params']) for g in self.param_groups]} parameters)")
        for s in saved:
            for flag in ("amsgrad", "maximize"):
                if s.get(flag):
                    raise ValueError(f"MasterAdamW.load_state_dict: a state saved with {flag}=True (not supported)")
        for group, s in zip(self.param_groups, saved):
            for p, idx in zip(group["params"], s["params"]):
                entry = state_dict["state"].get(idx)
                st = self.state[p]
                if entry is None:  # no state saved for it: fresh, as torch's AdamW starts it
                    for key in ("step", "exp_avg", "exp_avg_sq"):
                        st[key].zero_()
                    continue
                for key in ("exp_avg", "exp_avg_sq"):
                    if tuple(entry[key].shape) != tuple(st[key].shape):
                        raise ValueError(f"MasterAdamW.load_state_dict: {key} of shape {tuple(entry[key].shape)} "
                                         f"for a parameter of shape {tuple(st[key].shape)}")
                    st[key].copy_(entry[key])
                st["step"].fill_(float(entry["step"]))
            if torch.is_tensor(group["lr"]):
                group["lr"].fill_(float(s["lr"]))  # graph_step's device lr stays the same tensor
            else:
                group["lr"] = float(s["lr"])
            group["betas"], group["eps"], group["weight_decay"] = tuple(s["betas"]), s["eps"], s["weight_decay"]

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_(params, max_norm) for this optimizer's parameters: the total 2-norm of
        the gradients, each tensor's norm taken in float32 (bf16 gradients' too), and the coefficient
        min(1, max_norm / (norm + 1e-6)) applied by the next step() as it reads each gradient in float32: no pass
        over the gradients to scale them, and no rounding of the scaled gradients to bf16. Returns the total norm
        (a 0-d float32 tensor on the parameters' device: no sync)."""
        grads = [g for group in self.param_groups for g in map(self._gradient, group["params"]) if g is not None]
        if not grads:
            return torch.zeros((), device=next(iter(self.grad_scale), torch.device("cpu")))
        by_dtype = {}
        for g in grads:  # one foreach launch per dtype (a mixed list takes the slow path)
            by_dtype.setdefault(g.dtype, []).append(g)
        device = grads[0].device
        norms = [n.to(device) for group in by_dtype.values()
                 for n in torch._foreach_norm(group, 2.0, dtype=torch.float32)]
        total = torch.linalg.vector_norm(torch.stack(norms))
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)  # torch's clip_grad_norm_, the same float32 ops
        for scale in self.grad_scale.values():
            scale.copy_(coef)
        self._clipped = True
        return total

    def _launch_classes(self, params) -> dict:
        """params with a gradient, by what one kernel variant serves: (bf16 copy, float32 sum, device, gradient
        dtype) -> [params] in their order; empty tensors left out (no program to launch)."""
        classes = {}
        for p in params:
            if p.numel() == 0:
                continue
            key = ("master" in self.state[p], p in self._summed, p.device, self._gradient(p).dtype)
            classes.setdefault(key, []).append(p)
        return classes

    def _kernel_args(self, p) -> tuple:
        """(gradient, float32 weights, exp_avg, exp_avg_sq, bf16 copy, step, numel) of p for the kernels; the copy
        is p itself (unused) where p is float32."""
        st = self.state[p]
        grad = self._gradient(p)
        grad = grad if grad.is_contiguous() else grad.contiguous()  # read as flat memory
        return grad, st.get("master", p), st["exp_avg"], st["exp_avg_sq"], p, st["step"], p.numel()

    def _use_triton(self, t: torch.Tensor) -> bool:
        ok = _HAVE_TRITON and (t.device.type == "cuda" or (_interpret() and t.device.type == "cpu"))
        if self.backend == "triton" and not ok:
            raise ValueError(f"MasterAdamW: the Triton kernel cannot run on {t.device.type}"
                             + ("" if _HAVE_TRITON else " (triton is not installed)"))
        return ok and self.backend != "torch"

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient (its own step counted): a kernel launch per
        TENSORS_PER_LAUNCH tensors of a kind on CUDA (what a CUDA graph replays: lr, the steps and the clip coefficient are
        read from the device), the torch ops elsewhere."""
        if closure is not None:
            raise ValueError("MasterAdamW.step takes no closure")
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        for group in self.param_groups:
            params = [p for p in group["params"] if self._gradient(p) is not None]
            if not params:
                continue
            triton_path = self._use_triton(params[0])
            if capturing and not triton_path:
                raise ValueError("MasterAdamW: the torch ops read lr and the step on the host, which a CUDA graph "
                                 "capture cannot; use the Triton kernel (backend='auto' with Triton installed)")
            if capturing and not torch.is_tensor(group["lr"]):  # fill_ with a float: a constant in every replay
                raise ValueError("MasterAdamW: capturing a step with a float lr would freeze it in the graph; make "
                                 "the group's lr a 0-d float32 tensor on the device (graph_step does)")
            steps = [self.state[p]["step"] for p in params]
            torch._foreach_add_(steps, 1.0)
            beta1, beta2 = group["betas"]
            lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
            if triton_path:
                if torch.is_tensor(lr):
                    if lr.device != params[0].device:
                        raise ValueError(f"MasterAdamW: lr is a tensor on {lr.device}, the parameters are on "
                                         f"{params[0].device} (the kernel reads it there)")
                    lr_device = lr
                else:
                    lr_device = group["lr_device"]
                    lr_device.fill_(lr)
                # log2 of the betas for the bias corrections (beta ** step as exp2); a beta of 0 (allowed, as in
                # torch's AdamW) is -inf: exp2(-inf * step) = 0, no correction left to make
                hyper = (beta1, beta2, *(math.log2(b) if b > 0 else -math.inf for b in (beta1, beta2)), eps, wd)
                for (lowp, summed, device, _), ps in self._launch_classes(params).items():
                    args = [self._kernel_args(p) for p in ps]  # (G, P, M, V, COPY, STEP, n) each
                    if TENSORS_PER_LAUNCH <= 1:
                        for g, w, m, v, copy, step, n in args:  # launched as is: the step is not traced
                            _master_adamw_kernel[(triton.cdiv(n, BLOCK),)](
                                g, w, m, v, copy, n, lr_device, step, self.grad_scale[device], *hyper,
                                BLOCK=BLOCK, HAS_COPY=lowp, ZERO_G=summed, num_warps=NUM_WARPS)
                        continue
                    for at in range(0, len(args), TENSORS_PER_LAUNCH):
                        chunk = args[at:at + TENSORS_PER_LAUNCH]
                        starts = [0]
                        for *_, n in chunk:
                            starts.append(starts[-1] + triton.cdiv(n, BLOCK))
                        gs, ws, ms, vs, copies, step_ts, ns = (tuple(column) for column in zip(*chunk))
                        _master_adamw_multi_kernel[(starts[-1],)](
                            gs, ws, ms, vs, copies, step_ts, ns, tuple(starts), lr_device, self.grad_scale[device],
                            *hyper, NT=len(chunk), BLOCK=BLOCK, HAS_COPY=lowp, ZERO_G=summed, num_warps=NUM_WARPS)
                if not capturing:  # the kernel wrote through pointers: tell autograd's version counters (decode
                    for p in params:  # caches built from the weights check them)
                        torch.autograd.graph.increment_version(p)
            else:
                for p in params:
                    st = self.state[p]
                    lowp = "master" in st
                    _torch_update(self._gradient(p), st["master"] if lowp else p, st["exp_avg"], st["exp_avg_sq"],
                                  p if lowp else None, float(lr), float(st["step"]), beta1, beta2, eps, wd,
                                  self.grad_scale[p.device] if self._clipped else None)
                    if p in self._summed:
                        st["grad_sum"].zero_()
        self._summed.clear()  # the sums are zero again: the next iteration's micro-steps start them
        if self._clipped:  # the coefficient served this step only (a graph captured with the clip replays both)
            for scale in self.grad_scale.values():
                scale.fill_(1.0)
            self._clipped = False
        return None


def check_supported(dtype: str, distributed: bool) -> Optional[str]:
    """Why MasterAdamW cannot train this run (None when it can): bf16 autocast, one process."""
    if dtype != "bfloat16":
        return f"dtype={dtype!r} (master weights need 'bfloat16')"
    if distributed:
        return "DDP/FSDP (the gradients would be reduced in bf16)"
    return None
