"""
Zero-shot evaluation (scripts/eval_zeroshot.py, eval_tasks/cbt) on a tiny random GPT, offline.

- loglikelihood equals the model's own token log-probabilities from one plain forward pass
  (float64 model, so batching and padding must not move a score by more than rounding),
  including empty contexts, trailing spaces and contexts longer than block_size;
- loglikelihood_rolling on a document of ~3 block_size tokens equals the sum of per-token
  log-probs over windows written out here independently;
- generate_until stops before the stop string and otherwise equals greedy model.generate;
- a checkpoint in train.py's format runs end to end through the script (lm_eval.simple_evaluate)
  on local multiple-choice, perplexity and CBT-format tasks, and writes zeroshot.json;
- the CBT task YAMLs parse and lm-eval's TaskManager finds cbt_cn and cbt_ne (no download);
- scripts/results.py puts each run's zeroshot.json beside the paper's zero-shot numbers.
"""
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from checkpoint import make_checkpoint, save_checkpoint
from model import GPT, GPTConfig
from tokenizer import EOT, VOCAB_SIZE, get_gpt2_encoding

BLOCK = 32
# tab_gpt2's zero-shot columns, in the paper's order (WikiText2 and LAMBADA perplexity, their mean,
# LAMBADA, CBT-CN, CBT-NE, HellaSwag, WinoGrande, PIQA, ARC-E, ARC-C accuracy, their mean)
PAPER_ZERO_SHOT_COLUMNS = ("wikitext2_ppl", "lambada_ppl", "mean_ppl", "lambada_acc", "cbt_cn_acc", "cbt_ne_acc",
                           "hellaswag_acc", "winogrande_acc", "piqa_acc", "arc_e_acc", "arc_c_acc", "mean_acc")
# Tucker attention with RoPE; vocab padded to 50304 as in training (the wrapper drops the padding)
CONFIG = dict(block_size=BLOCK, vocab_size=50304, n_layer=2, n_head=2, n_embd=32, attn="tucker",
              tucker_ranks=(2, 16, 8), pos_emb="rope", bias=False)


@pytest.fixture(scope="module")
def ez():
    pytest.importorskip("lm_eval")
    from scripts import eval_zeroshot
    return eval_zeroshot


@pytest.fixture(scope="module")
def enc(gpt2_ranks_file):
    return get_gpt2_encoding(str(gpt2_ranks_file))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CONFIG)).double().eval()
    # At GPT-2's init a tiny model with tied embeddings only repeats its last input token;
    # larger weights make greedy text (and the log-probs) vary, which the tests need.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and "wte" not in name:
                p.normal_(0.0, 0.5)
    return model


@pytest.fixture(scope="module")
def lm(ez, model, gpt2_ranks_file):
    # batch_size 3: batches mix lengths, so right padding is exercised
    return ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size=3)


def _req(kind, *args):
    from lm_eval.api.instance import Instance
    return Instance(request_type=kind, doc={}, arguments=args, idx=0)


@torch.no_grad()
def _token_logprobs(model, inputs):
    """log p(next token) at every position of one unpadded sequence, over GPT-2's real tokens."""
    logits, _ = model(torch.tensor([inputs]))
    return F.log_softmax(logits[0, :, :VOCAB_SIZE].double(), dim=-1)


def _direct_loglikelihood(model, enc, context, continuation):
    """The same request scored by hand: tokens split as lm-eval does, left-truncated input."""
    stripped = context.rstrip()
    moved = context[len(stripped):]  # trailing whitespace goes to the continuation
    if stripped == "":  # an empty context, or one of whitespace only: <|endoftext|> is the context
        ctx, cont = [EOT], enc.encode(moved + continuation)
    else:
        ctx = enc.encode(stripped)
        cont = enc.encode(stripped + moved + continuation)[len(ctx):]
    seq = (ctx + cont)[-(BLOCK + 1):]
    logp = _token_logprobs(model, seq[:-1])[-len(cont):]
    target = torch.tensor(cont)
    ll = logp.gather(-1, target[:, None]).sum().item()
    return ll, bool((logp.argmax(-1) == target).all()), len(ctx) + len(cont)


def test_the_device_is_made_current(ez, model, gpt2_ranks_file, monkeypatch):
    """TuckerLM makes its device current (make_current: cuda:N, where the model's Triton kernels launch; on a
    second GPU they would otherwise launch on the first with the second's pointers)."""
    seen = []
    monkeypatch.setattr(ez, "make_current", seen.append)
    ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size=3, device="cpu")
    assert seen == [torch.device("cpu")]


def test_loglikelihood_matches_forward_pass(lm, model, enc, shakespeare_txt):
    long_context = shakespeare_txt.read_text()[:600]
    # a continuation the model itself would produce greedily: is_greedy must come out True
    prompt = enc.encode("Once upon a time")
    greedy = model.generate(torch.tensor([prompt]), 2, temperature=0)[0, len(prompt):].tolist()
    # continuations greedy in one of their two tokens only: is_greedy is every token's (with no such case, a flag of
    # any token, of the first or of the last alone passed)
    the = enc.encode(" the")
    after_the = model.generate(torch.tensor([prompt + the]), 1, temperature=0)[0, -1:].tolist()
    assert the[0] not in greedy  # so " the" is the one token not greedy in each
    mixed = [greedy[:1] + the, the + after_the]
    cases = [("The quick brown fox", " jumps over the lazy dog"),
             ("", "Hello world"),
             ("Hello ", "world, again"),  # the trailing space moves to the continuation
             ("Question one\n", "Answer"),  # so does a trailing newline (rstrip(), as lm-eval)
             (" ", "Hello"),  # a context of whitespace only: <|endoftext|> is the context
             ("The price is 1", "23 dollars"),  # " 123" is one token: the continuation is the whole's tail
             ("A", " b"),
             (long_context, " and so the story ends here."),  # longer than block_size: truncated
             *[("Once upon a time", enc.decode(m)) for m in mixed],
             ("Once upon a time", enc.decode(greedy))]
    got = lm.loglikelihood([_req("loglikelihood", c, x) for c, x in cases])
    for (c, x), (ll, is_greedy) in zip(cases, got):
        want_ll, want_greedy, n_tokens = _direct_loglikelihood(model, enc, c, x)
        assert ll == pytest.approx(want_ll, abs=1e-9, rel=1e-12), (c[:20], x)
        assert is_greedy == want_greedy, (c[:20], x)
    assert _direct_loglikelihood(model, enc, long_context, cases[7][1])[2] > 3 * BLOCK
    # the greedy continuation re-encodes to the same tokens (else pick another prompt), so the
    # wrapper must call it greedy
    assert enc.encode("Once upon a time" + enc.decode(greedy)) == prompt + greedy
    assert got[-1][1] is True
    assert all(enc.encode("Once upon a time" + enc.decode(m)) == prompt + m for m in mixed)
    assert [is_greedy for _, is_greedy in got[-3:-1]] == [False, False]
    assert all(ll < 0 for ll, _ in got)


def test_loglikelihood_rolling_windows(lm, model, enc, shakespeare_txt):
    text = shakespeare_txt.read_text()[:2000]
    toks = enc.encode(text)
    cut = 3 * BLOCK + 5  # 3 full windows and a short last one
    doc = enc.decode(toks[:cut])
    toks = enc.encode(doc)
    L = len(toks)
    assert 3 * BLOCK < L < 4 * BLOCK

    # by hand: <|endoftext|> + the first BLOCK - 1 tokens predict tokens 0..BLOCK-1; each later
    # window predicts up to BLOCK new tokens from the BLOCK tokens before its last one
    total, scored = 0.0, []
    logp = _token_logprobs(model, [EOT] + toks[:BLOCK - 1])
    total += sum(logp[i, toks[i]].item() for i in range(BLOCK))
    scored += list(range(BLOCK))
    start = BLOCK
    while start < L:
        end = min(start + BLOCK, L)
        inputs = toks[end - BLOCK - 1:end - 1]  # full context, ending right before token end-1
        logp = _token_logprobs(model, inputs)
        for pos in range(start, end):  # input index of the token predicting toks[pos]
            total += logp[pos - (end - BLOCK), toks[pos]].item()
        scored += list(range(start, end))
        start = end
    assert scored == list(range(L))  # every token exactly once

    short = "To be, or not to be"
    st = enc.encode(short)
    logp = _token_logprobs(model, [EOT] + st[:-1])
    want_short = sum(logp[i, st[i]].item() for i in range(len(st)))

    got = lm.loglikelihood_rolling([_req("loglikelihood_rolling", doc), _req("loglikelihood_rolling", short)])
    assert got[0] == pytest.approx(total, abs=1e-9, rel=1e-12)
    assert got[1] == pytest.approx(want_short, abs=1e-9, rel=1e-12)


def test_generate_until(lm, model, enc):
    prompt = "ROMEO:"
    x = torch.tensor([enc.encode(prompt)])
    new = model.generate(x, 12, temperature=0, use_cache=True)[0, x.size(1):].tolist()
    assert all(t < VOCAB_SIZE for t in new)
    full = enc.decode(new)
    # a stop string that first occurs inside the generation (not at its start)
    stop = next(s for s in (enc.decode([t]) for t in new[1:]) if s.strip() and s.isascii() and full.find(s) > 0)
    want = full.split(stop)[0]
    got = lm.generate_until([_req("generate_until", prompt, {"until": [stop], "max_gen_toks": 12}),
                             _req("generate_until", prompt, {"until": ["never appears"], "max_gen_toks": 12})])
    assert got[0] == want and stop not in got[0] and len(got[0]) < len(full)
    assert got[1] == full



def test_tokens_follow_lm_evals_gpt2_tokenizer(lm, enc):
    """tok_encode turns a literal <|endoftext|> into the token (as HF's GPT-2 tokenizer, lm-eval's reference); an
    empty context is <|endoftext|>, and a continuation that starts with it gives that token as the context (it is
    not scored); tok_decode drops the padded vocabulary's ids (>= 50257), which have no text."""
    assert lm.tok_encode("one<|endoftext|>two") == enc.encode("one<|endoftext|>two", allowed_special="all")
    assert EOT in lm.tok_encode("one<|endoftext|>two")
    assert lm.encode_pair("", "Hello there") == ([EOT], enc.encode("Hello there"))
    assert lm.encode_pair("", "<|endoftext|>Hello there") == ([EOT], enc.encode("Hello there"))
    ids = enc.encode("hi there")
    assert lm.tok_decode(ids + [VOCAB_SIZE, CONFIG["vocab_size"] - 1]) == "hi there"
    assert lm.tok_decode([VOCAB_SIZE - 1]) == "<|endoftext|>"  # the last real id is kept


def test_score_tokens_refuses_what_it_cannot_score(lm, enc):
    """A request needs a context and a continuation of 1..block_size tokens: an empty one, or one longer than the
    window (its first tokens would be scored against the wrong positions), is a ValueError; block_size is taken."""
    ctx = enc.encode("Once upon a time")
    for pair in (([], ctx), (ctx, []), (ctx, [11] * (BLOCK + 1))):
        with pytest.raises(ValueError, match=f"1..block_size={BLOCK}"):
            lm.score_tokens([pair])
    with pytest.raises(ValueError, match="block_size"):
        lm.loglikelihood([_req("loglikelihood", "Once", " upon" * (BLOCK + 1))])
    (ll, _), = lm.score_tokens([(ctx, [11] * BLOCK)])
    assert math.isfinite(ll) and ll < 0


def test_generate_until_prompt_and_stops(lm, model, enc, monkeypatch):
    """What generate_until hands model.generate and what it keeps: the prompt is the context's last block_size -
    max_gen_toks tokens, at least half a block (lm-eval's HF model leaves the same room), <|endoftext|> when the
    context is empty; max_gen_toks defaults to lm-eval's 256; the text stops before <|endoftext|> and before each
    stop string, one given as a bare string being one stop (not its characters)."""
    calls = []
    out = enc.encode("Hello world, how are you") + [EOT] + enc.encode(" after the end")

    def generate(x, max_new_tokens, temperature, use_cache):
        calls.append((x[0].tolist(), max_new_tokens, temperature))
        return torch.cat([x, torch.tensor([out[:max_new_tokens]])], dim=1)

    monkeypatch.setattr(model, "generate", generate)
    long_context = enc.decode(list(range(1000, 1000 + 3 * BLOCK)))
    ctx = enc.encode(long_context)
    got = lm.generate_until([_req("generate_until", long_context, {"until": ["never"], "max_gen_toks": 12}),
                             _req("generate_until", long_context, {"until": "never"}),
                             _req("generate_until", "", {"until": [], "max_gen_toks": 12}),
                             _req("generate_until", "ROMEO:", {"until": "ow", "max_gen_toks": 12}),
                             _req("generate_until", "ROMEO:", {"until": ["are", ","], "max_gen_toks": 12})])
    assert [c[0] for c in calls[:3]] == [ctx[-(BLOCK - 12):], ctx[-(BLOCK // 2):], [EOT]]
    assert [c[1] for c in calls] == [12, 256, 12, 12, 12] and all(c[2] == 0 for c in calls)
    assert got[:3] == ["Hello world, how are you"] * 3  # cut at <|endoftext|>
    assert got[3] == "Hello world, h" and got[4] == "Hello world"


def test_paper_row(ez):
    metrics = {"wikitext": {"word_perplexity": 40.0}, "lambada_openai": {"perplexity": 20.0, "acc": 0.3},
               "cbt_cn": {"acc": 0.8}, "cbt_ne": {"acc": 0.6}, "winogrande": {"acc": 0.5}}
    for t in ("hellaswag", "piqa", "arc_easy", "arc_challenge"):
        metrics[t] = {"acc": 0.25, "acc_norm": 0.45}
    row = ez.paper_row(metrics)
    assert list(row) == list(PAPER_ZERO_SHOT_COLUMNS)
    assert row["mean_ppl"] == pytest.approx(30.0)
    assert row["hellaswag_acc"] == pytest.approx(45.0) and row["lambada_acc"] == pytest.approx(30.0)
    assert row["mean_acc"] == pytest.approx((30 + 80 + 60 + 45 + 50 + 45 + 45 + 45) / 8)
    assert ez.paper_row(metrics, "acc")["arc_c_acc"] == pytest.approx(25.0)
    zero = ez.paper_row({**metrics, "winogrande": {"acc": 0.0}})  # a metric of 0 is a value, not a task not run
    assert zero["winogrande_acc"] == 0.0 and zero["mean_acc"] == pytest.approx((30 + 80 + 60 + 45 + 45 + 45 + 45) / 8)
    partial = ez.paper_row({"lambada_openai": {"perplexity": 20.0, "acc": 0.3}})
    assert partial["lambada_ppl"] == 20.0 and partial["mean_ppl"] is None and partial["mean_acc"] is None



def test_flatten_results_drops_the_filter_and_the_alias(ez):
    """lm-eval's 'metric,filter' keys become the metric's name, and the task's alias (a string) is dropped."""
    res = {"piqa": {"alias": "piqa", "acc,none": 0.6, "acc_stderr,none": 0.01, "acc_norm,none": 0.62}}
    assert ez.flatten_results(res) == {"piqa": {"acc": 0.6, "acc_stderr": 0.01, "acc_norm": 0.62}}


def test_dtype_runs_the_model_under_autocast(ez, model, gpt2_ranks_file):
    """dtype=bfloat16 runs the forward pass under autocast (its matmuls in bfloat16, the log-softmax in float32, so
    the scores move only by bfloat16's rounding); float32 runs without it; an unknown dtype is a ValueError."""
    import copy
    m32 = copy.deepcopy(model).float()
    seen = []
    m32.lm_head.register_forward_hook(lambda mod, inp, out: seen.append(out.dtype))
    scores = {}
    for dtype in ("float32", "bfloat16"):
        lm = ez.TuckerLM(model=m32, tokenizer=str(gpt2_ranks_file), dtype=dtype)
        scores[dtype] = lm.loglikelihood([_req("loglikelihood", "Once upon a time", " there was")])[0][0]
    assert seen == [torch.float32, torch.bfloat16]
    assert scores["bfloat16"] != scores["float32"] and scores["bfloat16"] == pytest.approx(scores["float32"], rel=0.1)
    with pytest.raises(ValueError, match="dtype='float64' is unknown"):
        ez.TuckerLM(model=m32, tokenizer=str(gpt2_ranks_file), dtype="float64")


def test_cbt_tasks_listed_and_parse(ez):
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml
    for name in ("CN", "NE"):
        cfg = load_yaml(ez.EVAL_TASKS_DIR / "cbt" / f"cbt_{name.lower()}.yaml")
        assert cfg["task"] == f"cbt_{name.lower()}" and cfg["dataset_path"] == "cam-cst/cbt"
        assert cfg["dataset_name"] == name and cfg["test_split"] == "test"
        assert cfg["output_type"] == "multiple_choice" and callable(cfg["doc_to_choice"])
    tm = TaskManager(include_path=str(ez.EVAL_TASKS_DIR), include_defaults=False)  # lm-eval's own: 10 s more
    assert {"cbt_cn", "cbt_ne"} <= set(tm.all_subtasks)
    # the other paper tasks ship with the pinned lm-eval under these names
    import lm_eval
    shipped = Path(lm_eval.__file__).parent / "tasks"
    for name, file in (("wikitext", "wikitext/wikitext.yaml"), ("lambada_openai", "lambada/lambada_openai.yaml"),
                       ("hellaswag", "hellaswag/hellaswag.yaml"), ("winogrande", "winogrande/default.yaml"),
                       ("piqa", "piqa/piqa.yaml"), ("arc_easy", "arc/arc_easy.yaml"),
                       ("arc_challenge", "arc/arc_challenge.yaml")):
        assert load_yaml(shipped / file, resolve_func=False)["task"] == name
    assert set(ez.PAPER_TASKS) == {task for task, _ in ez.ROW_SOURCES.values()}

    doc = _cbt_doc(0)
    text = cfg["doc_to_text"](doc)
    choices = cfg["doc_to_choice"](doc)
    assert text.startswith('"I have a dog," said Tom.') and "don't" in text
    assert len(choices) == 10 and choices[cfg["doc_to_target"](doc)] == "Then Tom saw the cat."
    assert all("XXXXX" not in c for c in choices)


def _cbt_doc(i):
    options = ["cat", "dog", "tree", "house", "ball", "boy", "girl", "sun", "moon", "hat"]
    sentences = ["`` I have a dog , '' said Tom ."] + [f"He do n't know sentence {k} ." for k in range(19)]
    return {"sentences": sentences, "question": "Then Tom saw the XXXXX .", "options": options,
            "answer": options[i % 10]}


def test_end_to_end_simple_evaluate(ez, tmp_path, gpt2_ranks_file):
    """A train.py-format checkpoint through the script: lm_eval.simple_evaluate on local tasks."""
    torch.manual_seed(1)
    config = GPTConfig(**CONFIG)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = GPT(config)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(str(out_dir / "ckpt.pt"), make_checkpoint(model, optimizer, {}, best_val_loss=10.0))

    data, tasks = tmp_path / "data", tmp_path / "tasks"
    data.mkdir()
    tasks.mkdir()
    mc = [{"question": f"What is {a} plus {b}?", "choices": [str(a + b), str(a + b + 1), "seven"], "label": k % 3}
          for k, (a, b) in enumerate([(1, 2), (3, 4), (2, 2), (5, 1), (0, 9)])]
    docs = [{"text": "Now is the winter of our discontent made glorious summer by this sun of York. " * 3},
            {"text": "A horse! a horse! my kingdom for a horse!"}]
    for name, rows in (("mc", mc), ("docs", docs), ("cbt", [_cbt_doc(i) for i in range(3)])):
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def local(name):  # the json builder on a local file; the cache stays in tmp_path
        return (f"dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data / name}.jsonl\n"
                f"  cache_dir: {tmp_path / 'hf_cache'}\ndataset_name: null\ntest_split: test\n")
    (tasks / "tiny_mc.yaml").write_text(
        "task: tiny_mc\n" + local("mc") + "output_type: multiple_choice\n"
        'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    (tasks / "tiny_ppl.yaml").write_text(
        "task: tiny_ppl\n" + local("docs") + "output_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{text}}"\n'
        "metric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n")
    # the repo's CBT definition on local CBT-format data (validation/train splits are not in the file)
    (tasks / "tiny_cbt.yaml").write_text(
        f"include: {ez.EVAL_TASKS_DIR / 'cbt' / '_cbt_template_yaml'}\ntask: tiny_cbt\n" + local("cbt")
        + "training_split: null\nvalidation_split: null\n")

    full = out_dir / "zeroshot.json"  # the paper's tasks, evaluated in full before: a check of others never replaces it
    full.write_text('{"row": {"lambada_acc": 30.0}}')
    summary = ez.main(["--out_dir", str(out_dir), "--tasks", "tiny_mc,tiny_ppl,tiny_cbt",
                       "--include_path", str(tasks), "--tokenizer", str(gpt2_ranks_file), "--device", "cpu",
                       "--batch_size", "4", "--bootstrap_iters", "0"])
    assert full.read_text() == '{"row": {"lambada_acc": 30.0}}'
    written = json.loads((out_dir / "zeroshot.partial.json").read_text())
    assert written["metrics"] == json.loads(json.dumps(summary["metrics"]))
    m = written["metrics"]
    for task, metric in (("tiny_mc", "acc"), ("tiny_mc", "acc_norm"), ("tiny_cbt", "acc")):
        assert 0.0 <= m[task][metric] <= 1.0, (task, metric)
    assert math.isfinite(m["tiny_ppl"]["word_perplexity"]) and m["tiny_ppl"]["word_perplexity"] > 1
    assert list(written["row"]) == list(PAPER_ZERO_SHOT_COLUMNS) and all(v is None for v in written["row"].values())
    assert written["model_config"]["attn"] == "tucker"


def test_a_dataset_out_of_reach_is_one_line(ez, tmp_path, gpt2_ranks_file, monkeypatch, capsys):
    """Offline, lm-eval's dataset download fails several frames deep (ConnectionError from the Hub): one line, exit 2."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = GPT(GPTConfig(**CONFIG))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(str(out_dir / "ckpt.pt"), make_checkpoint(model, optimizer, {}, best_val_loss=10.0))

    def offline(**kwargs):
        raise ConnectionError("Couldn't reach 'EleutherAI/cbt' on the Hub (LocalEntryNotFoundError)\nmore")
    monkeypatch.setattr(ez.lm_eval, "simple_evaluate", offline)
    with pytest.raises(SystemExit) as e:
        ez.main(["--out_dir", str(out_dir), "--tasks", "cbt_cn", "--tokenizer", str(gpt2_ranks_file),
                 "--device", "cpu"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Couldn't reach 'EleutherAI/cbt'" in err and "HF cache" in err


def test_bad_options_are_one_line_before_the_evaluation(ez, tmp_path, gpt2_ranks_file, monkeypatch, capsys):
    """Each was a traceback, some after the whole evaluation (an --output folder that is not there: hours lost):
    one error line (argparse's usage before it for the options), exit 2, before lm-eval runs; a misspelled --model_args key is an error (it was ignored); another
    checkpoint than the run's goes to the partial file (it replaced the table's zeroshot.json)."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = GPT(GPTConfig(**CONFIG))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    for name in ("ckpt.pt", "ckpt.earlier.pt"):
        save_checkpoint(str(out_dir / name), make_checkpoint(model, optimizer, {}, best_val_loss=10.0))
    evaluated = []
    monkeypatch.setattr(ez.lm_eval, "simple_evaluate", lambda **kw: evaluated.append(kw) or {"results": {}})
    base = ["--out_dir", str(out_dir), "--tokenizer", str(gpt2_ranks_file), "--device", "cpu"]
    for extra, says, code in [(["--output", str(tmp_path / "nodir" / "x.json")], "is not a writable folder", 2),
                              (["--batch_size", "0"], "batch_size=0 is out of range: allowed >= 1", 2),
                              (["--device", "bogus"], "device='bogus' is unknown", 2),
                              (["--limit", "0"], "--limit", 2), (["--limit", "-3"], "--limit", 2),
                              (["--limit", "inf"], "--limit", 2), (["--limit", "nan"], "--limit", 2),
                              (["--tasks", ","], "names no task", 2),
                              (["--out_dir", str(tmp_path / "none")],  # argparse takes the later --out_dir
                               f"--out_dir {tmp_path / 'none'}: not a folder (the run's folder, holding ckpt.pt)", 2)]:
        with pytest.raises(SystemExit) as e:
            ez.main(base + extra)
        err = capsys.readouterr().err
        assert e.value.code == code and says in err.strip().splitlines()[-1] and "Traceback" not in err, err
    with pytest.raises(ValueError, match="model_args dtpye unknown"):
        ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), dtpye="bfloat16")
    ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), max_batch_size=8)  # lm-eval's own: taken
    monkeypatch.delenv("TUCKER_GPT2_TIKTOKEN", raising=False)  # offline without the ranks file: tiktoken's download
    monkeypatch.setattr(ez, "get_gpt2_encoding", lambda path=None: (_ for _ in ()).throw(
        RuntimeError("could not load tiktoken's 'gpt2' encoding (offline?)")))
    with pytest.raises(SystemExit) as e:
        ez.main(["--out_dir", str(out_dir), "--device", "cpu"])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: could not load tiktoken's")
    assert evaluated == []
    monkeypatch.setattr(ez, "get_gpt2_encoding", lambda path=None: None)
    monkeypatch.setattr(ez, "flatten_results", lambda results: {})
    monkeypatch.setattr(ez, "paper_row", lambda metrics, mc: {})

    class Tasks:  # lm-eval's TaskManager indexes its ~15k task files: seconds of the suite
        def __init__(self, **kwargs):
            self.all_tasks = list(ez.PAPER_TASKS)
    monkeypatch.setattr(ez, "TaskManager", Tasks)
    ez.main(base + ["--ckpt", "ckpt.earlier.pt"])  # the paper's tasks, another checkpoint
    assert (out_dir / "zeroshot.partial.json").is_file() and not (out_dir / "zeroshot.json").exists()
    ez.main(base + ["--tasks", ",".join([*ez.PAPER_TASKS, ez.PAPER_TASKS[0]])])  # one task twice: not the table's
    assert not (out_dir / "zeroshot.json").exists()
    ez.main(base + ["--tasks", ",".join(reversed(ez.PAPER_TASKS))])  # the paper's tasks in another order: the table's
    assert (out_dir / "zeroshot.json").is_file()



def test_main_routes_quick_checks_and_builds_the_row_with_mc_metric(ez, tmp_path, gpt2_ranks_file, monkeypatch,
                                                                    capsys):
    """The script around lm-eval (its evaluation a stand-in here): --limit on the paper's tasks is a quick check, so
    zeroshot.partial.json, never zeroshot.json; the row takes --mc_metric's accuracy; an unknown task, or an --output
    folder that cannot be written, is one error line (exit 2) before anything is evaluated."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = GPT(GPTConfig(**CONFIG))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(str(out_dir / "ckpt.pt"), make_checkpoint(model, optimizer, {}, best_val_loss=10.0))
    results = {t: {"alias": t, "acc,none": 0.25, "acc_norm,none": 0.45} for t in ez.PAPER_TASKS}
    evaluated = []
    monkeypatch.setattr(ez.lm_eval, "simple_evaluate", lambda **kw: evaluated.append(kw) or {"results": results})

    class Tasks:  # lm-eval's TaskManager indexes its ~15k task files: seconds of the suite
        def __init__(self, **kwargs):
            self.all_tasks = list(ez.PAPER_TASKS)
    monkeypatch.setattr(ez, "TaskManager", Tasks)
    base = ["--out_dir", str(out_dir), "--tokenizer", str(gpt2_ranks_file), "--device", "cpu"]
    summary = ez.main(base + ["--limit", "5", "--mc_metric", "acc"])
    assert evaluated[-1]["limit"] == 5 and evaluated[-1]["tasks"] == list(ez.PAPER_TASKS)
    assert (out_dir / "zeroshot.partial.json").is_file() and not (out_dir / "zeroshot.json").exists()
    assert summary["row"]["hellaswag_acc"] == pytest.approx(25.0) and summary["row"]["arc_c_acc"] == pytest.approx(25.0)
    assert ez.main(base)["row"]["hellaswag_acc"] == pytest.approx(45.0)  # the paper's tasks in full: acc_norm
    assert (out_dir / "zeroshot.json").is_file()
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    real_access = ez.os.access  # root may write anywhere: answer as for a user without write permission
    monkeypatch.setattr(ez.os, "access", lambda path, mode: Path(path) != read_only and real_access(path, mode))
    runs = len(evaluated)
    for extra, says in ((["--tasks", "wikitext,no_such_task"], "unknown task(s) ['no_such_task']"),
                        (["--output", str(read_only / "z.json")], "is not a writable folder")):
        with pytest.raises(SystemExit) as e:
            ez.main(base + extra)
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert len(evaluated) == runs


def test_tucker_lm_takes_any_batch_size_from_one_and_scores_in_eval_mode(ez, gpt2_ranks_file):
    """batch_size='auto' (lm-eval's) is refused by name; 1 is a batch size (one request a forward pass: the same
    scores); a model handed over in training mode is scored in eval mode (dropout off: the same score twice)."""
    torch.manual_seed(2)
    model = GPT(GPTConfig(**{**CONFIG, "dropout": 0.5})).double().train()
    with pytest.raises(ValueError, match="batch_size='auto' is not supported"):
        ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size="auto:4")
    reqs = [_req("loglikelihood", "Once upon a time", " there was"), _req("loglikelihood", "A", " b c")]
    one = ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size=1)
    assert not any(m.training for m in one.model.modules())
    got = one.loglikelihood(reqs)
    assert got == one.loglikelihood(reqs)
    three = ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size=3).loglikelihood(reqs)
    assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in three], abs=1e-9, rel=1e-12)


def test_bfloat16_logits_are_log_softmaxed_in_float32(ez, model, gpt2_ranks_file):
    """Under bfloat16 autocast the score is the log-softmax of the model's bfloat16 logits taken in float32 (in
    bfloat16 every log-prob rounds to 3 significant digits: a sum off by hundredths)."""
    import copy
    m32 = copy.deepcopy(model).float()
    seen = []
    m32.lm_head.register_forward_hook(lambda mod, inp, out: seen.append(out.detach()))
    lm = ez.TuckerLM(model=m32, tokenizer=str(gpt2_ranks_file), dtype="bfloat16")
    ctx, cont = lm.tok_encode("Once upon a time there was"), lm.tok_encode(" a king who ruled the land")
    (ll, _), = lm.score_tokens([(ctx, cont)])
    [logits] = seen
    assert logits.dtype == torch.bfloat16
    n = len(ctx) + len(cont) - 1
    logp = F.log_softmax(logits[0, n - len(cont):n, :VOCAB_SIZE].float(), dim=-1)
    want = logp.gather(-1, torch.tensor(cont)[:, None]).sum().item()
    assert ll == pytest.approx(want, abs=1e-4)


def test_each_request_type_reaches_lm_evals_cache(ez, model, gpt2_ranks_file):
    """lm-eval's cache (--use_cache) gets each request's own result under its request type: (log-likelihood,
    is_greedy), a document's total, the generated text."""
    calls = []

    class Hook:
        def add_partial(self, attr, req, res):
            calls.append((attr, req, res))
    lm = ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file), batch_size=3)
    lm.set_cache_hook(Hook())
    ll = lm.loglikelihood([_req("loglikelihood", "Once upon a time", " there was")])
    rolling = lm.loglikelihood_rolling([_req("loglikelihood_rolling", "To be, or not to be")])
    text = lm.generate_until([_req("generate_until", "ROMEO:", {"until": ["never"], "max_gen_toks": 4})])
    assert calls == [("loglikelihood", ("Once upon a time", " there was"), ll[0]),
                     ("loglikelihood_rolling", ("To be, or not to be",), rolling[0]),
                     ("generate_until", ("ROMEO:", {"until": ["never"], "max_gen_toks": 4}), text[0])]
    assert isinstance(ll[0], tuple) and len(ll[0]) == 2 and isinstance(text[0], str) and text[0]


def test_generate_until_warns_once_about_sampling_and_takes_until_none(ez, model, gpt2_ranks_file, monkeypatch,
                                                                     capsys):
    """do_sample asked of a greedy model: one warning for all the requests, not one each; until=None is no stop
    string (the text still stops at <|endoftext|>)."""
    enc = get_gpt2_encoding(str(gpt2_ranks_file))
    out = enc.encode("Hello world") + [EOT] + enc.encode(" after")
    monkeypatch.setattr(model, "generate", lambda x, n, temperature, use_cache: torch.cat(
        [x, torch.tensor([out[:n]])], dim=1))
    lm = ez.TuckerLM(model=model, tokenizer=str(gpt2_ranks_file))
    got = lm.generate_until([_req("generate_until", "ROMEO:", {"do_sample": True, "until": None, "max_gen_toks": 8}),
                             _req("generate_until", "JULIET:", {"do_sample": True, "max_gen_toks": 8})])
    assert got == ["Hello world"] * 2
    err = capsys.readouterr().err
    assert err.count("warning: tucker-gpt generates greedily") == 1, err


def test_main_passes_its_options_and_writes_its_summary_atomically(ez, tmp_path, gpt2_ranks_file, monkeypatch,
                                                                   capsys):
    """The script around lm-eval (stand-ins for it): a missing checkpoint and an --output whose folder is a file are
    one error line before anything runs; the repository's tasks (eval_tasks) are always included, lm-eval's own
    indexed only when a task needs them; --tasks' names stripped; --bootstrap_iters reaches lm-eval, samples are not
    logged; the summary says the tasks, checkpoint, batch size, limit, the row's metric, the device the model ran on
    (none asked: where it was loaded) and lm-eval's n-samples; it is written whole, by a rename of this process's own temporary file beside
    it, and the last line says where."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    model = GPT(GPTConfig(**CONFIG))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    save_checkpoint(str(out_dir / "ckpt.pt"), make_checkpoint(model, optimizer, {}, best_val_loss=10.0))
    base = ["--out_dir", str(out_dir), "--tokenizer", str(gpt2_ranks_file)]
    for extra, says in ((["--ckpt", "nosuch.pt"], "no checkpoint at"),
                        (["--output", str(out_dir / "ckpt.pt" / "z.json")], "is not a writable folder")):
        with pytest.raises(SystemExit) as e:
            ez.main(base + extra)
        err = capsys.readouterr().err
        assert e.value.code == 2 and says in err.strip().splitlines()[-1] and "Traceback" not in err, err
    managers, evaluated = [], []

    class Tasks:  # the repository's folder alone knows CBT; lm-eval's own index knows the rest
        def __init__(self, include_path, include_defaults=True):
            managers.append((include_path, include_defaults))
            self.all_tasks = list(ez.PAPER_TASKS) if include_defaults else ["cbt_cn", "cbt_ne"]
    monkeypatch.setattr(ez, "TaskManager", Tasks)
    n_samples = {"wikitext": {"original": 62, "effective": 31}}
    monkeypatch.setattr(ez.lm_eval, "simple_evaluate", lambda **kw: evaluated.append(kw) or {
        "results": {t: {"alias": t, "acc,none": 0.0} for t in kw["tasks"]}, "n-samples": n_samples})
    replaced = []
    real_replace = ez.os.replace
    monkeypatch.setattr(ez.os, "replace", lambda src, dst: replaced.append((Path(src), Path(dst))) or
                        real_replace(src, dst))
    summary = ez.main(base + ["--tasks", "cbt_cn"])  # the repository's task: lm-eval's own not indexed
    assert managers == [([str(ez.EVAL_TASKS_DIR)], False)] and summary["row"]["cbt_cn_acc"] == 0.0
    managers.clear()
    import shutil
    shutil.copy(out_dir / "ckpt.pt", out_dir / "ckpt.other.pt")
    summary = ez.main(base + ["--tasks", " wikitext , cbt_ne", "--limit", "0.5", "--mc_metric", "acc",
                              "--bootstrap_iters", "7", "--ckpt", "ckpt.other.pt", "--batch_size", "5"])
    assert [include for include, _ in managers] == [[str(ez.EVAL_TASKS_DIR)]] * 2 and managers[0][1] is False
    kw = evaluated[-1]
    assert kw["tasks"] == ["wikitext", "cbt_ne"] and kw["bootstrap_iters"] == 7 and kw["log_samples"] is False
    path = out_dir / "zeroshot.partial.json"
    written = json.loads(path.read_text())
    assert written["limit"] == 0.5 and written["mc_metric"] == "acc" and written["n_samples"] == n_samples
    assert written["tasks"] == ["wikitext", "cbt_ne"] and written["ckpt"] == "ckpt.other.pt"
    assert written["batch_size"] == 5
    assert written["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    [(tmp, dst)] = replaced[1:]
    assert dst == path and tmp.parent == path.parent and str(ez.os.getpid()) in tmp.name and not tmp.exists()
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {path}"


def test_results_owt_zeroshot_columns(tmp_path):
    from scripts import results
    runs, out = tmp_path / "runs", tmp_path / "out"
    row = {"wikitext2_ppl": 40.0, "lambada_ppl": 20.0, "mean_ppl": 30.0, "lambada_acc": 25.0,
           "cbt_cn_acc": 80.0, "cbt_ne_acc": 60.0, "hellaswag_acc": 30.0, "winogrande_acc": 50.0,
           "piqa_acc": 63.0, "arc_e_acc": 42.0, "arc_c_acc": 24.0, "mean_acc": 46.75}
    for seed, shift, limit in ((1, 0.0, None), (2, 2.0, None), (3, 30.0, 20)):  # seed 3: a quick check's file
        d = runs / f"mha-rope_off-s{seed}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"best_val_loss": 2.9, "best_iter": 100, "finished": True}))
        zs = {k: v + shift for k, v in row.items()}
        if seed == 2:  # a metric lm-eval did not give: paper_row's None, the mean over the runs that have it
            zs["cbt_ne_acc"] = None
        (d / "zeroshot.json").write_text(json.dumps({"row": zs, "limit": limit}))
    results.main(["owt", "--runs", str(runs), "--out", str(out)])
    recs = {(r["row"], r["rope"]): r for r in json.loads((out / "table.json").read_text())}
    mha = recs[("mha", "off")]
    assert mha["zeroshot"]["wikitext2_ppl"] == pytest.approx(41.0) and mha["n_zeroshot"] == 2
    assert mha["zeroshot"]["cbt_ne_acc"] == pytest.approx(60.0)
    assert recs[("gqa4", "off")]["zeroshot"]["mean_acc"] is None
    md = (out / "table.md").read_text()
    assert "Zero-shot" in md and "41.00 / 37.15" in md  # ours / the paper's WikiText2 ppl for MHA
    zs_md = md.split("# Zero-shot")[1]
    mha_row = next(line for line in zs_md.splitlines() if line.startswith("| MHA |"))
    assert mha_row.endswith(" | 2 |")  # n: the runs evaluated (seed 3's quick check is not), not the 3 seeds


def test_evaluate_py_run_as_a_script_says_it_is_a_library():
    """evaluate.py has no command line: run as one it says where the command lines are and exits 2 (it used to
    accept any arguments and do nothing)."""
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(repo / "evaluate.py"), "--out_dir=x"], capture_output=True, text=True,
                       cwd=repo, timeout=120)
    assert r.returncode == 2 and "is a library" in r.stderr and "--eval_only=True" in r.stderr, r.stderr


def test_eval_zeroshot_without_lm_eval_says_what_to_install(monkeypatch):
    """Without lm-evaluation-harness, python -m scripts.eval_zeroshot (its --help too: the model wrapper is lm-eval's
    LM) is one `error:` line naming the package to install, not an ImportError traceback."""
    import importlib
    import sys
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # None: an import of it fails, as when it is not installed
    monkeypatch.delitem(sys.modules, "scripts.eval_zeroshot", raising=False)
    with pytest.raises(SystemExit) as e:
        importlib.import_module("scripts.eval_zeroshot")
    msg = str(e.value.code)
    assert msg.startswith("error: ") and "pip install lm_eval" in msg and "\n" not in msg, msg
