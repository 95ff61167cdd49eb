"""sample.py in process on a tiny checkpoint: invalid keys and unreadable checkpoints are one line and
exit 2, the decode key reaches GPT.generate where it has one, the decode speed goes to stderr."""

import json
import re

import pytest
import torch

import sample
from checkpoint import make_checkpoint, save_checkpoint
from model import GPT, GPTConfig
from tiny import one_line_error, record_generate_calls


@pytest.fixture
def out_dir(tmp_path):
    """A tiny GPT over GPT-2's vocabulary, saved as train.py saves it."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(tmp_path / "ckpt.pt", make_checkpoint(model, opt, {}))
    return tmp_path


def sample_args(out_dir, gpt2_ranks_file, *extra):
    return [f"--out_dir={out_dir}", "--device=cpu", f"--tokenizer={gpt2_ranks_file}", "--num_samples=2",
            "--max_new_tokens=5", "--start=ROMEO:", *extra]


def sample_error(args, capsys) -> str:
    return one_line_error(lambda: sample.main(args), capsys)


@pytest.mark.parametrize("arg,key", [
    ("--temperature=-0.5", "temperature"), ("--top_k=-1", "top_k"), ("--num_samples=0", "num_samples"),
    ("--max_new_tokens=0", "max_new_tokens"), ("--max_new_tokens=-3", "max_new_tokens"), ("--decode=fast", "decode"),
    ("--batch_size=0", "batch_size"),
    ("--decode=graph", "decode"), ("--decode=mega", "decode='mega' needs a CUDA"), ("--device=tpu", "device"),
    ("--dtype=int8", "dtype"), ("--seed=-1", "seed"), ("--seed=100000000000000000000", "seed"),
    ("--seed=9223372036854775808", "seed=9223372036854775808"),  # 2**63: one past the range
])
def test_invalid_keys_fail_before_loading(arg, key, tmp_path, capsys):
    err = sample_error([f"--out_dir={tmp_path / 'nothing'}", "--device=cpu", arg], capsys)  # checked first
    assert key in err and "no checkpoint" not in err, err


def test_config_file_problems_fail_before_loading(tmp_path, capsys):
    """A config file that is missing, or that sets a value out of range (a nan temperature, which no --key=value can
    write), is one line naming it, exit 2, before anything is loaded."""
    base = [f"--out_dir={tmp_path / 'nothing'}", "--device=cpu"]
    err = sample_error([str(tmp_path / "missing.py"), *base], capsys)
    assert "config file not found" in err and "missing.py" in err, err
    nan = tmp_path / "nan.py"
    nan.write_text('temperature = float("nan")\n')
    err = sample_error([str(nan), *base], capsys)
    assert "temperature=nan is out of range" in err and "no checkpoint" not in err, err


@pytest.mark.parametrize("change", [dict(seed=0), dict(seed=2**63 - 1), dict(top_k=0), dict(temperature=0.0),
                                    dict(num_samples=1, max_new_tokens=1, batch_size=1)])
def test_the_closed_end_of_each_allowed_range_passes(change):
    """validate allows each range's own end (test_invalid_keys_fail_before_loading: what lies past it is refused)."""
    assert sample.validate({**sample.DEFAULTS, "device": "cpu", **change}) == torch.device("cpu")


@pytest.mark.parametrize("arg,says", [("--compile=True", "compile=False"), ("--use_cache=False", "use_cache=True"),
                                      ("--dtype=float16", "use dtype='bfloat16'"),
                                      ("--batch_size=33 --num_samples=40", "batch_size=33 is out of range"),
                                      ("--batch_size=32 --num_samples=40", "needs a CUDA"),  # 32 rows: served
                                      ("--batch_size=64 --num_samples=4", "needs a CUDA")])
def test_mega_decode_refuses_compile_no_cache_and_autocast(arg, says, tmp_path, capsys):
    """decode='mega' is the cached step as one kernel in the weights' dtype: torch.compile, the uncached path,
    float16 (autocast over float32 weights) and more rows than its step serves (32) are refused by name, before
    anything is loaded. The rows are those decoded at once: 4 samples at batch_size 64 are 4 rows (here the CPU is
    what is refused)."""
    err = sample_error([f"--out_dir={tmp_path / 'nothing'}", "--device=cpu", "--decode=mega", *arg.split()], capsys)
    assert "decode='mega'" in err and says in err and "no checkpoint" not in err, err


def test_mega_decode_of_a_model_it_cannot_serve_is_one_line(tmp_path, gpt2_ranks_file, capsys, monkeypatch):
    """--decode=mega over a checkpoint the one-launch step does not serve (here a SwiGLU MLP) is one line naming
    decode='mega' and why, exit 2, before any decoding (before: decode_mega's ValueError, a traceback from inside
    generate). The step needs CUDA: check_decode is told the device is one, as on a GPU machine."""
    import model as model_module

    real = model_module.check_decode
    on_cuda = lambda decode, device, compile, use_cache: real(decode, "cuda", compile, use_cache)  # noqa: E731
    monkeypatch.setattr(model_module, "check_decode", on_cuda)  # generate's own check
    monkeypatch.setattr(sample, "check_decode", on_cuda)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False, mlp="swiglu"))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(tmp_path / "ckpt.pt", make_checkpoint(model, opt, {}))
    err = sample_error(sample_args(tmp_path, gpt2_ranks_file, "--decode=mega"), capsys)
    assert "decode='mega' cannot serve" in err and "SwiGLU" in err and "decode='auto' or 'eager'" in err, err


@pytest.mark.parametrize("damage", ["missing", "empty", "truncated", "foreign"])
def test_unreadable_checkpoint(damage, out_dir, gpt2_ranks_file, capsys):
    ckpt = out_dir / "ckpt.pt"
    good = ckpt.read_bytes()
    if damage == "missing":
        ckpt.unlink()
    else:
        ckpt.write_bytes({"empty": b"", "truncated": good[: len(good) // 2], "foreign": b"hello\n"}[damage])
    err = sample_error(sample_args(out_dir, gpt2_ranks_file), capsys)
    assert str(ckpt) in err
    if damage == "missing":
        assert "train one first" in err
    if damage == "foreign":  # torch's KeyError says only '101': the error names its kind
        assert "KeyError" in err, err


def test_a_run_without_checkpoints_is_not_told_to_train(out_dir, gpt2_ranks_file, capsys):
    """A run trained with save_checkpoint=False (a sweep's) has no ckpt.pt: the one line says so and how to get one,
    not 'train one first' after it (it was trained)."""
    (out_dir / "ckpt.pt").unlink()
    (out_dir / "config.json").write_text(json.dumps({"out_dir": str(out_dir), "save_checkpoint": False}))
    err = sample_error(sample_args(out_dir, gpt2_ranks_file), capsys)
    assert "trained with save_checkpoint=False and wrote none" in err and "train one first" not in err, err


def test_a_checkpoint_whose_model_is_not_weights_is_one_line(out_dir, gpt2_ranks_file, capsys):
    ckpt = torch.load(out_dir / "ckpt.pt", weights_only=False)
    ckpt["model"] = None
    torch.save(ckpt, out_dir / "ckpt.pt")
    err = sample_error(sample_args(out_dir, gpt2_ranks_file), capsys)
    assert "its 'model' is a NoneType" in err, err


def test_out_dir_may_be_the_checkpoint_file(out_dir, gpt2_ranks_file):
    """--out_dir=.../ckpt.pt samples from that file (as read_checkpoint takes a file), the same text as its folder."""
    by_file = sample.main(sample_args(out_dir / "ckpt.pt", gpt2_ranks_file, "--temperature=0"))
    assert by_file == sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0"))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_bf16_checkpoint_samples_in_float32_weights(dtype, out_dir, gpt2_ranks_file, monkeypatch):
    """dtype float32 (or float16, autocast) over a checkpoint saved in bf16: the weights are cast to float32, as the
    speed line says (they stayed bf16); float16 runs under float16 autocast, float32 under none."""
    ckpt = torch.load(out_dir / "ckpt.pt", weights_only=False)
    ckpt["model"] = {k: v.to(torch.bfloat16) for k, v in ckpt["model"].items()}
    torch.save(ckpt, out_dir / "ckpt.pt")
    seen = record_generate_calls(monkeypatch, lambda model, args, kwargs: (
        model.lm_head.weight.dtype, torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu")))
    sample.main(sample_args(out_dir, gpt2_ranks_file, f"--dtype={dtype}"))
    assert seen and set(seen) == {(torch.float32, torch.float16 if dtype == "float16" else False)}


@pytest.mark.parametrize("temperature", ["0", "0.8"])
def test_a_checkpoint_with_nan_weights_is_one_line(temperature, tmp_path, gpt2_ranks_file, capsys):
    """nan weights make every logit nan: one line naming the checkpoint, exit 2, at the sampled default and greedy
    too (before: greedy printed token 0 at every step without a word, and the sampled draw was a traceback)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False))
    with torch.no_grad():
        model.transformer.ln_f.weight.fill_(float("nan"))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(tmp_path / "ckpt.pt", make_checkpoint(model, opt, {}))
    err = sample_error(sample_args(tmp_path, gpt2_ranks_file, f"--temperature={temperature}"), capsys)
    assert "contained inf or nan" in err and str(tmp_path / "ckpt.pt") in err


def test_a_vanishing_temperature_samples_greedily(out_dir, gpt2_ranks_file, capsys):
    """A temperature below float32's smallest normal number (1e-50: valid, > 0) decodes greedily (before: the
    scores' division by a float32 0 gave nan, and generate blamed the model)."""
    greedy = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager"))
    assert sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=1e-50", "--decode=eager")) == greedy


def test_samples_and_speed_on_stderr(out_dir, gpt2_ranks_file, capsys):
    samples = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager"))
    captured = capsys.readouterr()
    assert len(samples) == 2 and all(s.startswith("ROMEO:") for s in samples)
    assert captured.out.count("---------------") == 2 and "tokens/s" not in captured.out
    assert "sampled 10 tokens in" in captured.err and "tokens/s" in captured.err
    assert "batch_size" not in captured.err  # one row a call: no batch to name
    # the rate is the tokens over the seconds (both as printed: the seconds to 0.01, the rate to 0.1)
    n, s, rate = re.search(r"sampled (\d+) tokens in ([\d.]+) s: ([\d,.]+) tokens/s", captured.err).groups()
    n, s, rate = int(n), float(s), float(rate.replace(",", ""))
    assert n / (s + 0.005) - 0.05 <= rate <= n / max(s - 0.005, 1e-9) + 0.05, captured.err
    sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager", "--num_samples=1"))
    assert "after the first" not in capsys.readouterr().err  # one call: no calls after the first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("device", ["", "cuda", "cuda:0"])
def test_cuda_device_spellings_sample(device, out_dir, gpt2_ranks_file, capsys):
    """sample.py on the GPU at each way of naming it ('' is the default): the default decode mode gives the eager
    loop's greedy text (session 35 left sample.py failing at a bare 'cuda', found by session 36 call 1)."""
    def run(*extra):
        args = [a for a in sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--num_samples=1",
                                       "--dtype=float32", *extra) if a != "--device=cpu"]
        return sample.main(args)

    eager = run("--device=cuda:0", "--decode=eager")
    assert run(*([f"--device={device}"] if device else [])) == eager


def test_batched_samples(out_dir, gpt2_ranks_file, capsys, monkeypatch):
    """--batch_size: the samples drawn as rows of one generate call each (the last call padded to the same rows,
    its extras dropped); greedy, every row is the one-at-a-time greedy text; the speed line names the batch."""
    one = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager", "--num_samples=1"))
    shapes = record_generate_calls(monkeypatch, lambda model, args, kwargs: tuple(args[0].shape))
    capsys.readouterr()
    got = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager", "--num_samples=5",
                                  "--batch_size=2"))
    captured = capsys.readouterr()
    assert got == one * 5 and captured.out.count("---------------") == 5
    assert [s[0] for s in shapes] == [2, 2, 2]
    # every decoded row counts, the last batch's extra one too (it is decoded and timed), and says so
    assert "sampled 30 tokens in" in captured.err
    assert "batch_size 2; 1 extra row(s) of the last batch decoded, not printed)" in captured.err
    assert "after the first batch of 2: 20 tokens in" in captured.err
    sampled = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=1.0", "--decode=eager", "--num_samples=4",
                                      "--batch_size=4", "--max_new_tokens=12"))
    assert len(sampled) == 4 and len(set(sampled)) > 1  # rows draw their own tokens
    # fewer samples than batch_size: a batch of num_samples rows, nothing extra
    shapes.clear()
    capsys.readouterr()
    assert len(sample.main(sample_args(out_dir, gpt2_ranks_file, "--decode=eager", "--batch_size=4",
                                       "--max_new_tokens=1"))) == 2
    assert [s[0] for s in shapes] == [2] and "batch_size 2)" in capsys.readouterr().err


def test_seed_fixes_the_sampled_text(out_dir, gpt2_ranks_file):
    """--seed: the same seed draws the same sampled text (temperature 1.0), another seed other text."""
    def run(seed):
        return sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=1.0", "--decode=eager",
                                       f"--seed={seed}", "--max_new_tokens=8"))

    first = run(1)
    assert run(1) == first and run(2) != first


def test_top_k_one_is_greedy(out_dir, gpt2_ranks_file):
    """--top_k reaches the draw: top_k=1 at temperature 1.0 keeps only the most likely token, the greedy text
    (without the limit, 8 draws over 50,257 ids from this untrained model are not the greedy ones)."""
    greedy = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager",
                                     "--max_new_tokens=8"))
    for seed in (1, 2):
        assert sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=1.0", "--top_k=1", "--decode=eager",
                                       f"--seed={seed}", "--max_new_tokens=8")) == greedy


def test_top_k_zero_draws_from_every_token(out_dir, gpt2_ranks_file, monkeypatch):
    """--top_k=0 (allowed: 'all tokens') samples with no top-k limit: generate is given none."""
    seen = record_generate_calls(monkeypatch, lambda model, args, kwargs: kwargs["top_k"])
    samples = sample.main(sample_args(out_dir, gpt2_ranks_file, "--top_k=0", "--temperature=1.0", "--decode=eager"))
    assert len(samples) == 2 and seen == [None, None]


def test_decode_keys_reach_generate(out_dir, gpt2_ranks_file, monkeypatch, capsys):
    calls = []
    real = GPT.generate

    def spy(self, *args, decode="auto", compile=False, compile_mode="default", **kwargs):
        calls.append((decode, compile, compile_mode))
        return real(self, *args, decode=decode, **kwargs)  # compiled: test_compiled_decode_step_same_tokens

    monkeypatch.setattr(GPT, "generate", spy)
    sample.main(sample_args(out_dir, gpt2_ranks_file, "--decode=eager", "--num_samples=1"))
    sample.main(sample_args(out_dir, gpt2_ranks_file, "--decode=auto", "--num_samples=1", "--compile=True"))
    sample.main(sample_args(out_dir, gpt2_ranks_file, "--decode=eager", "--num_samples=1", "--compile=True",
                            "--compile_mode=max-autotune"))
    assert calls == [("eager", False, "default"), ("auto", True, "default"), ("eager", True, "max-autotune")]
    err = capsys.readouterr().err  # the speed lines name the mode each run decoded in
    assert "(decode=eager, cpu" in err and "(decode=auto, compiled (default), cpu" in err
    assert "(decode=eager, compiled (max-autotune), cpu" in err


def test_compile_needs_the_cache(out_dir, gpt2_ranks_file, capsys):
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--compile=True", "--use_cache=False"), capsys)
    assert "compile" in err and "use_cache" in err


def test_compile_mode_errors(out_dir, gpt2_ranks_file, capsys):
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--compile=True", "--compile_mode=fastest"), capsys)
    assert "compile_mode='fastest'" in err and "'max-autotune'" in err and "'default'" in err
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--compile_mode=max-autotune"), capsys)
    assert "compile_mode" in err and "compile=True" in err


def test_compile_mode_reaches_torch_compile(monkeypatch):
    """The decode step is compiled with inductor's own CUDA graphs off (it is captured in ours); a new mode
    is a new decoder, and an unknown mode is a ValueError before anything is built."""
    seen = []

    def fake_compile(fn, **kwargs):
        seen.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False, vocab_size=64)).eval()
    x = torch.randint(0, 64, (1, 4))
    model.generate(x, 3, temperature=0, decode="eager", compile=True, compile_mode="max-autotune")
    model.generate(x, 3, temperature=0, decode="eager", compile=True)
    assert seen == [dict(dynamic=False, mode="max-autotune-no-cudagraphs"), dict(dynamic=False, mode=None)]
    with pytest.raises(ValueError, match="compile_mode='reduce-overhead' is unknown"):
        model.generate(x, 3, decode="eager", compile=True, compile_mode="reduce-overhead")


def test_compiled_decode_step_same_tokens():
    """GPT.generate(compile=True) (what sample.py --compile=True runs): the torch.compiled decode step
    gives the greedy tokens of the plain one (Tucker with latent RoPE, whose step has the most pieces)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False, vocab_size=64, attn="tucker",
                          tucker_ranks=(2, 8, 8), pos_emb="rope")).eval()
    x = torch.randint(0, 64, (2, 4))
    compiled = model.generate(x, 6, temperature=0, decode="eager", compile=True)
    assert torch.equal(compiled, model.generate(x, 6, temperature=0, decode="eager"))


def test_greedy_text_same_with_and_without_the_cache(out_dir, gpt2_ranks_file, monkeypatch, capsys):
    # use_cache reaches generate (else both runs are the cached one and the equality proves nothing)
    seen = record_generate_calls(monkeypatch, lambda model, args, kwargs: kwargs["use_cache"])
    cached = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--decode=eager"))
    capsys.readouterr()
    plain = sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0", "--use_cache=False"))
    assert cached == plain and "tokens/s (uncached, cpu float32)" in capsys.readouterr().err  # the speed line says so
    assert seen == [True, True, False, False]


def test_bfloat16_samples_with_bf16_weights(out_dir, gpt2_ranks_file, capsys, monkeypatch):
    # the weights generate runs with (the speed line only repeats the dtype key)
    seen = record_generate_calls(monkeypatch, lambda model, args, kwargs: model.lm_head.weight.dtype)
    samples = sample.main(sample_args(out_dir, gpt2_ranks_file, "--dtype=bfloat16", "--num_samples=2"))
    assert len(samples) == 2 and seen and set(seen) == {torch.bfloat16}
    err = capsys.readouterr().err
    assert "cpu bfloat16" in err and "after the first sample" in err


@pytest.fixture
def padding_out_dir(tmp_path):
    """A tiny GPT over GPT-2's padded vocabulary (50,304 ids, the tokenizer's 50,257) whose logits favor the
    padding ids 50,257 .. 50,303 for any input: the real ids' output rows zero, the padding ids' rows large."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False))
    with torch.no_grad():
        head = model.lm_head.weight  # (vocab, d), the input embedding too (tied)
        head[:50257] = 0.0
        head[50257:] = 100.0 * torch.randn(head.size(0) - 50257, head.size(1))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(tmp_path / "ckpt.pt", make_checkpoint(model, opt, {}))
    return tmp_path


@pytest.mark.parametrize("extra", [("--temperature=0",), ("--temperature=1.0",), ("--use_cache=False",)])
def test_padding_ids_are_never_sampled(padding_out_dir, gpt2_ranks_file, extra, monkeypatch):
    """The model's padded ids decode to nothing (tiktoken's KeyError): sample.py samples only the tokenizer's ids,
    though here the padding ids hold all the probability."""
    ids = []
    real = GPT.generate

    def spy(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        ids.append(out)
        return out

    monkeypatch.setattr(GPT, "generate", spy)
    samples = sample.main(sample_args(padding_out_dir, gpt2_ranks_file, "--max_new_tokens=8", *extra))
    assert len(samples) == 2 and len(ids) == 2
    assert all(int(y.max()) < 50257 for y in ids)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False))
    model.load_state_dict(torch.load(padding_out_dir / "ckpt.pt", weights_only=False)["model"])
    x = ids[0][:, :2]  # "ROMEO:" is two tokens; without the limit greedy decoding takes a padding id
    assert int(model.eval().generate(x, 1, temperature=0, decode="eager")[0, -1]) >= 50257


@pytest.mark.parametrize("what,says", [("folder", "is a folder"), ("latin1", "is not UTF-8 text"),
                                       ("missing", "not found")])
def test_unreadable_prompt_file(what, says, out_dir, gpt2_ranks_file, tmp_path, capsys):
    path = tmp_path / "prompt"
    if what == "folder":
        path.mkdir()
    elif what == "latin1":
        path.write_bytes(b"\xff\xfe caf\xe9")
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, f"--start=FILE:{path}"), capsys)
    assert str(path) in err and says in err, err


def test_a_prompt_file_under_the_home_folder_is_found(out_dir, gpt2_ranks_file, tmp_path, monkeypatch):
    """--start=FILE:~/p.txt: the ~ is the home folder (the shell does not expand it after FILE:)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "p.txt").write_text("ROMEO:", encoding="utf-8")
    got = sample.main(sample_args(out_dir, gpt2_ranks_file, "--start=FILE:~/p.txt", "--temperature=0"))
    assert got == sample.main(sample_args(out_dir, gpt2_ranks_file, "--temperature=0"))  # sample_args' ROMEO:


def test_a_prompt_file_with_a_byte_order_mark_is_the_same_prompt(out_dir, gpt2_ranks_file, tmp_path):
    """A UTF-8 file that an editor began with a byte-order mark gives the prompt without it (the mark is not text:
    tokenized, it is three bytes of noise before the prompt)."""
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("ROMEO:", encoding="utf-8")
    marked.write_text("ROMEO:", encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    runs = [sample.main(sample_args(out_dir, gpt2_ranks_file, f"--start=FILE:{p}", "--decode=eager", "--temperature=0"))
            for p in (plain, marked)]
    assert runs[0] == runs[1] and runs[0][0].startswith("ROMEO:")


def test_a_bad_byte_after_a_byte_order_mark_is_named_at_its_offset(out_dir, gpt2_ranks_file, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xef\xbb\xbfROM\xffEO")  # the 0xff at byte 6 of the file
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, f"--start=FILE:{bad}"), capsys)
    assert "is not UTF-8 text (invalid start byte at byte 6)" in err, err


def test_a_tokenizer_file_that_is_not_gpt2s_is_one_line(out_dir, tmp_path, capsys):
    bad = tmp_path / "input.txt"
    bad.write_text("First Citizen:\n")
    err = sample_error(sample_args(out_dir, bad), capsys)
    assert str(bad) in err and "tiktoken ranks file" in err, err


def test_no_tokenizer_offline_is_one_line(out_dir, gpt2_ranks_file, capsys, monkeypatch):
    """Without --tokenizer and TUCKER_GPT2_TIKTOKEN, on a machine that cannot download tiktoken's ranks: one line
    saying to set TUCKER_GPT2_TIKTOKEN, exit 2 (not the download's traceback)."""
    import tiktoken

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.delenv("TUCKER_GPT2_TIKTOKEN", raising=False)
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    args = [a for a in sample_args(out_dir, gpt2_ranks_file) if not a.startswith("--tokenizer=")]
    err = sample_error(args, capsys)
    assert "could not load tiktoken's 'gpt2' encoding" in err and "TUCKER_GPT2_TIKTOKEN=" in err, err


def test_a_prompt_of_block_size_tokens_is_taken(out_dir, gpt2_ranks_file, tmp_path, capsys):
    """The context holds block_size tokens: a prompt that long is decoded (the cache refilled from its last half
    after it), one token more is refused."""
    from tokenizer import get_gpt2_encoding
    enc = get_gpt2_encoding(str(gpt2_ranks_file))
    ids = enc.encode(" the" * 40)[:33]  # one token a word
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(enc.decode(ids[:32]))
    assert len(enc.encode(prompt.read_text())) == 32  # the tiny model's block_size
    samples = sample.main(sample_args(out_dir, gpt2_ranks_file, f"--start=FILE:{prompt}", "--decode=eager"))
    assert len(samples) == 2
    prompt.write_text(enc.decode(ids))
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, f"--start=FILE:{prompt}"), capsys)
    assert "the prompt is 33 tokens" in err and "block_size=32" in err, err


def test_prompt_outside_the_models_vocabulary(tmp_path, gpt2_ranks_file, capsys):
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=32, bias=False, vocab_size=64))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(tmp_path / "ckpt.pt", make_checkpoint(model, opt, {}))
    err = sample_error(sample_args(tmp_path, gpt2_ranks_file), capsys)  # "ROMEO:" holds ids above 63
    assert "vocab_size is 64" in err, err
    err = sample_error(sample_args(tmp_path, gpt2_ranks_file, "--start=a"), capsys)  # "a" is id 64: one past the last
    assert "token id 64" in err and "vocab_size is 64" in err, err


def test_an_empty_prompt_is_one_line(out_dir, gpt2_ranks_file, capsys):
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--start="), capsys)
    assert "the prompt is empty" in err, err
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--start=FILE:"), capsys)  # was "prompt file  not found"
    assert "--start=FILE: names no file" in err, err


def test_generate_vocab_limit_cached_equals_uncached():
    """generate(vocab_limit=k) samples ids below k only, the same tokens with and without the cache (zero
    tolerance), and its first greedy token is the argmax of the forward's first k logits; a limit outside
    1 .. vocab_size is a ValueError naming it."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, bias=False, vocab_size=64)).eval()
    x = torch.randint(0, 64, (3, 5))
    for temperature in (0.0, 1.0):
        got = [model.generate(x, 12, temperature=temperature, vocab_limit=20, use_cache=cache, decode="eager",
                              generator=torch.Generator().manual_seed(1)) for cache in (True, False)]
        assert torch.equal(got[0], got[1]) and int(got[0][:, 5:].max()) < 20
    first = model(x, last_only=True)[0][:, -1, :20].argmax(-1)
    assert torch.equal(model.generate(x, 1, temperature=0, vocab_limit=20, decode="eager")[:, -1], first)
    assert model.generate(x, 2, vocab_limit=64, decode="eager").shape == (3, 7)  # the whole vocabulary is a limit
    for bad in (0, 65):
        with pytest.raises(ValueError, match=f"vocab_limit={bad} is out of range"):
            model.generate(x, 1, vocab_limit=bad, decode="eager")


@pytest.mark.parametrize("stop", [True, False])
def test_stop_at_eot_cuts_each_sample_at_its_first_generated_eot(stop, out_dir, gpt2_ranks_file, monkeypatch):
    """stop_at_eot=True prints each sample up to its first generated <|endoftext|> (50256): a row with one is cut
    before it, a row without one is whole, and the prompt's own EOT is kept. Off, every token is printed."""
    from tokenizer import get_gpt2_encoding
    enc = get_gpt2_encoding(str(gpt2_ranks_file))
    eot, a, b = enc.eot_token, enc.encode(" to")[0], enc.encode(" be")[0]
    made = [[a, eot, b, a, eot], [b, b, a, a, b]]  # row 0: an EOT as its second token (and a later one)

    def fake_generate(self, idx, max_new_tokens, **kwargs):
        assert max_new_tokens == 5
        return torch.cat([idx, torch.tensor(made[:len(idx)])], dim=1)

    monkeypatch.setattr(GPT, "generate", fake_generate)
    start = "<|endoftext|>ROMEO:"
    prompt = enc.encode(start, allowed_special={"<|endoftext|>"})
    samples = sample.main(sample_args(out_dir, gpt2_ranks_file, f"--start={start}", "--batch_size=2",
                                      f"--stop_at_eot={stop}"))
    cut = [made[0][:1], made[1]] if stop else made
    assert samples == [enc.decode(prompt + row) for row in cut]


def test_the_one_launch_steps_own_refusal_is_one_line(out_dir, gpt2_ranks_file, capsys, monkeypatch):
    """--decode=mega where the step kernel refuses only once built on the GPU (decode_wide: a program's shared memory
    beyond what this GPU gives one, e.g. fp32 weights on an RTX 4090): one line naming decode='mega' and the reason,
    exit 2, not a traceback from inside generate. Another decode's ValueError is not reworded."""
    import decode_mega
    from model import GPT
    monkeypatch.setattr(sample, "check_decode", lambda *a: None)  # as on a GPU
    monkeypatch.setattr(decode_mega, "unsupported", lambda model, rows: None)
    why = "decode_wide: torch.float32 weights, BK=128, STAGES=4, batch 8: a program's pipelined tiles take 122880 B"

    def refuse(self, *a, **kw):
        raise ValueError(why)
    monkeypatch.setattr(GPT, "generate", refuse)
    err = sample_error(sample_args(out_dir, gpt2_ranks_file, "--decode=mega"), capsys)
    assert err.startswith("error: decode='mega' cannot serve this checkpoint's model here: " + why)
    with pytest.raises(ValueError, match="decode_wide: torch.float32"):
        sample.main(sample_args(out_dir, gpt2_ranks_file, "--decode=eager"))
