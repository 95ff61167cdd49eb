"""
The paper's tensor view of attention, as code.

Every attention layer defines a pre-softmax tensor W (nH, d, d), W_i = W_Q,i W_K,i^T, and a
post-softmax tensor W~ (nH, d, d), W~_i = (W_V,i W_O,i)^T (eqs. W_tensor_form, W_til_tensor_form).
This module builds them for every variant (`attention_tensors`) and converts MHA, GQA and MLA
layers exactly into Tucker form at the ranks of section 2.2 / appendix B:

    MHA          -> Tucker (nH, d, d)                   Lemma B.1 / Theorem B.2
    GQA (nG)     -> Tucker (nH, d, nG dH)               Theorem B.3
    MLA          -> Tucker (nH, dcQ, dcK), post (nH, d, dcK)   Theorem B.4 (shared KV stays shared)

Math convention: x is a row vector, q = x W_Q. torch's nn.Linear stores weight = W^T (out, in).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, Tuple

import torch

from model import GPT, GPTConfig, GroupedQueryAttention, LatentAttention, TuckerAttention


def _blocks(n_head: int, head_dim: int):
    return [slice(i * head_dim, (i + 1) * head_dim) for i in range(n_head)]


def head_factors(attn) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-head W_Q,i, W_K,i, W_V,i (nH, d, dH) and W_O,i (nH, dH, d) of an MHA/GQA/MLA layer
    (for decoupled-RoPE MLA, the semantic part only)."""
    if isinstance(attn, GroupedQueryAttention):
        nH, nG, dH = attn.n_head, attn.n_kv_head, attn.head_dim
        Wq, Wk, Wv = attn.c_attn.weight.split([nH * dH, nG * dH, nG * dH], dim=0)  # (out, d) each
        group = nH // nG
        Wq = Wq.view(nH, dH, -1).transpose(1, 2)  # (nH, d, dH)
        Wk = Wk.view(nG, dH, -1).transpose(1, 2).repeat_interleave(group, dim=0)  # (nH, d, dH)
        Wv = Wv.view(nG, dH, -1).transpose(1, 2).repeat_interleave(group, dim=0)
    elif isinstance(attn, LatentAttention):
        nH, dH = attn.n_head, attn.head_dim
        up = lambda lin: lin.weight.view(nH, dH, -1)  # (nH, dH, r): W_U?,i^T
        Wq = up(attn.q_up).transpose(1, 2)  # (nH, dcQ or d, dH)
        if attn.q_down is not None:
            Wq = attn.q_down.weight.t() @ Wq  # W_DQ W_UQ,i: (nH, d, dH)
        Wk = attn.k_down.weight.t() @ up(attn.k_up).transpose(1, 2)  # W_DK W_UK,i
        v_down = attn.k_down if attn.shared_kv else attn.v_down
        Wv = v_down.weight.t() @ up(attn.v_up).transpose(1, 2)  # W_DV W_UV,i
    else:
        raise TypeError(f"head_factors needs an MHA/GQA/MLA layer, got {type(attn).__name__}")
    Wo = attn.c_proj.weight.t().reshape(attn.n_head, attn.head_dim, -1)  # (nH, dH, d)
    return Wq, Wk, Wv, Wo


def tucker_tensor(core: torch.Tensor, U1, U2, U3) -> torch.Tensor:
    """C x1 U1 x2 U2 x3 U3."""
    return torch.einsum("abc,ia,jb,kc->ijk", core, U1, U2, U3)


def attention_tensors(attn) -> Tuple[torch.Tensor, torch.Tensor]:
    """W (nH, d, d) with W_i = W_Q,i W_K,i^T, and W~ (nH, d, d) with W~_i = (W_V,i W_O,i)^T."""
    if isinstance(attn, TuckerAttention):
        U3_post = attn.U3 if attn.shared_kv else attn.U3_post
        return (tucker_tensor(attn.core, attn.U1, attn.U2, attn.U3),
                tucker_tensor(attn.core_post, attn.U1_post, attn.U2_post, U3_post))
    Wq, Wk, Wv, Wo = head_factors(attn)
    return Wq @ Wk.transpose(1, 2), (Wv @ Wo).transpose(1, 2)


# ----------------------------------------------------------------------------------------
# Exact conversions to Tucker form


def _check_convertible(attn, config: GPTConfig):
    biases = [n for n, p in attn.named_parameters() if n.endswith("bias") and not n.startswith("c_proj")]
    if biases:
        raise ValueError(f"exact Tucker conversion needs bias=False inside the attention (found {biases})")
    if config.pos_emb == "rope" and not (config.attn == "mla" and config.mla_rope == "latent"):
        raise ValueError("exact Tucker conversion keeps positions only for learned embeddings or MLA latent RoPE: "
                         f"attn={config.attn!r} with pos_emb='rope' rotates in another space than Tucker's latent")


def tucker_ranks_of(config: GPTConfig) -> Tuple[Tuple[int, int, int], Tuple[int, int, int]]:
    """The Tucker ranks at which a layer of `config` is represented exactly (section 2.2)."""
    d, nH, dH = config.n_embd, config.n_head, config.head_dim
    if config.attn in ("mha", "gqa"):
        r3 = (config.n_kv_head or nH) * dH
        return (nH, d, r3), (nH, d, r3)
    if config.attn == "mla":
        return (nH, config.q_rank or d, config.kv_rank), (nH, d, config.kv_rank)
    return config.tucker_ranks, config.tucker_ranks_post


def to_tucker_state(attn, config: GPTConfig) -> Dict[str, torch.Tensor]:
    """Parameters of a TuckerAttention at `tucker_ranks_of(config)` that computes exactly what
    the MHA/GQA/MLA layer `attn` computes (U1 = U~1 = identity: the head mode is not compressed)."""
    _check_convertible(attn, config)
    nH, dH = attn.n_head, attn.head_dim
    d = attn.c_proj.out_features
    dev, dt = attn.c_proj.weight.device, attn.c_proj.weight.dtype
    eye = lambda n: torch.eye(n, device=dev, dtype=dt)
    if isinstance(attn, GroupedQueryAttention):
        # Lemma B.1: U2 = W_Q, U3 = W_K, and C_i is the 0/1 selector pairing query dim (i, l)
        # with key dim (g(i), l) of head i's group g(i); likewise for values and outputs.
        nG = attn.n_kv_head
        Wq, Wk, Wv = attn.c_attn.weight.split([nH * dH, nG * dH, nG * dH], dim=0)
        core = torch.zeros(nH, d, nG * dH, device=dev, dtype=dt)
        for i in range(nH):
            g = i // (nH // nG)
            core[i, i * dH:(i + 1) * dH, g * dH:(g + 1) * dH] = eye(dH)
        state = dict(core=core, U1=eye(nH), U2=Wq.t(), U3=Wk.t(),
                     core_post=core.clone(), U1_post=eye(nH), U2_post=attn.c_proj.weight.clone(), U3_post=Wv.t())
    elif isinstance(attn, LatentAttention):
        if attn.decoupled:
            raise ValueError("decoupled RoPE has no Tucker form (its rotary dims bypass the latent)")
        # Theorem B.4: U2 = W_DQ (identity for a full query), U3 = W_DK (W_DKV when shared),
        # C_i = W_UQ,i W_UK,i^T; post: U~3 = W_DV, U~2 = identity, C~_i = W_O,i^T W_UV,i^T.
        up = lambda lin: lin.weight.view(nH, dH, -1)  # (nH, dH, r)
        core = up(attn.q_up).transpose(1, 2) @ up(attn.k_up)  # (nH, dcQ or d, dcK)
        Wo_T = attn.c_proj.weight.view(d, nH, dH).permute(1, 0, 2)  # (nH, d, dH): W_O,i^T
        core_post = Wo_T @ up(attn.v_up)  # (nH, d, dcK)
        U2 = attn.q_down.weight.t() if attn.q_down is not None else eye(d)
        state = dict(core=core, U1=eye(nH), U2=U2, U3=attn.k_down.weight.t(),
                     core_post=core_post, U1_post=eye(nH), U2_post=eye(d))
        if not attn.shared_kv:
            state["U3_post"] = attn.v_down.weight.t()
    else:
        raise TypeError(f"no exact Tucker conversion from {type(attn).__name__}")
    if attn.c_proj.bias is not None:
        state["bias"] = attn.c_proj.bias
    return {k: v.detach().clone().contiguous() for k, v in state.items()}


def tucker_config_of(config: GPTConfig) -> GPTConfig:
    """The Tucker GPTConfig that represents `config`'s model exactly."""
    ranks, ranks_post = tucker_ranks_of(config)
    return replace(config, attn="tucker", tucker_ranks=ranks, tucker_ranks_post=ranks_post,
                   shared_kv=config.attn == "mla" and config.shared_kv, n_kv_head=None, q_rank=None,
                   kv_rank=None, mla_rope="decoupled", rope_head_dim=None)


@torch.no_grad()
def to_tucker(model: GPT) -> GPT:
    """A Tucker GPT with the same function as `model` (MHA, GQA or MLA), at the exact ranks."""
    if model.config.attn == "tucker":
        raise ValueError("model is already Tucker")
    config = tucker_config_of(model.config)
    p = next(model.parameters())
    with torch.device(p.device):
        tucker = GPT(config).to(p.dtype)
    state = {k: v for k, v in model.state_dict().items() if ".attn." not in k}
    for i, block in enumerate(model.transformer.h):
        for name, value in to_tucker_state(block.attn, model.config).items():
            state[f"transformer.h.{i}.attn.{name}"] = value
    tucker.load_state_dict(state, strict=True)
    return tucker
