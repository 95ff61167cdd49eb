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
from typing import Dict, Optional, Sequence, Tuple

import torch

from model import GPT, GPTConfig, GroupedQueryAttention, LatentAttention, TuckerAttention


def head_factors(attn) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-head W_Q,i, W_K,i, W_V,i (nH, d, dH) and W_O,i (nH, dH, d) of an MHA/GQA/MLA layer: GQA's
    key/value heads repeated for the query heads they serve, MLA's products W_D? W_U?,i (for
    decoupled-RoPE MLA, the semantic part only)."""
    if isinstance(attn, GroupedQueryAttention):
        w = attn.per_head_weights()
        group = attn.n_head // attn.n_kv_head
        return w["W_Q"], w["W_K"].repeat_interleave(group, 0), w["W_V"].repeat_interleave(group, 0), w["W_O"]
    if isinstance(attn, LatentAttention):
        w = attn.per_head_weights()
        Wq = w["W_UQ"] if w["W_DQ"] is None else w["W_DQ"] @ w["W_UQ"]  # W_DQ W_UQ,i, or the full W_Q,i
        return Wq, w["W_DK"] @ w["W_UK"], w["W_DV"] @ w["W_UV"], w["W_O"]
    raise TypeError(f"head_factors needs an MHA/GQA/MLA layer, got {type(attn).__name__}")


def tucker_tensor(core: torch.Tensor, U1, U2, U3) -> torch.Tensor:
    """C x1 U1 x2 U2 x3 U3."""
    return torch.einsum("abc,ia,jb,kc->ijk", core, U1, U2, U3)


def attention_tensors(attn) -> Tuple[torch.Tensor, torch.Tensor]:
    """W (nH, d, d) with W_i = W_Q,i W_K,i^T, and W~ (nH, d, d) with W~_i = (W_V,i W_O,i)^T."""
    if isinstance(attn, TuckerAttention):  # Definition 2.1 itself, not the forward's per-head cores
        w = attn.per_head_weights()
        return (tucker_tensor(w["core"], w["U1"], w["U2"], w["U3"]),
                tucker_tensor(w["core_post"], w["U1_post"], w["U2_post"], w["U3_post"]))
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


def _concat_heads(W: torch.Tensor) -> torch.Tensor:
    """Per-head maps W_i (n, d, k) side by side: [W_1 | ... | W_n] (d, n k)."""
    return W.transpose(0, 1).reshape(W.size(1), -1)


def to_tucker_state(attn, config: GPTConfig) -> Dict[str, Optional[torch.Tensor]]:
    """The factors (TuckerAttention.per_head_weights names) of a TuckerAttention at `tucker_ranks_of(config)`
    that computes exactly what the MHA/GQA/MLA layer `attn` computes (U1 = U~1 = identity: the head
    mode is not compressed)."""
    _check_convertible(attn, config)
    nH, dH = attn.n_head, attn.head_dim
    w = attn.per_head_weights()
    Wo = w["W_O"]  # (nH, dH, d)
    d, dev, dt = Wo.size(2), Wo.device, Wo.dtype
    eye = lambda n: torch.eye(n, device=dev, dtype=dt)
    if isinstance(attn, GroupedQueryAttention):
        # Lemma B.1: U2 = W_Q, U3 = W_K, and C_i is the 0/1 selector pairing query dim (i, l)
        # with key dim (g(i), l) of head i's group g(i); likewise for values and outputs.
        nG = attn.n_kv_head
        core = torch.zeros(nH, d, nG * dH, device=dev, dtype=dt)
        for i in range(nH):
            g = i // (nH // nG)
            core[i, i * dH:(i + 1) * dH, g * dH:(g + 1) * dH] = eye(dH)
        state = dict(core=core, U1=eye(nH), U2=_concat_heads(w["W_Q"]), U3=_concat_heads(w["W_K"]),
                     core_post=core.clone(), U1_post=eye(nH), U2_post=_concat_heads(Wo.transpose(1, 2)),
                     U3_post=_concat_heads(w["W_V"]))
    elif isinstance(attn, LatentAttention):
        if attn.decoupled:
            raise ValueError("decoupled RoPE has no Tucker form (its rotary dims bypass the latent)")
        # Theorem B.4: U2 = W_DQ (identity for a full query), U3 = W_DK (W_DKV when shared),
        # C_i = W_UQ,i W_UK,i^T; post: U~3 = W_DV, U~2 = identity, C~_i = W_O,i^T W_UV,i^T.
        core = w["W_UQ"] @ w["W_UK"].transpose(1, 2)  # (nH, dcQ or d, dcK)
        core_post = Wo.transpose(1, 2) @ w["W_UV"].transpose(1, 2)  # (nH, d, dcK)
        U2 = w["W_DQ"] if w["W_DQ"] is not None else eye(d)
        state = dict(core=core, U1=eye(nH), U2=U2, U3=w["W_DK"],
                     core_post=core_post, U1_post=eye(nH), U2_post=eye(d), U3_post=w["W_DV"])
    else:
        raise TypeError(f"no exact Tucker conversion from {type(attn).__name__}")
    state["b_O"] = w["b_O"]
    return {k: None if v is None else v.detach().clone().contiguous() for k, v in state.items()}


def tucker_config_of(config: GPTConfig) -> GPTConfig:
    """The Tucker GPTConfig that represents `config`'s model exactly."""
    ranks, ranks_post = tucker_ranks_of(config)
    return replace(config, attn="tucker", tucker_ranks=ranks, tucker_ranks_post=ranks_post,
                   shared_kv=config.attn == "mla" and config.shared_kv, n_kv_head=None, q_rank=None,
                   kv_rank=None, mla_rope="decoupled", rope_head_dim=None)


def with_attention(source: GPT, config: GPTConfig, attention: Sequence[Dict[str, Optional[torch.Tensor]]]) -> GPT:
    """A GPT of `config` (eval mode, `source`'s dtype and device) with `source`'s weights outside the
    attention (embeddings, norms, MLPs) and in layer i the attention weights attention[i], a dict
    as the new attention class's per_head_weights() names them."""
    p = next(source.parameters())
    with torch.device(p.device):
        model = GPT(config)
    model.to(p.dtype)
    state = {k: v for k, v in source.state_dict().items() if ".attn." not in k}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if ".attn." not in k]
    if missing or unexpected:
        raise ValueError(f"{config.attn} model and its source differ outside the attention: "
                         f"missing {missing}, unexpected {unexpected}")
    for block, weights in zip(model.transformer.h, attention, strict=True):
        block.attn.load_per_head_weights(weights)
    return model.eval()


@torch.no_grad()
def to_tucker(model: GPT) -> GPT:
    """A Tucker GPT with the same function as `model` (MHA, GQA or MLA), at the exact ranks."""
    if model.config.attn == "tucker":
        raise ValueError("model is already Tucker")
    _check_convertible(model.transformer.h[0].attn, model.config)  # the reason first (the Tucker config's own
    # check named a rank: decoupled RoPE's odd kv_rank as an odd tucker_ranks[2])
    return with_attention(model, tucker_config_of(model.config),
                          [to_tucker_state(block.attn, model.config) for block in model.transformer.h])
