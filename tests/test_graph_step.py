"""graph_step.py: the whole training iteration replayed from one CUDA graph.

On the CPU: which runs it refuses (each error names the key and what is allowed), train.py's
refusal before any work, and the phase timer's one-phase iterations. On CUDA (skipped without a
GPU): the graphed iterations against plain ones from the same weights and batches (losses and
final weights; the learning rate changes every iteration, so a rate frozen into the graph would
show), eager and compiled, with gradient accumulation and clipping; and train.py with
graph_step=True against graph_step=False, and resumed from its own checkpoint.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from graph_step import GraphedTrainStep, check_graph_step
from model import GPT, GPTConfig

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
GPU = torch.device("cuda")


# ----------------------------------------------------------------------------------------
# CPU


@pytest.mark.parametrize("kw, words", [
    (dict(device=torch.device("cpu")), ["graph_step=True", "device='cpu'", "'cuda'"]),
    (dict(device=torch.device("meta")), ["graph_step=True", "device='meta'", "'cuda'"]),  # not CUDA: refused too
    (dict(distributed=True), ["graph_step=True", "DDP", "graph_step=False"]),
    (dict(dtype="float16"), ["dtype='float16'", "'bfloat16'", "'float32'"]),
    (dict(compile_mode="reduce-overhead"), ["compile_mode='reduce-overhead'", "'default'",
                                            "'max-autotune-no-cudagraphs'"]),
    (dict(compile_mode="max-autotune"), ["compile_mode='max-autotune'"]),
    (dict(activation_checkpointing=True), ["activation_checkpointing=True", "activation_checkpointing=False"]),
])
def test_check_refuses_what_it_cannot_serve(kw, words):
    args = dict(device=GPU, dtype="bfloat16", distributed=False, compile_on=True, compile_mode="default")
    why = check_graph_step(**{**args, **kw})
    assert why is not None and all(w in why for w in words), why


@pytest.mark.parametrize("kw", [dict(), dict(dtype="float32"), dict(compile_on=False, compile_mode="reduce-overhead"),
                                dict(compile_mode="max-autotune-no-cudagraphs")])
def test_check_accepts_what_it_serves(kw):
    args = dict(device=GPU, dtype="bfloat16", distributed=False, compile_on=True, compile_mode="default")
    assert check_graph_step(**{**args, **kw}) is None


def test_train_refuses_graph_step_on_cpu(tmp_path, capsys):
    import train
    out, data = tmp_path / "out", _token_dir(tmp_path / "data", 512)
    with pytest.raises(SystemExit) as exit_:
        train.main(["--device=cpu", "--graph_step=True", f"--out_dir={out}", f"--data_dir={data}", "--vocab_size=512",
                    "--block_size=32"])
    assert exit_.value.code == 2 and "graph_step=True needs a CUDA device" in capsys.readouterr().err
    assert not out.exists()  # refused before the run folder was made


def test_phase_timer_one_phase_iterations():
    from train import PhaseTimer
    timer = PhaseTimer(torch.device("cpu"))
    timer.add([("step", 0.0, 0.004)])
    timer.add([("step", 1.0, 1.006)])
    timer.add([("step", 2.0, 2.005)], timed=False)
    timer.flush()
    med = timer.medians()
    assert med["fwd"] is None and med["bwd"] is None and med["opt"] is None
    assert med["total"] == pytest.approx(5.0)
    timer.add([("fwd", 0.0, 0.001), ("bwd", 0.001, 0.003), ("fwd", 0.003, 0.004), ("opt", 0.004, 0.0045)])
    timer.flush()
    assert timer.medians()["fwd"] == pytest.approx(2.0) and timer.samples["total"][-1] == pytest.approx(4.5)


def test_batches_of_another_shape_are_refused():
    """The captured step's input buffers are (accum, batch_size, block_size): a batch of another shape is a ValueError
    naming both shapes (copy_ would broadcast a (1, T) batch into every row)."""
    from graph_step import GraphedTrainStep
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32, bias=False))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    step = GraphedTrainStep(model, optimizer, accum=1, batch_size=4, seq_len=8, device=torch.device("cpu"),
                            dtype="float32")
    for shape in ((1, 8), (4, 1), (4, 6)):
        x = torch.randint(0, 32, shape)
        with pytest.raises(ValueError, match=rf"inputs {re.escape(str(shape))} .* takes \(4, 8\)"):
            step._load([(x, x)], 1e-3)
    x = torch.randint(0, 32, (4, 8))
    for shape in ((1, 8), (4, 6)):  # the targets are checked as the inputs are
        y = torch.randint(0, 32, shape)
        with pytest.raises(ValueError, match=rf"targets {re.escape(str(shape))}, the captured step takes \(4, 8\)"):
            step._load([(x, y)], 1e-3)
    step._load([(x, x)], 1e-3)
    assert torch.equal(step.x[0], x)


def test_step_counts_are_checked():
    """A captured step of accum micro-steps takes exactly accum batches (fewer would leave the last micro-steps
    replaying the previous iteration's data), and needs accum >= 1 and at least one warm-up iteration before the
    capture (a ValueError naming the values)."""
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32, bias=False))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    kw = dict(batch_size=4, seq_len=8, device=torch.device("cpu"), dtype="float32")
    for accum, warmup in ((0, 3), (2, 0)):
        with pytest.raises(ValueError, match=rf"accum={accum} and warmup={warmup} must be >= 1"):
            GraphedTrainStep(model, optimizer, accum=accum, warmup=warmup, **kw)
    step = GraphedTrainStep(model, optimizer, accum=2, **kw)
    x = torch.randint(0, 32, (4, 8))
    for batches in ([(x, x)], [(x, x)] * 3):
        with pytest.raises(ValueError, match=rf"{len(batches)} batches given for 2 micro-steps"):
            step._load(batches, 1e-3)
    step._load([(x, x)] * 2, 1e-3)


def test_clip_gradients_is_the_optimizers_own_clip():
    """With an optimizer that clips itself (master_adamw.MasterAdamW: the norm in float32, the coefficient applied by
    its step as it reads each bf16 gradient), the iteration's clip is that one: the same norm and the same update,
    the bf16 gradients never scaled and rounded by torch's clip."""
    from graph_step import clip_gradients
    from master_adamw import MasterAdamW
    results = []
    for via in ("optimizer", "clip_gradients"):
        g = torch.Generator().manual_seed(0)
        w = torch.nn.Parameter(torch.randn(24, 40, generator=g))
        b = torch.nn.Parameter(torch.randn(40, generator=g))
        opt = MasterAdamW([w, b], lr=1e-2)
        w.grad, b.grad = torch.randn(24, 40, generator=g).to(torch.bfloat16), torch.randn(40, generator=g)
        grad = w.grad.clone()
        norm = opt.clip_grad_norm_(0.5) if via == "optimizer" else clip_gradients(opt, [w, b], 0.5)
        assert float(norm) > 1.0 and torch.equal(w.grad, grad)  # the clip scales (in the step), not here
        opt.step()
        results.append((norm, opt.master(w).clone(), b.detach().clone()))
    (n1, w1, b1), (n2, w2, b2) = results
    assert torch.equal(n1, n2) and torch.equal(w1, w2) and torch.equal(b1, b2)


def test_a_replay_reads_the_loaded_learning_rate():
    """Once captured, the step's learning rate lives in device tensors the graph reads: each iteration's rate is
    written into them (a rate frozen at the capture's value would show on every replay)."""
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=32, bias=False))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    step = GraphedTrainStep(model, optimizer, accum=1, batch_size=4, seq_len=8, device=torch.device("cpu"),
                            dtype="float32")
    step._device_lr(1e-3)
    x = torch.randint(0, 32, (4, 8))
    for lr in (5e-4, 2e-3):
        step._load([(x, x)], lr)
        assert [float(t) for t in step.lr] == pytest.approx([lr] * len(optimizer.param_groups))
        assert all(g["lr"] is t for g, t in zip(optimizer.param_groups, step.lr))


def test_the_captured_iteration_is_the_plain_one():
    """On the CPU: the iteration the graph is captured from is train.py's plain iteration (losses and
    weights equal over iterations with accumulation and clipping)."""
    results = []
    for mode in ("plain", "graph's"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**CFG, **VARIANTS["tucker"]))
        optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        gen = torch.Generator().manual_seed(1)
        tokens = torch.randint(CFG["vocab_size"], (2, 4, CFG["block_size"] + 1), generator=gen)
        micro = [(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in tokens]
        if mode == "plain":
            losses = _plain(model, model, optimizer, [micro] * 3, 2, 0.5, "float32", device="cpu")
        else:
            step = GraphedTrainStep(model, optimizer, accum=2, batch_size=4, seq_len=CFG["block_size"],
                                    device=torch.device("cpu"), dtype="float32", grad_clip=0.5)
            losses = []
            for it in range(3):
                step._load(micro, LRS[it])
                losses.append(step._iteration().item())
                optimizer.zero_grad(set_to_none=True)
        results.append((losses, [p.detach().clone() for p in model.parameters()]))
    (a, wa), (b, wb) = results
    # equal, and not vacuously so: both trained. The loss falls 0.48 over the three iterations. At a tenth of the
    # rates it falls 0.07, so the 0.3 bound catches a step that does (almost) nothing. It does not test the
    # attention: with the attention frozen or its output zeroed the loss still falls 0.48 (the embeddings and MLP
    # learn the batch)
    assert a == pytest.approx(b, rel=1e-6)
    assert a[-1] < a[0] - 0.3
    for x, y in zip(wa, wb):
        torch.testing.assert_close(x, y)
    # a graph run's checkpoint has a plain run's optimizer layout; the optimizer keeps the graph's lr tensors
    step._device_lr(2e-3)
    saved = step.optimizer_state_dict()
    assert all(type(g["lr"]) is float and g["lr"] == pytest.approx(2e-3) and g["capturable"] is False
               for g in saved["param_groups"])
    assert all(torch.is_tensor(g["lr"]) and g["capturable"] for g in optimizer.param_groups)


# ----------------------------------------------------------------------------------------
# CUDA

CFG = dict(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=512, bias=False, dropout=0.0)
VARIANTS = {"mha": dict(attn="mha"),
            "tucker": dict(attn="tucker", tucker_ranks=(4, 16, 16), pos_emb="rope")}
LRS = [1e-3, 2e-3, 5e-4, 3e-3, 1e-2, 2e-4, 4e-3, 8e-3]  # a rate frozen into the graph (5e-4) would differ after it


def _model_and_optimizer(variant):
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG, **VARIANTS[variant])).to(GPU)
    return model, model.configure_optimizers(0.1, LRS[0], (0.9, 0.95), "cuda")


def _batches(n, accum, batch=4):
    """n iterations' micro-batches: the same random ones every iteration, so that the loss falls (memorized)."""
    gen = torch.Generator(device=GPU).manual_seed(1)
    tokens = torch.randint(CFG["vocab_size"], (accum, batch, CFG["block_size"] + 1), device=GPU, generator=gen)
    return [[(t[:, :-1].contiguous(), t[:, 1:].contiguous()) for t in tokens] for _ in range(n)]


def _plain(model, net, optimizer, batches, accum, clip, dtype, device="cuda"):
    """train.py's plain iteration (no scaler), one per batch list, at the LRS rates."""
    ctx = (torch.autocast(device, dtype=getattr(torch, dtype)) if dtype != "float32"
           else torch.autocast(device, enabled=False))
    losses = []
    for it, micro in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = LRS[it]
        total = 0.0
        for x, y in micro:
            with ctx:
                _, loss = net(x, y)
                loss = loss / accum
            total += loss.item()
            loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(total)
    return losses


@needs_cuda
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("compiled, dtype", [(False, "float32"), (True, "bfloat16")])
def test_cuda_graphed_iterations_match_plain(variant, compiled, dtype):
    accum, clip = 2, 0.5
    batches = _batches(len(LRS), accum)
    results = {}
    for mode in ("plain", "graph"):
        torch._dynamo.reset()
        model, optimizer = _model_and_optimizer(variant)
        net = torch.compile(model) if compiled else model
        if mode == "plain":
            losses = _plain(model, net, optimizer, batches, accum, clip, dtype)
        else:
            step = GraphedTrainStep(net, optimizer, accum=accum, batch_size=4, seq_len=CFG["block_size"], device=GPU,
                                    dtype=dtype, grad_clip=clip, warmup=3)
            import model as model_module
            writes = model_module._UNTRACKED_WRITES[0]
            out = [step(micro, LRS[it]) for it, micro in enumerate(batches)]
            assert step.graph is not None  # five of the eight iterations were replays
            # each replay counted as a write no version counter saw (a later generate rebuilds its forms); the
            # plain iterations and the capture, if counted at all (a fused optimizer), are four
            assert model_module._UNTRACKED_WRITES[0] >= writes + 5
            losses = [loss.item() for loss in out]  # each a tensor of its own: later replays left it alone
        results[mode] = (losses, [p.detach().clone() for p in model.parameters()])
    (plain_losses, plain_w), (graph_losses, graph_w) = results["plain"], results["graph"]
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=0, atol=2e-2)
    torch.testing.assert_close(torch.tensor(graph_losses), torch.tensor(plain_losses), **tol)
    assert plain_losses[-1] < plain_losses[0] - 0.3  # it learns (the batch repeats)
    if dtype == "float32":
        for a, b in zip(graph_w, plain_w):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _token_dir(path: Path, vocab: int) -> Path:
    rng = np.random.default_rng(0)
    path.mkdir()
    # a learnable stream: a repeated random phrase with noise, so the loss falls within a few iterations
    phrase = rng.integers(vocab, size=97)
    for split, n in (("train", 40_000), ("val", 8_000)):
        tokens = np.resize(phrase, n)
        noise = rng.random(n) < 0.1
        tokens[noise] = rng.integers(vocab, size=int(noise.sum()))
        tokens.astype(np.uint16).tofile(path / f"{split}.bin")
    return path


def _train(tmp_path, name, data, *extra):
    out = tmp_path / name
    args = ["train.py", "--device=cuda", "--dtype=float32", "--compile=False", f"--data_dir={data}", f"--out_dir={out}",
            "--n_layer=2", "--n_head=4", "--n_embd=64", "--block_size=32", "--vocab_size=512", "--bias=False",
            "--attn=tucker", "--tucker_ranks=4,16,16", "--pos_emb=rope", "--batch_size=4",
            "--gradient_accumulation_steps=2", "--learning_rate=3e-3", "--warmup_iters=3", "--lr_decay_iters=12",
            "--min_lr=3e-4", "--eval_interval=6", "--eval_iters=2", "--log_interval=1", *extra]
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return out, {r["iter"]: r["loss"] for r in log if "loss" in r}


@needs_cuda
def test_cuda_train_py_graph_step_matches_plain_and_resumes(tmp_path):
    data = _token_dir(tmp_path / "data", 512)
    _, plain = _train(tmp_path, "plain", data, "--max_iters=12")
    out, graph = _train(tmp_path, "graph", data, "--max_iters=12", "--graph_step=True")
    assert sorted(graph) == list(range(1, 13)) and sorted(plain) == sorted(graph)
    np.testing.assert_allclose([graph[i] for i in sorted(graph)], [plain[i] for i in sorted(plain)], rtol=1e-4)
    assert graph[12] < graph[1] - 0.5  # it learns
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["ms_per_iter"]["fwd"] is None and summary["ms_per_iter"]["total"] > 0
    # stop at 6 (its checkpoint), then resume to 12 with the graph and without it: both continue the run
    half, _ = _train(tmp_path, "half", data, "--max_iters=6", "--graph_step=True")
    for graph_step in ("True", "False"):
        folder = tmp_path / f"resumed_{graph_step}"
        folder.mkdir()
        (folder / "ckpt.pt").write_bytes((half / "ckpt.pt").read_bytes())
        _, resumed = _train(tmp_path, folder.name, data, "--max_iters=12", "--init_from=resume",
                            f"--graph_step={graph_step}")
        np.testing.assert_allclose([resumed[i] for i in range(7, 13)], [graph[i] for i in range(7, 13)], rtol=1e-4,
                                   err_msg=f"resumed with graph_step={graph_step}")
