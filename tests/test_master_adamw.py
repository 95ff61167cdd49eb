"""master_adamw.MasterAdamW: AdamW over float32 masters of a model whose matrices it turns bf16.

Properties: the masters follow torch's AdamW fed the same (bf16) gradients, and each bf16 matrix is its master
rounded; vectors stay float32 and take AdamW's update; the clip folded into the step is torch's clip over the float32
gradients, for one step; micro-steps' gradients are summed in float32 (a bf16 sum would fail the same comparison) and
the sums are zeroed by the step or by zero_grad; the model's state_dict with the masters in place is the float32 one;
state_dict has AdamW's layout both ways, and a run rebuilt from its checkpoint (masters = the saved float32 weights)
continues exactly, also through train.py, with either value of master_weights; a tiny GPT trains (loss goes down) with
its residual stream in float32; each group's own lr, betas and eps are used (and lr may change between steps); a
consumed gradient sum serves one step; the masters are the optimizer's own copies; configure_optimizers gives it
AdamW's groups, and train.py clips through its clip; errors name what is wrong. CPU: the torch ops, and the Triton
kernels (a launch per tensor, and the multi-tensor kernel, which bump the version counters) through the interpreter
(tests/interpreted.py); CUDA (skipped without a GPU): the kernels against the torch ops, graph_step's replays against
plain iterations, and train.py's runs graphed, plain and under autocast.
"""
import copy

import pytest
import torch

import master_adamw as ma
from interpreted import needs_child

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
HYPER = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
# float32 results of the same update by two paths on the CPU: a few ulps of weights of magnitude up to ~4 (torch's
# CPU elementwise ops now and then round ~half the elements differently in a process's first update: seen in about 1
# run in 8, 3 ulps; an update is ~3e-3, so a wrong one is far outside this)
F32 = dict(rtol=1e-6, atol=1e-6)


def make_params(device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.nn.Parameter(torch.randn(37, 65, generator=g).to(device))  # a matrix: bf16 in the model
    b = torch.nn.Parameter(torch.randn(65, generator=g).to(device))  # a vector: stays float32
    return w, b


def grads(step, device="cpu"):
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(37, 65, generator=g) * 0.1).to(device), (torch.randn(65, generator=g) * 0.1).to(device)


CLIP = 1.0  # below the gradients' norm (about 5): clipping scales them


def run_master(steps, backend="torch", device="cpu", lr_tensor=False, clip_steps=()):
    """`steps` updates of make_params' tensors by grads(); on clip_steps the optimizer's clip_grad_norm_(CLIP) first.
    Returns the parameters, the optimizer and the total norms the clips returned."""
    w, b = make_params(device)
    opt = ma.MasterAdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
                         backend=backend, **HYPER)
    if lr_tensor:
        for group in opt.param_groups:
            group["lr"] = torch.full((), HYPER["lr"], device=device)
    norms = []
    for s in range(steps):
        gw, gb = grads(s, device)
        w.grad, b.grad = gw.to(torch.bfloat16), gb
        if s in clip_steps:
            norms.append(opt.clip_grad_norm_(CLIP))
        opt.step()
    return w, b, opt, norms


def run_adamw(steps, device="cpu", clip_steps=()):
    w, b = make_params(device)
    opt = torch.optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
                            foreach=False, **HYPER)
    norms = []
    for s in range(steps):
        gw, gb = grads(s, device)
        w.grad, b.grad = gw.to(torch.bfloat16).float(), gb  # the gradients the bf16 model would give
        if s in clip_steps:
            norms.append(torch.nn.utils.clip_grad_norm_([w, b], CLIP))
        opt.step()
    return w, b, opt, norms


def train(model, opt, batches, device="cpu"):
    """Plain iterations under bf16 autocast, as train.py steps: their losses."""
    losses = []
    for x, y in batches:
        with torch.autocast(device, dtype=torch.bfloat16):
            _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_masters_follow_torch_adamw():
    w, b, opt, _ = run_master(6)
    w_ref, b_ref, ref, _ = run_adamw(6)
    assert w.dtype == torch.bfloat16 and b.dtype == torch.float32
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    assert torch.equal(w.detach(), opt.master(w).to(torch.bfloat16))  # the model's copy: its master rounded
    for p, q in ((w, w_ref), (b, b_ref)):  # torch's lerp for exp_avg rounds differently near 0: atol
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], ref.state[q][key], rtol=1e-6, atol=1e-8)


def micro_grads(step, micro, device="cpu"):
    g = torch.Generator().manual_seed(1000 + 10 * step + micro)
    return (torch.randn(37, 65, generator=g) * 0.1).to(device), (torch.randn(65, generator=g) * 0.1).to(device)


def run_micro(steps, micro_steps, backend="torch", device="cpu", summed=True, clip=False):
    """`steps` iterations of `micro_steps` backward passes each (the matrix's gradient bf16, the vector's float32),
    through MasterAdamW built for micro_steps (summed=True) or for one (summed=False: the bf16 gradients add in
    bf16 in p.grad); clip: clip_grad_norm_(CLIP) before each step."""
    w, b = make_params(device)
    opt = ma.MasterAdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
                         backend=backend, micro_steps=micro_steps if summed else 1, **HYPER)
    for s in range(steps):
        for micro in range(micro_steps):
            gw, gb = micro_grads(s, micro, device)
            ((w.float() * gw).sum() + (b * gb).sum()).backward()  # w's gradient: gw in bf16
        if clip:
            opt.clip_grad_norm_(CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return w, b, opt


def test_micro_steps_sum_in_float32():
    """micro_steps=3: the optimizer follows AdamW fed the float32 sum of the three bf16 gradients (with the clip);
    a bf16 sum in p.grad (micro_steps=1) would not."""
    w, b, opt = run_micro(4, 3, clip=True)
    w_ref, b_ref = make_params()
    ref = torch.optim.AdamW([{"params": [w_ref], "weight_decay": 0.1}, {"params": [b_ref], "weight_decay": 0.0}],
                            foreach=False, **HYPER)
    for s in range(4):
        pairs = [micro_grads(s, m) for m in range(3)]
        w_ref.grad = sum(gw.to(torch.bfloat16).float() for gw, _ in pairs)
        b_ref.grad = sum(gb for _, gb in pairs)
        torch.nn.utils.clip_grad_norm_([w_ref, b_ref], CLIP)
        ref.step()
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    assert not opt.state[w]["grad_sum"].any() and w.grad is None  # zeroed by the step; never left in p.grad
    w_bf16, _, opt_bf16 = run_micro(4, 3, summed=False, clip=True)
    assert not torch.allclose(opt_bf16.master(w_bf16), w_ref.detach(), **F32)


def test_zero_grad_drops_an_unstepped_sum_and_clip():
    w, b = make_params()
    opt = ma.MasterAdamW([w, b], micro_steps=2, **HYPER)
    (w.float().sum() + b.sum()).backward()
    assert w.grad is None and opt.state[w]["grad_sum"].abs().sum() == w.numel()
    opt.clip_grad_norm_(CLIP)
    assert all(float(s) < 1.0 for s in opt.grad_scale.values())
    opt.zero_grad()
    assert not opt.state[w]["grad_sum"].any() and b.grad is None
    assert all(float(s) == 1.0 for s in opt.grad_scale.values())  # the coefficient went with the gradients
    opt.step()  # nothing to do: no gradient
    assert float(opt.state[w]["step"]) == 0.0


def test_clip_folded_into_the_step_is_torchs_clip():
    """clip_grad_norm_ then step against torch's clip_grad_norm_ over the float32 gradients then AdamW: the same
    norms and masters; the coefficient serves one step (steps 0, 3, 4, 5 unclipped)."""
    w, b, opt, norms = run_master(6, clip_steps=(1, 2))
    w_ref, b_ref, ref, ref_norms = run_adamw(6, clip_steps=(1, 2))
    assert all(float(n) > 2 * CLIP for n in ref_norms)  # the clip scaled these steps
    torch.testing.assert_close(torch.stack(norms), torch.stack(ref_norms), rtol=1e-6, atol=0)
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    assert all(float(s) == 1.0 for s in opt.grad_scale.values())
    u, _, uopt, _ = run_master(6)  # and the clip changed the result
    assert not torch.allclose(opt.master(w), uopt.master(u), rtol=0, atol=1e-3)


def test_state_dict_is_adamw_layout_both_ways():
    w, b, opt, _ = run_master(3)
    _, _, ref, _ = run_adamw(3)
    sd, ref_sd = opt.state_dict(), ref.state_dict()
    assert sd["state"].keys() == ref_sd["state"].keys()
    for i in sd["state"]:
        assert set(sd["state"][i]) == set(ref_sd["state"][i]) == {"step", "exp_avg", "exp_avg_sq"}
        assert float(sd["state"][i]["step"]) == float(ref_sd["state"][i]["step"]) == 3.0
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in ref_sd["param_groups"]]
    assert isinstance(sd["param_groups"][0]["lr"], float)
    # AdamW's state_dict loads into a MasterAdamW (a run that switches optimizers resumes its moments and step)
    w2, b2 = make_params()
    opt2 = ma.MasterAdamW([{"params": [w2], "weight_decay": 0.1}, {"params": [b2], "weight_decay": 0.0}], **HYPER)
    opt2.load_state_dict(ref_sd)
    assert float(opt2.state[w2]["step"]) == float(opt2.state[b2]["step"]) == 3.0
    torch.testing.assert_close(opt2.state[w2]["exp_avg"], ref.state[ref.param_groups[0]["params"][0]]["exp_avg"])
    # and a MasterAdamW's into AdamW
    w3, b3 = make_params()
    adamw = torch.optim.AdamW([{"params": [w3], "weight_decay": 0.1}, {"params": [b3], "weight_decay": 0.0}], **HYPER)
    adamw.load_state_dict(sd)
    torch.testing.assert_close(adamw.state[w3]["exp_avg_sq"], opt.state[w]["exp_avg_sq"])


def test_a_parameter_without_a_gradient_keeps_its_own_step():
    """AdamW counts each parameter's steps and skips one without a gradient: the vector, gradient-free for two
    steps, is then updated as AdamW updates it (its own bias corrections), and has no state until then."""
    w, b = make_params()
    w_ref, b_ref = make_params()
    opt = ma.MasterAdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}], **HYPER)
    ref = torch.optim.AdamW([{"params": [w_ref], "weight_decay": 0.1}, {"params": [b_ref], "weight_decay": 0.0}],
                            foreach=False, **HYPER)
    for s in range(5):
        gw, gb = grads(s)
        w.grad, w_ref.grad = gw.to(torch.bfloat16), gw.to(torch.bfloat16).float()
        b.grad = b_ref.grad = None if s < 2 else gb
        if s == 1:
            assert 1 not in opt.state_dict()["state"] and 1 not in ref.state_dict()["state"]
        opt.step()
        ref.step()
    assert float(opt.state[b]["step"]) == float(ref.state[b_ref]["step"]) == 3.0
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)


def test_load_state_dict_takes_hyperparameters_and_refuses_what_it_cannot():
    w, b, opt, _ = run_master(2)
    sd = opt.state_dict()
    sd["param_groups"][0].update(lr=1e-5, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.3)
    w2, b2 = make_params()
    opt2 = ma.MasterAdamW([{"params": [w2], "weight_decay": 0.1}, {"params": [b2], "weight_decay": 0.0}], **HYPER)
    opt2.load_state_dict(sd)
    g = opt2.param_groups[0]
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"]) == (1e-5, (0.8, 0.9), 1e-6, 0.3)
    for flag in ("amsgrad", "maximize"):
        bad = copy.deepcopy(sd)
        bad["param_groups"][1][flag] = True
        with pytest.raises(ValueError, match=f"{flag}=True"):
            opt2.load_state_dict(bad)
    bad = copy.deepcopy(sd)
    bad["state"][0]["exp_avg"] = torch.zeros(65)
    with pytest.raises(ValueError, match=r"exp_avg of shape \(65,\) for a parameter of shape \(37, 65\)"):
        opt2.load_state_dict(bad)


def test_a_device_lr_is_saved_as_a_float_and_loaded_into_the_same_tensor():
    """graph_step's lr (a 0-d tensor the captured step reads): state_dict saves its value as a float (not the live
    tensor: a later change of the rate leaves the saved state as it was), and load_state_dict writes the saved rate
    into that same tensor (a captured graph goes on reading it), as float lrs are loaded as floats."""
    w, b, opt, _ = run_master(2, lr_tensor=True)
    sd = opt.state_dict()
    for group in opt.param_groups:
        group["lr"].fill_(1e-4)
    assert [type(g["lr"]) for g in sd["param_groups"]] == [float, float]
    assert [g["lr"] for g in sd["param_groups"]] == pytest.approx([HYPER["lr"]] * 2)
    tensors = [group["lr"] for group in opt.param_groups]
    opt.load_state_dict(sd)
    assert all(group["lr"] is t for group, t in zip(opt.param_groups, tensors))
    assert [float(t) for t in tensors] == pytest.approx([HYPER["lr"]] * 2)


def test_a_clip_above_the_norm_changes_nothing():
    """clip_grad_norm_ with max_norm above the gradients' norm (torch's coefficient min(1, ...)) leaves the step as
    it is without the clip: gradients are never scaled up."""
    u, v, uopt, _ = run_master(3)
    w2, b2 = make_params()
    opt2 = ma.MasterAdamW([{"params": [w2], "weight_decay": 0.1}, {"params": [b2], "weight_decay": 0.0}], **HYPER)
    for s in range(3):
        gw, gb = grads(s)
        w2.grad, b2.grad = gw.to(torch.bfloat16), gb
        assert float(opt2.clip_grad_norm_(1e3)) < 1e3
        opt2.step()
    assert torch.equal(opt2.master(w2), uopt.master(u)) and torch.equal(b2.detach(), v.detach())


def test_load_state_dict_starts_a_parameter_without_saved_state_fresh():
    """A parameter the loaded state has no entry for starts as torch's AdamW starts it: step and both moments zero
    (not this optimizer's own moments from the steps it took before the load)."""
    w, b, opt, _ = run_master(3)
    assert opt.state[b]["exp_avg"].any()
    sd = opt.state_dict()
    del sd["state"][1]  # the vector's
    opt.load_state_dict(sd)
    st = opt.state[b]
    assert float(st["step"]) == 0 and not st["exp_avg"].any() and not st["exp_avg_sq"].any()
    assert float(opt.state[w]["step"]) == 3


@pytest.mark.parametrize("betas", [(0.0, 0.99), (0.9, 0.0)])
def test_a_beta_of_zero_is_torchs_adamw(betas, monkeypatch):
    """beta1 = 0 (no momentum) or beta2 = 0, which train.py allows as torch's AdamW does: the same update."""
    monkeypatch.setitem(HYPER, "betas", betas)
    w, b, opt, _ = run_master(3)
    w_ref, b_ref, _, _ = run_adamw(3)
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)


def test_load_model_state_dict_sets_the_masters():
    """Weights loaded into a converted model through the optimizer reach the masters unrounded (and the bf16
    copies rounded); the next step starts from them."""
    from model import GPT, GPTConfig
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64, bias=True)
    torch.manual_seed(0)
    source = GPT(cfg).state_dict()
    torch.manual_seed(1)
    model = GPT(cfg)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu", master_weights=True)
    opt.load_model_state_dict(model, source)
    saved = opt.model_state_dict(model)
    assert all(torch.equal(saved[k], source[k]) for k in source)
    wte = model.transformer.wte.weight
    assert wte.dtype == torch.bfloat16 and torch.equal(wte, source["transformer.wte.weight"].to(torch.bfloat16))


def test_resume_from_checkpoint_continues_exactly():
    """Five steps straight against three, a checkpoint (model_state_dict's float32 weights and state_dict), a model
    and optimizer rebuilt from it, and two more: the same masters, moments and bf16 weights, bit for bit."""
    from model import GPT, GPTConfig
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64, bias=True)
    batch = (torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16)))

    torch.manual_seed(0)
    straight = GPT(cfg)
    half = copy.deepcopy(straight)
    opt = straight.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu", master_weights=True)
    train(straight, opt, [batch] * 5)
    opt_half = half.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu", master_weights=True)
    train(half, opt_half, [batch] * 3)
    checkpoint = copy.deepcopy({"model": opt_half.model_state_dict(half), "optimizer": opt_half.state_dict()})
    assert all(v.dtype == torch.float32 for v in checkpoint["model"].values() if v.is_floating_point())
    resumed = GPT(cfg)
    resumed.load_state_dict(checkpoint["model"])  # float32, before the optimizer converts it
    opt_resumed = resumed.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu", master_weights=True)
    opt_resumed.load_state_dict(checkpoint["optimizer"])
    train(resumed, opt_resumed, [batch] * 2)
    for (name, p), q in zip(straight.named_parameters(), resumed.parameters()):
        assert torch.equal(p, q), name
        assert torch.equal(opt.master(p), opt_resumed.master(q)), name
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], opt_resumed.state[q][key]), (name, key)


def test_model_converted_trains_with_a_float32_stream():
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=128, bias=False))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt = model.configure_optimizers(0.1, 3e-3, (0.9, 0.95), "cpu", master_weights=True)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    assert matrices and all(p.dtype == torch.bfloat16 for p in matrices)
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.dim() < 2)
    masters = opt.model_state_dict(model)
    assert masters.keys() == before.keys() and all(torch.equal(masters[k], before[k]) for k in before)
    streams = []
    model.transformer.h[0].register_forward_pre_hook(lambda m, args: streams.append(args[0].dtype))
    x = torch.randint(0, 128, (4, 32))
    y = torch.roll(x, -1, dims=1)  # a learnable target: the next token of a fixed batch
    losses = train(model, opt, [(x, y)] * 30)
    assert set(streams) == {torch.float32}  # the embeddings promoted: the residual stream is not bf16
    assert losses[-1] < 0.5 * losses[0]


def test_each_groups_own_lr_betas_and_eps_are_torchs_adamw():
    """Groups with their own lr, betas and eps (none the constructor's defaults), lr changed between steps as train.py's
    schedule does, and an eps large enough to weigh in the update: AdamW's masters and vectors."""
    w, b = make_params()
    w_ref, b_ref = make_params()
    groups = [dict(weight_decay=0.1, lr=1e-2, betas=(0.8, 0.9), eps=1e-2), dict(weight_decay=0.0, lr=2e-3,
                                                                              betas=(0.7, 0.95), eps=3e-2)]
    opt = ma.MasterAdamW([{"params": [w], **groups[0]}, {"params": [b], **groups[1]}], **HYPER)
    ref = torch.optim.AdamW([{"params": [w_ref], **groups[0]}, {"params": [b_ref], **groups[1]}], foreach=False,
                            **HYPER)
    for s in range(4):
        for o in (opt, ref):
            for group, scale in zip(o.param_groups, (1.0, 0.5)):
                group["lr"] = [1e-2, 3e-2, 5e-3, 2e-2][s] * scale
        gw, gb = grads(s)
        w.grad, b.grad = gw.to(torch.bfloat16), gb
        w_ref.grad, b_ref.grad = gw.to(torch.bfloat16).float(), gb
        opt.step()
        ref.step()
    torch.testing.assert_close(opt.master(w), w_ref.detach(), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)


def test_state_dict_numbers_parameters_as_adamw_does_and_is_a_snapshot():
    """A first parameter without a gradient (no state) still takes its number, as in AdamW's state_dict (the others'
    states under the same keys); the groups hold AdamW's keys (not the optimizer's own device lr); and the saved
    steps are copies: steps taken after state_dict leave them as saved."""
    w, b = make_params()
    w_ref, b_ref = make_params()
    opt = ma.MasterAdamW([{"params": [b], "weight_decay": 0.0}, {"params": [w], "weight_decay": 0.1}], **HYPER)
    ref = torch.optim.AdamW([{"params": [b_ref], "weight_decay": 0.0}, {"params": [w_ref], "weight_decay": 0.1}],
                            foreach=False, **HYPER)
    for s in range(2):
        gw, _ = grads(s)
        w.grad, w_ref.grad = gw.to(torch.bfloat16), gw.to(torch.bfloat16).float()
        opt.step()
        ref.step()
    sd, ref_sd = opt.state_dict(), ref.state_dict()
    assert sd["state"].keys() == ref_sd["state"].keys() == {1}
    assert [g["params"] for g in sd["param_groups"]] == [g["params"] for g in ref_sd["param_groups"]] == [[0], [1]]
    assert [set(g) for g in sd["param_groups"]] == [set(g) for g in ref_sd["param_groups"]]
    torch.testing.assert_close(sd["state"][1]["exp_avg_sq"], ref_sd["state"][1]["exp_avg_sq"], rtol=1e-6, atol=1e-8)
    w.grad = grads(2)[0].to(torch.bfloat16)
    opt.step()
    assert float(opt.state[w]["step"]) == 3.0 and float(sd["state"][1]["step"]) == 2.0


def test_clip_without_gradients_is_zero_and_changes_nothing():
    """clip_grad_norm_ before any gradient (torch's clip of no gradients): a total norm of 0, and the step after it
    updates nothing."""
    w, b = make_params()
    opt = ma.MasterAdamW([w, b], **HYPER)
    before = opt.master(w).clone(), b.detach().clone()
    assert float(opt.clip_grad_norm_(CLIP)) == 0.0
    opt.step()
    assert torch.equal(opt.master(w), before[0]) and torch.equal(b.detach(), before[1])
    assert float(opt.state[w]["step"]) == float(opt.state[b]["step"]) == 0.0


def test_a_summed_gradient_serves_one_step():
    """micro_steps=2: a step consumes the float32 sums. A second step with no backward (nor zero_grad) in between
    finds no gradient for the matrix and leaves it as it was, its step not counted (not a step on a zero sum), while
    the vector, whose p.grad stays, is stepped again as AdamW would step it."""
    w, b = make_params()
    opt = ma.MasterAdamW([w, b], micro_steps=2, **HYPER)
    for micro in range(2):
        gw, gb = micro_grads(0, micro)
        ((w.float() * gw).sum() + (b * gb).sum()).backward()
    opt.step()
    master = opt.master(w).clone()
    opt.step()
    assert torch.equal(opt.master(w), master) and float(opt.state[w]["step"]) == 1.0
    assert float(opt.state[b]["step"]) == 2.0


def test_the_masters_are_the_optimizers_own():
    """The masters are copies of the float32 weights given: a tensor the caller kept of them (the model's state_dict
    taken before the conversion) is left as it was by the steps."""
    w, b = make_params()
    kept = w.detach()  # shares the float32 storage the optimizer converts from
    before = kept.clone()
    opt = ma.MasterAdamW([w, b], **HYPER)
    w.grad, b.grad = grads(0)[0].to(torch.bfloat16), grads(0)[1]
    opt.step()
    assert not torch.equal(opt.master(w), before) and torch.equal(kept, before)


def test_configure_optimizers_master_weights_has_adamws_groups():
    """model.configure_optimizers(master_weights=True): the groups plain AdamW gets (the same parameters, weight decay
    on the matrices only) with the run's lr, betas and eps."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=64, bias=True))
    plain = copy.deepcopy(model).configure_optimizers(0.2, 4e-3, (0.85, 0.9), "cpu")
    opt = model.configure_optimizers(0.2, 4e-3, (0.85, 0.9), "cpu", master_weights=True)
    assert isinstance(opt, ma.MasterAdamW) and len(opt.param_groups) == len(plain.param_groups) == 2
    for g, ref in zip(opt.param_groups, plain.param_groups):
        assert [p.shape for p in g["params"]] == [p.shape for p in ref["params"]]
        for key in ("lr", "betas", "eps", "weight_decay"):
            assert g[key] == ref[key], key
    assert [g["weight_decay"] for g in opt.param_groups] == [0.2, 0.0]
    assert all(p.dim() >= 2 for p in opt.param_groups[0]["params"])


def test_errors():
    w = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="float32 parameters"):
        ma.MasterAdamW([w])
    with pytest.raises(ValueError, match="backend='bogus'"):
        ma.MasterAdamW(list(make_params()), backend="bogus")
    w, b = make_params()
    opt = ma.MasterAdamW([w, b])
    with pytest.raises(ValueError, match="closure"):
        opt.step(lambda: 0.0)
    with pytest.raises(ValueError, match="do not match"):
        opt.load_state_dict(torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))]).state_dict())
    if not ma._interpret():  # the CPU without the interpreter: a forced kernel is an error
        w2, b2 = make_params()
        forced = ma.MasterAdamW([w2, b2], backend="triton")
        w2.grad, b2.grad = torch.zeros_like(w2), torch.zeros_like(b2)
        with pytest.raises(ValueError, match="cannot run on cpu"):
            forced.step()
    with pytest.raises(ValueError, match="micro_steps=0"):
        ma.MasterAdamW(list(make_params()), micro_steps=0)
    assert "dtype='float16'" in ma.check_supported("float16", False)
    assert "DDP" in ma.check_supported("bfloat16", True)
    assert ma.check_supported("bfloat16", False) is None


# ----------------------------------------------------------------------------------------
# train.py with master_weights=True (CPU: bf16 autocast, the torch ops)

TRAIN_ARGS = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--vocab_size=64", "--batch_size=2",
              "--bias=False", "--device=cpu", "--compile=False", "--dtype=bfloat16", "--eval_iters=2",
              "--log_interval=1", "--eval_interval=4", "--warmup_iters=0", "--lr_decay_iters=8", "--learning_rate=1e-3",
              "--grad_clip=0.05"]  # a clip that scales every step


def train_py(out, data, *extra):
    """train.main over TRAIN_ARGS: the checkpoint and the logged losses by iteration."""
    import json

    import train as train_module
    train_module.main([*TRAIN_ARGS, f"--data_dir={data}", f"--out_dir={out}", *extra])
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return (torch.load(out / "ckpt.pt", map_location="cpu", weights_only=False),
            {r["iter"]: r["loss"] for r in log if "loss" in r})


@pytest.mark.parametrize("accum", [1, 2])
def test_train_py_master_weights_checkpoints_float32_and_resumes_exactly(accum, small_data, tmp_path):
    master = ["--master_weights=True", f"--gradient_accumulation_steps={accum}"]
    straight, losses = train_py(tmp_path / "straight", small_data, "--max_iters=8", *master)
    assert all(v.dtype == torch.float32 for v in straight["model"].values() if v.is_floating_point())
    half = tmp_path / "half"
    train_py(half, small_data, "--max_iters=4", *master)
    copied = tmp_path / "copied"
    copied.mkdir()
    (copied / "ckpt.pt").write_bytes((half / "ckpt.pt").read_bytes())
    resumed, resumed_losses = train_py(half, small_data, "--max_iters=8", *master, "--init_from=resume")
    for k, v in straight["model"].items():
        assert torch.equal(v, resumed["model"][k]), k
    assert [resumed_losses[i] for i in range(5, 9)] == [losses[i] for i in range(5, 9)]
    # the same checkpoint resumed under autocast with float32 weights (master_weights=False) continues the run:
    # bf16 rounding apart (the embeddings are read in float32 there), the same losses
    _, autocast_losses = train_py(copied, small_data, "--max_iters=8", "--master_weights=False",
                                  f"--gradient_accumulation_steps={accum}", "--init_from=resume")
    assert [autocast_losses[i] for i in range(5, 9)] == pytest.approx([losses[i] for i in range(5, 9)], rel=2e-2)


def test_resume_keeps_this_runs_fused_adamw():
    """A MasterAdamW state (groups without AdamW's fused/foreach choice) loaded through train.load_optimizer_state
    into a fused AdamW: still fused (torch's load_state_dict alone takes the saved groups' fused=None), its steps
    float32, and it steps from the loaded moments."""
    import train as train_module
    _, _, opt, _ = run_master(2)
    state = copy.deepcopy(opt.state_dict())
    w, b = make_params()

    def fused_adamw():
        return torch.optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
                                 fused=True, **HYPER)
    plain = fused_adamw()
    plain.load_state_dict(copy.deepcopy(state))
    assert not any(g["fused"] for g in plain.param_groups)  # what the helper is for
    adamw = fused_adamw()
    train_module.load_optimizer_state(adamw, copy.deepcopy(state))
    assert all(g["fused"] and g["decoupled_weight_decay"] for g in adamw.param_groups)
    assert torch.equal(adamw.state[w]["exp_avg"], opt.state[opt.param_groups[0]["params"][0]]["exp_avg"])
    assert adamw.state[w]["step"].dtype == torch.float32 and float(adamw.state[w]["step"]) == 2.0
    w.grad, b.grad = grads(2)
    adamw.step()
    assert float(adamw.state[w]["step"]) == 3.0


@pytest.mark.parametrize("args,what", [
    (["--dtype=float32"], "dtype='float32'"),
    (["--dtype=float16"], "dtype='float16'"),
])
def test_train_py_master_weights_refuses_what_it_cannot_train(args, what, small_data, tmp_path, capsys):
    import train as train_module
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        train_module.main([*TRAIN_ARGS, f"--data_dir={small_data}", f"--out_dir={tmp_path / 'out'}", "--max_iters=2",
                           "--master_weights=True", *args])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: master_weights=True") and what in err, err
    assert "master_weights=False" in err and not (tmp_path / "out" / "ckpt.pt").exists()


def test_train_py_master_weights_clips_with_the_optimizers_own_clip(small_data, tmp_path, monkeypatch):
    """train.py with master_weights and grad_clip clips through MasterAdamW.clip_grad_norm_ (the float32 norm of the
    float32 sums), once an iteration, never through torch's clip (which, with two micro-steps, would not see the
    matrices' gradients: they are in the sums, not in p.grad)."""
    calls = []
    own = ma.MasterAdamW.clip_grad_norm_
    monkeypatch.setattr(ma.MasterAdamW, "clip_grad_norm_", lambda self, max_norm: calls.append(max_norm) or
                        own(self, max_norm))

    def torch_clip(*args, **kwargs):
        raise AssertionError("torch's clip_grad_norm_ called under master_weights")
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", torch_clip)
    train_py(tmp_path / "out", small_data, "--max_iters=2", "--master_weights=True", "--gradient_accumulation_steps=2",
             "--eval_interval=100")
    assert calls == [0.05, 0.05]




# ----------------------------------------------------------------------------------------
# The kernel through Triton's interpreter (tests/test_interpreted.py runs these in its child process)


def gpt_masters(backend, device="cpu", micro_steps=2, iters=2):
    """A tiny GPT (bias on: matrices, vectors, Tucker's cores; tens of tensors) trained `iters` iterations of
    `micro_steps` backward passes with the clip through MasterAdamW(backend): its masters and float32 weights."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=96, bias=True, attn="tucker",
                          tucker_ranks=(2, 8, 8))).to(device)
    opt = model.configure_optimizers(0.1, 3e-3, (0.9, 0.95), device, master_weights=True, micro_steps=micro_steps)
    opt.backend = backend
    g = torch.Generator().manual_seed(1)
    for _ in range(iters):
        for _ in range(micro_steps):
            x = torch.randint(0, 96, (2, 16), generator=g).to(device)
            with torch.autocast(device if device == "cuda" else "cpu", dtype=torch.bfloat16):
                _, loss = model(x, torch.roll(x, -1, dims=1))
            (loss / micro_steps).backward()
        opt.clip_grad_norm_(0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
    sums = [opt.state[p]["grad_sum"] for p in model.parameters() if "grad_sum" in opt.state[p]]
    assert len(sums) == sum(p.dim() >= 2 for p in model.parameters()) and not any(t.any() for t in sums)  # zeroed
    return [opt.master(p).detach().clone() for p in model.parameters()]


@needs_child
@pytest.mark.parametrize("per_launch", [3, 64])
def test_interp_multi_tensor_launches_match_torch_ops(per_launch, monkeypatch):
    """TENSORS_PER_LAUNCH > 1: the tensors of each kind go through _master_adamw_multi_kernel a few at a time (3:
    several launches and a short last one; 64: one launch a kind) and land where the torch ops put them."""
    monkeypatch.setattr(ma, "BLOCK", 256)
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", per_launch)
    launches = []
    kernel = ma._master_adamw_multi_kernel

    class Counting:
        def __getitem__(self, grid):
            launches.append(grid)
            return kernel[grid]
    monkeypatch.setattr(ma, "_master_adamw_multi_kernel", Counting())
    # one iteration: the interpreter rounds the bf16 copies toward zero (the GPU to nearest, as torch), so a second
    # iteration's gradients would differ by that (the CUDA test runs two)
    got = gpt_masters("triton", iters=1)
    matrices = sum(t.dim() >= 2 for t in got)
    vectors = len(got) - matrices
    per_step = -(-matrices // per_launch) - (-vectors // per_launch)  # a launch per chunk of each kind
    assert len(launches) == per_step and per_step < len(got)
    for a, b in zip(got, gpt_masters("torch", iters=1)):
        torch.testing.assert_close(a, b, **F32)


@needs_child
def test_interp_one_launch_keeps_each_tensors_step_and_stays_in_bounds(monkeypatch):
    """Two vectors in one multi-tensor launch with different step counts (the second gradient-free for two steps: its
    own bias corrections, not its neighbour's), the first a view into a wider buffer (65 values in blocks of 64: a
    last block of one) whose values past the view the kernel leaves alone; against the torch ops."""
    monkeypatch.setattr(ma, "BLOCK", 64)
    results = []
    for backend in ("triton", "torch"):
        g = torch.Generator().manual_seed(2)
        buf = torch.randn(65 + 64, generator=g)
        b, c = torch.nn.Parameter(buf[:65]), torch.nn.Parameter(torch.randn(65, generator=g))
        opt = ma.MasterAdamW([b, c], backend=backend, weight_decay=0.1, **HYPER)
        tail = buf[65:].clone()
        for s in range(4):
            b.grad, c.grad = grads(s)[1], (None if s < 2 else grads(s + 10)[1])
            opt.step()
        assert float(opt.state[b]["step"]) == 4.0 and float(opt.state[c]["step"]) == 2.0
        assert torch.equal(buf[65:], tail)
        results.append((b.detach().clone(), c.detach().clone()))
    for got, ref in zip(*results):
        torch.testing.assert_close(got, ref, **F32)


@needs_child
def test_interp_kernel_sums_micro_steps_as_torch_ops(monkeypatch):
    """micro_steps=2 through the kernel (it reads the float32 sum and zeroes it) against the torch ops."""
    monkeypatch.setattr(ma, "BLOCK", 256)
    w, b, opt = run_micro(3, 2, backend="triton", clip=True)
    w_ref, b_ref, ref = run_micro(3, 2, backend="torch", clip=True)
    torch.testing.assert_close(opt.master(w), ref.master(w_ref), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    assert not opt.state[w]["grad_sum"].any()


@needs_child
@pytest.mark.parametrize("lr_tensor, per_launch", [(False, 1), (True, 16)])
def test_interp_kernel_matches_torch_ops(lr_tensor, per_launch, monkeypatch):
    """A block smaller than the tensors (several programs, a partial last block), lr a float or a tensor; a launch
    per tensor (_master_adamw_kernel) or the default's multi-tensor kernel."""
    monkeypatch.setattr(ma, "BLOCK", 256)
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", per_launch)
    w, b, opt, norms = run_master(4, backend="triton", lr_tensor=lr_tensor, clip_steps=(1, 2))
    w_ref, b_ref, ref, ref_norms = run_master(4, backend="torch", clip_steps=(1, 2))
    torch.testing.assert_close(torch.stack(norms), torch.stack(ref_norms))
    torch.testing.assert_close(opt.master(w), ref.master(w_ref), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)
    # the interpreter converts float32 to bf16 by truncation (the GPU rounds to nearest: the CUDA test asks equality)
    master = opt.master(w)
    assert ((w.detach().float() - master).abs() <= master.abs() * 2 ** -7).all()
    for p, q in ((w, w_ref), (b, b_ref)):
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], ref.state[q][key], rtol=1e-6, atol=1e-8)


@needs_child
@pytest.mark.parametrize("betas", [(0.0, 0.99), (0.9, 0.0)])
def test_interp_kernel_takes_a_beta_of_zero(betas, monkeypatch):
    """The kernels' bias corrections are exp2(step * log2(beta)): a beta of 0 is log2 = -inf there, a correction of 1
    (math.log2(0) raised before), as the torch ops compute it."""
    monkeypatch.setitem(HYPER, "betas", betas)
    w, b, opt, _ = run_master(3, backend="triton")
    w_ref, b_ref, ref, _ = run_master(3, backend="torch")
    torch.testing.assert_close(opt.master(w), ref.master(w_ref), **F32)
    torch.testing.assert_close(b.detach(), b_ref.detach(), **F32)


@needs_child
@pytest.mark.parametrize("per_launch", [1, 16])
def test_interp_kernel_step_bumps_the_version_counters(per_launch, monkeypatch):
    """The kernels write through pointers: the step tells autograd's version counters (what decode caches built from
    the weights compare), as the torch ops' in-place writes do; an empty parameter beside them counts its step."""
    monkeypatch.setattr(ma, "BLOCK", 256)
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", per_launch)
    w, b = make_params()
    e = torch.nn.Parameter(torch.zeros(0, 4))
    opt = ma.MasterAdamW([w, b, e], backend="triton", **HYPER)
    versions = [p._version for p in (w, b)]
    w.grad, b.grad = grads(0)[0].to(torch.bfloat16), grads(0)[1]
    e.grad = torch.zeros(0, 4, dtype=torch.bfloat16)
    opt.step()
    assert all(p._version > v for p, v in zip((w, b), versions))
    assert e.dtype == torch.bfloat16 and float(opt.state[e]["step"]) == 1.0




# ----------------------------------------------------------------------------------------
# On the GPU


@needs_cuda
@pytest.mark.parametrize("per_launch", [1, 16])
def test_cuda_gpt_kernels_match_torch_ops(per_launch, monkeypatch):
    """One iteration (a second one's gradients would follow bf16 copies that an ulp of difference between the kernel's
    masters and the torch ops' can round apart)."""
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", per_launch)
    for a, b in zip(gpt_masters("triton", "cuda", iters=1), gpt_masters("torch", "cuda", iters=1)):
        torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-7)


@needs_cuda
@pytest.mark.parametrize("betas", [(0.0, 0.99), (0.9, 0.0)])
def test_cuda_kernel_takes_a_beta_of_zero(betas, monkeypatch):
    monkeypatch.setitem(HYPER, "betas", betas)
    w, b, opt, _ = run_master(3, backend="triton", device="cuda")
    w_ref, b_ref, ref, _ = run_master(3, backend="torch", device="cuda")
    torch.testing.assert_close(opt.master(w), ref.master(w_ref), rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(b.detach(), b_ref.detach(), rtol=2e-6, atol=1e-7)


@needs_cuda
def test_cuda_kernel_matches_torch_ops():
    w, b, opt, _ = run_master(4, backend="triton", device="cuda", clip_steps=(1, 2))
    w_ref, b_ref, ref, _ = run_master(4, backend="torch", device="cuda", clip_steps=(1, 2))
    torch.testing.assert_close(opt.master(w), ref.master(w_ref), rtol=2e-6, atol=1e-7)
    torch.testing.assert_close(b.detach(), b_ref.detach(), rtol=2e-6, atol=1e-7)
    assert torch.equal(w.detach(), opt.master(w).to(torch.bfloat16))


@needs_cuda
@pytest.mark.parametrize("per_launch", [1, 16])
def test_cuda_graph_step_replays_plain_iterations(per_launch, monkeypatch):
    """graph_step.GraphedTrainStep with MasterAdamW (lr a device tensor, the kernels captured) against the same
    iterations run plainly: the same losses and weights; a launch per tensor or 16 tensors a launch."""
    monkeypatch.setattr(ma, "TENSORS_PER_LAUNCH", per_launch)
    from graph_step import GraphedTrainStep
    from model import GPT, GPTConfig
    cfg = GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=256, bias=False)
    torch.manual_seed(0)
    base = GPT(cfg).cuda()
    batches = [(torch.randint(0, 256, (4, 32), device="cuda"), torch.randint(0, 256, (4, 32), device="cuda"))
               for _ in range(8)]
    out = {}
    for mode in ("plain", "graph"):
        model = copy.deepcopy(base)
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cuda", master_weights=True)
        if mode == "graph":
            step = GraphedTrainStep(model, opt, accum=1, batch_size=4, seq_len=32, device=torch.device("cuda"),
                                    dtype="bfloat16")
            losses = [step([b], 1e-3).item() for b in batches]
        else:
            losses = train(model, opt, batches, "cuda")
        out[mode] = (losses, [opt.master(p).clone() for p in model.parameters()])
    assert out["graph"][0] == pytest.approx(out["plain"][0], rel=1e-5)
    for a, b in zip(out["graph"][1], out["plain"][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@needs_cuda
def test_cuda_train_py_master_weights_graphed_plain_and_autocast(tmp_path):
    """train.py on the GPU, bf16, clip 1.0 (the clip folded into the kernel): master_weights with graph_step replays
    the plain master_weights iterations; both follow the autocast run within bf16 rounding; stopped at 6 and resumed,
    the graphed run continues; the same with two micro-steps an iteration."""
    import json
    import os
    import subprocess
    import sys

    import numpy as np

    from test_graph_step import REPO, _token_dir
    data = _token_dir(tmp_path / "data", 512)

    def run(name, *extra):
        out = tmp_path / name
        args = ["train.py", "--device=cuda", "--dtype=bfloat16", "--compile=False", f"--data_dir={data}",
                f"--out_dir={out}", "--n_layer=2", "--n_head=4", "--n_embd=64", "--block_size=32", "--vocab_size=512",
                "--bias=False", "--attn=tucker", "--tucker_ranks=4,16,16", "--batch_size=8", "--learning_rate=3e-3",
                "--warmup_iters=3", "--lr_decay_iters=12", "--min_lr=3e-4", "--grad_clip=1.0", "--eval_interval=6",
                "--eval_iters=2", "--log_interval=1", *extra]
        proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        losses = {r["iter"]: r["loss"] for r in log if "loss" in r}
        return [losses[i] for i in range(1, int(extra[0].split("=")[1]) + 1)]  # iterations 1..max_iters

    autocast = run("autocast", "--max_iters=12")
    plain = run("plain", "--max_iters=12", "--master_weights=True")
    graph = run("graph", "--max_iters=12", "--master_weights=True", "--graph_step=True")
    np.testing.assert_allclose(graph, plain, rtol=1e-4)
    np.testing.assert_allclose(plain, autocast, rtol=2e-2)
    assert graph[-1] < graph[0] - 0.5  # it learns
    run("half", "--max_iters=6", "--master_weights=True", "--graph_step=True")
    resumed = run("half", "--max_iters=12", "--master_weights=True", "--graph_step=True", "--init_from=resume")
    np.testing.assert_allclose(resumed[6:], graph[6:], rtol=1e-4)
    # two micro-steps of 4 sequences: their gradients summed in float32 by the hooks, inside the graph too
    accum = ["--gradient_accumulation_steps=2", "--batch_size=4"]
    autocast2 = run("autocast2", "--max_iters=12", *accum)
    plain2 = run("plain2", "--max_iters=12", "--master_weights=True", *accum)
    graph2 = run("graph2", "--max_iters=12", "--master_weights=True", "--graph_step=True", *accum)
    np.testing.assert_allclose(graph2, plain2, rtol=1e-4)
    np.testing.assert_allclose(plain2, autocast2, rtol=2e-2)


@needs_cuda
def test_cuda_capture_with_a_float_lr_is_refused():
    """A float lr would be recorded into a captured step as a constant (every replay at the capture's lr): refused."""
    w, b = make_params("cuda")
    opt = ma.MasterAdamW([w, b], **HYPER)
    w.grad, b.grad = torch.zeros_like(w), torch.zeros_like(b)
    opt.step()  # the kernel compiled outside the capture
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="float lr"):
        with torch.cuda.graph(graph):
            opt.step()
