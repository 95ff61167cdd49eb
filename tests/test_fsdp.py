"""train.py --fsdp=True (FSDP2, torch.distributed.fsdp.fully_shard) on CPU with gloo: two sharded
processes train like one unsharded process on the same global batch, and ckpt.pt keeps the one
single-file layout, so a run resumes across world sizes and FSDP / no FSDP in both directions."""
import json

import numpy as np
import pytest
import torch

from test_train import SMALL, run, train_error, train_losses, read_log

# two blocks (two FSDP groups besides the root), tied embeddings, gradient accumulation (4 micro-steps: two a rank
# under FSDP, so the gradient sync that waits for a rank's last micro-step is exercised; at one a rank a sync on the
# wrong micro-step passed), clipping, an odd eval_iters (ranks run different numbers of real evaluation batches)
ARGS = [*SMALL, "--n_layer=2", "--gradient_accumulation_steps=4", "--eval_interval=3", "--eval_iters=3",
        "--grad_clip=0.5", "--dtype=float32", "--dropout=0.0"]
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]


def train_here(args):
    """One process, no FSDP, in this process (no interpreter start: keeps the test fast)."""
    import train
    train.main(args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Random tokens (vocab 64). 'single': one process to 9 (its checkpoint at 3 kept as ckpt3.pt);
    'part': two FSDP processes (activation checkpointing on) to 3."""
    root = tmp_path_factory.mktemp("fsdp")
    data = root / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, 64, 3000).astype(np.uint16).tofile(data / f"{split}.bin")
    args = [*ARGS, f"--data_dir={data}"]
    single, part = root / "single", root / "part"
    train_here([*args, f"--out_dir={single}", "--max_iters=3"])
    (single / "ckpt3.pt").write_bytes((single / "ckpt.pt").read_bytes())
    train_here([*args, f"--out_dir={single}", "--max_iters=9", "--init_from=resume"])  # exact (test_train)
    run([*TORCHRUN, *args, f"--out_dir={part}", "--max_iters=3", "--fsdp=True", "--activation_checkpointing=True"])
    return args, single, part


def val_losses(out_dir):
    return {r["iter"]: r["val_loss"] for r in read_log(out_dir) if "val_loss" in r}


def assert_close(ref: dict, got: dict, iters, rel=1e-5):
    for i in iters:
        assert got[i] == pytest.approx(ref[i], rel=rel), (i, ref[i], got[i])


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def test_two_fsdp_processes_match_one_process(runs):
    _, single, part = runs
    s = json.loads((part / "summary.json").read_text())
    assert s["finished"] and s["config"]["fsdp"] and s["config"]["world_size"] == 2
    c0, c1 = s["rank_weight_checksums"]
    assert c0 == c1
    assert sorted(train_losses(part)) == [1, 2, 3]
    assert_close(train_losses(single), train_losses(part), [1, 2, 3])  # the same global batch each iteration
    assert_close(val_losses(single), val_losses(part), [0, 3])
    a, b = load(single / "ckpt3.pt"), load(part / "ckpt.pt")
    assert a["iter_num"] == b["iter_num"] == 3
    for k in a["model"]:
        torch.testing.assert_close(b["model"][k], a["model"][k], rtol=1e-4, atol=1e-6)


def test_fsdp_checkpoint_has_the_single_process_layout(runs):
    from checkpoint import load_checkpoint
    _, single, part = runs
    a, b = load(single / "ckpt3.pt"), load(part / "ckpt.pt")
    assert list(a["model"]) == list(b["model"]) and all(type(v) is torch.Tensor for v in b["model"].values())
    oa, ob = a["optimizer"], b["optimizer"]
    assert oa["param_groups"] == ob["param_groups"]
    assert set(oa["state"]) == set(ob["state"]) and all(isinstance(k, int) for k in ob["state"])
    for i, st in oa["state"].items():
        assert set(st) == set(ob["state"][i])
        for k, v in st.items():  # full tensors (not shards), the same values
            assert type(ob["state"][i][k]) is torch.Tensor and ob["state"][i][k].shape == v.shape
            torch.testing.assert_close(ob["state"][i][k], v, rtol=1e-3, atol=1e-7)
    assert len(b["rng_states"]) == 2
    model, _ = load_checkpoint(part)  # what sample.py and evaluate load
    assert model.transformer.wte.weight is model.lm_head.weight


def test_fsdp_checkpoint_resumes_in_one_process_and_back(runs):
    """2 FSDP processes to 3 -> 1 process without FSDP to 6 -> 2 FSDP processes to 9: every
    iteration's loss as the uninterrupted one-process run's."""
    args, single, part = runs
    train_here([*args, f"--out_dir={part}", "--max_iters=6", "--init_from=resume"])  # 1 process, no FSDP
    assert_close(train_losses(single), train_losses(part), [4, 5, 6])
    run([*TORCHRUN, *args, f"--out_dir={part}", "--max_iters=9", "--init_from=resume", "--fsdp=True"])
    assert_close(train_losses(single), train_losses(part), range(1, 10))
    assert_close(val_losses(single), val_losses(part), [0, 3, 6, 9])
    a, b = load(single / "ckpt.pt"), load(part / "ckpt.pt")
    assert a["iter_num"] == b["iter_num"] == 9
    for k in a["model"]:
        torch.testing.assert_close(b["model"][k], a["model"][k], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("arg,message", [
    ("--fsdp=maybe", "fsdp"),
    ("--dtype=float16", "float16"),
])
def test_fsdp_key_is_validated(arg, message, tmp_path, capsys):
    err = train_error([f"--data_dir={tmp_path}", f"--out_dir={tmp_path / 'never'}", "--fsdp=True", arg], capsys)
    assert message in err, err
    assert not (tmp_path / "never").exists()


def test_fsdp_without_checkpoints_and_with_the_chunked_loss_head(runs, tmp_path):
    """No checkpoint written (a benchmark's settings): the evaluations' no-grad forwards must not leave
    the root group gathered (the final weight checksums read DTensor shards); and the chunked loss head
    (gradients computed in the forward) trains the same under FSDP."""
    args, single, _ = runs
    out = tmp_path / "fsdp_nockpt"
    run([*TORCHRUN, *args, f"--out_dir={out}", "--max_iters=3", "--fsdp=True", "--save_checkpoint=False",
         "--loss_chunk_tokens=5"])
    s = json.loads((out / "summary.json").read_text())
    assert s["finished"] and not (out / "ckpt.pt").exists()
    c0, c1 = s["rank_weight_checksums"]
    assert c0 == c1
    assert_close(train_losses(single), train_losses(out), [1, 2, 3])
    assert_close(val_losses(single), val_losses(out), [0, 3])
