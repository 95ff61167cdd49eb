"""
Zero-shot evaluation of a checkpoint with EleutherAI's lm-evaluation-harness: the zero-shot
columns of the paper's OpenWebText table (tab_gpt2).

    pip install -r requirements.txt   (pins lm_eval)
    python -m scripts.eval_zeroshot --out_dir=out-owt-tucker
    python -m scripts.eval_zeroshot --out_dir=out-owt-tucker --tasks=lambada_openai,hellaswag --limit=200

Any checkpoint of train.py works (every attention variant): the model is rebuilt from the
checkpoint alone, as in sample.py. Writes <out_dir>/zeroshot.json (zeroshot.partial.json for a quick check with
--limit, other --tasks or another --ckpt, so that it never replaces the full evaluation of the run's checkpoint) with every metric lm-eval
reports per task, and `row`: the paper's zero-shot columns in the paper's order (the same keys
as scripts/paper_tables.OWT_COLUMNS), which scripts/results.py prints beside the paper's numbers.

    row key         lm-eval task     metric
    wikitext2_ppl   wikitext         word_perplexity (document-level WikiText-2 raw, test split)
    lambada_ppl     lambada_openai   perplexity (of the target word)
    mean_ppl        mean of the two perplexities above
    lambada_acc     lambada_openai   acc (the target word is the greedy continuation)
    cbt_cn_acc      cbt_cn           acc (eval_tasks/cbt in this repo)
    cbt_ne_acc      cbt_ne           acc
    hellaswag_acc   hellaswag        acc_norm (--mc_metric)
    winogrande_acc  winogrande       acc (lm-eval has no acc_norm for it)
    piqa_acc        piqa             acc_norm (--mc_metric)
    arc_e_acc       arc_easy         acc_norm (--mc_metric)
    arc_c_acc       arc_challenge    acc_norm (--mc_metric)
    mean_acc        mean of the 8 accuracies

The paper says "accuracy" without saying which one; for the tasks where lm-eval reports both,
acc_norm (log-likelihood per character of the choice) is the default because GPT-2 124M's published
lm-eval numbers put the paper's MHA row near acc_norm on HellaSwag and ARC-Challenge; both
variants are in `metrics`, and --mc_metric=acc builds the row from plain acc. Accuracies in
the row are in percent, as the paper prints them; perplexities as they are.

The datasets come from the Hugging Face Hub through `datasets`; on a machine without internet,
fill the cache (~/.cache/huggingface) elsewhere and set HF_DATASETS_OFFLINE=1.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    import lm_eval
    from lm_eval.api.model import LM
    from lm_eval.api.registry import register_model
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
except ImportError as e:  # one line, not a traceback (--help too: the wrapper class below is lm-eval's LM)
    sys.exit(f"error: scripts.eval_zeroshot needs lm-evaluation-harness ({e}): pip install lm_eval "
             f"(the version requirements.txt pins), or pip install -r requirements.txt")

REPO = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file, the repository's modules are not importable
    sys.exit("run from the repository root as a module: python -m scripts.eval_zeroshot ...")

from scripts.paper_tables import OWT_COLUMNS  # noqa: E402
from checkpoint import load_model  # noqa: E402
from configurator import check_device, make_current  # noqa: E402
from tokenizer import EOT, VOCAB_SIZE, get_gpt2_encoding  # noqa: E402

LM_EVAL_ARGS = {"max_batch_size"}  # what lm-eval passes a model beside its model_args that TuckerLM has no use for

# Task definitions lm-eval does not ship (CBT-CN, CBT-NE); the folder is scanned recursively.
EVAL_TASKS_DIR = REPO / "eval_tasks"
PAPER_TASKS = ("wikitext", "lambada_openai", "cbt_cn", "cbt_ne", "hellaswag", "winogrande", "piqa",
               "arc_easy", "arc_challenge")
ZERO_SHOT_COLUMNS = tuple(c for c in OWT_COLUMNS if c.endswith(("_ppl", "_acc")))  # the paper's order
MC = "mc"  # placeholder for --mc_metric (acc_norm or acc) in ROW_SOURCES
ROW_SOURCES = {  # row key -> (lm-eval task, metric); the two means are computed from these
    "wikitext2_ppl": ("wikitext", "word_perplexity"),
    "lambada_ppl": ("lambada_openai", "perplexity"),
    "lambada_acc": ("lambada_openai", "acc"),
    "cbt_cn_acc": ("cbt_cn", "acc"),
    "cbt_ne_acc": ("cbt_ne", "acc"),
    "hellaswag_acc": ("hellaswag", MC),
    "winogrande_acc": ("winogrande", "acc"),
    "piqa_acc": ("piqa", MC),
    "arc_e_acc": ("arc_easy", MC),
    "arc_c_acc": ("arc_challenge", MC),
}


# -----------------------------------------------------------------------------
# the model as lm-eval sees it


@register_model("tucker-gpt")
class TuckerLM(LM):
    """A GPT of model.py behind lm-eval's three request types.

    Tokens and scoring follow lm-eval's Hugging Face model on GPT-2, so numbers compare with
    published GPT-2 ones: trailing spaces of a context move to the continuation, an empty
    context becomes <|endoftext|>, inputs longer than block_size lose tokens on the left, and
    the distribution is over GPT-2's 50257 tokens (the padded logits of vocab_size=50304 are
    never targets in training and are dropped, as HF's model simply does not have them).

    `model` is a GPT (tests) or None to load <out_dir>/<ckpt>; also usable as
    `--model tucker-gpt --model_args out_dir=...` once this module is imported."""

    def __init__(self, model=None, out_dir=None, ckpt="ckpt.pt", tokenizer=None, batch_size=32,
                 device=None, dtype="float32", **others):
        super().__init__()
        unknown = sorted(set(others) - LM_EVAL_ARGS)  # a misspelled --model_args key would be ignored
        if unknown:
            raise ValueError(f"model_args {', '.join(unknown)} unknown: allowed out_dir, ckpt, tokenizer, batch_size, "
                             f"device, dtype")
        if str(batch_size).startswith("auto"):
            raise ValueError("batch_size='auto' is not supported: give a number")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size={batch_size} is out of range: allowed >= 1")
        if not device:  # a given model stays where it is
            device = (next(model.parameters()).device if model is not None
                      else "cuda" if torch.cuda.is_available() else "cpu")
        device = torch.device(check_device(str(device)))
        make_current(device)  # cuda:N current: the model's Triton kernels launch on the current device
        self.model = (model if model is not None else load_model(out_dir, ckpt, device)).to(device).eval()
        self._device = device
        self.enc = get_gpt2_encoding(tokenizer or None)
        self.block_size = self.model.config.block_size
        self.n_vocab = min(VOCAB_SIZE, self.model.config.vocab_size)
        self.batch_size = int(batch_size)
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype={dtype!r} is unknown: allowed 'float32', 'bfloat16', 'float16'")
        # lower precision through autocast, as in train.py/sample.py; log-softmax in float32 at least
        self.autocast = (torch.autocast(device_type=device.type, dtype=getattr(torch, dtype))
                         if dtype != "float32" else nullcontext())
        self.eot_token_id = EOT
        self._warned_sampling = False

    # --- tokens ------------------------------------------------------------------------

    def tok_encode(self, text: str) -> list:
        return self.enc.encode(text, allowed_special={"<|endoftext|>"})

    def tok_decode(self, tokens) -> str:
        # ids of the padded vocabulary (>= 50257) have no text; a trained model never picks them
        return self.enc.decode([t for t in tokens if t < self.n_vocab])

    def encode_pair(self, context: str, continuation: str):
        """(context tokens, continuation tokens) exactly as lm-eval's TemplateLM splits them."""
        if context == "":
            cont = self.tok_encode(continuation)
            return ([EOT], cont) if cont[:1] != [EOT] else (cont[:1], cont[1:])
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:  # " word" is one GPT-2 token: the space belongs to the continuation
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        if context == "":  # the context was only spaces
            return [EOT], self.tok_encode(continuation)
        whole = self.tok_encode(context + continuation)
        ctx = self.tok_encode(context)
        return ctx, whole[len(ctx):]

    # --- scoring -----------------------------------------------------------------------

    @torch.no_grad()
    def score_tokens(self, pairs):
        """[(context tokens, continuation tokens)] -> [(sum log p(continuation | context), is_greedy)].

        Longest first in batches of batch_size, padded on the right: causal attention never lets
        a position see the padding after it, so every score equals that of one unpadded forward
        pass. Each input is the last block_size tokens before the final continuation token."""
        out = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        for b in range(0, len(order), self.batch_size):
            batch = order[b:b + self.batch_size]
            seqs = []
            for i in batch:
                ctx, cont = pairs[i]
                if not ctx or not cont or len(cont) > self.block_size:
                    raise ValueError(f"request {i}: need a context, and a continuation of 1..block_size="
                                     f"{self.block_size} tokens (got {len(ctx)} and {len(cont)})")
                seqs.append((ctx + cont)[-(self.block_size + 1):])  # left truncation
            T = max(len(s) for s in seqs) - 1
            x = torch.zeros(len(batch), T, dtype=torch.long)
            for j, s in enumerate(seqs):
                x[j, :len(s) - 1] = torch.tensor(s[:-1])
            with self.autocast:
                logits, _ = self.model(x.to(self.device))
            for j, i in enumerate(batch):
                cont = pairs[i][1]
                n, c = len(seqs[j]) - 1, len(cont)
                # positions n-c .. n-1 predict the continuation tokens; at least float32 (bf16
                # logits would round every log-prob), float64 stays float64
                sel = logits[j, n - c:n, :self.n_vocab]
                logp = F.log_softmax(sel.to(torch.promote_types(sel.dtype, torch.float32)), dim=-1)
                target = torch.tensor(cont, device=logp.device)
                ll = logp.gather(-1, target[:, None]).sum().item()
                out[i] = (ll, bool((logp.argmax(-1) == target).all()))
        return out

    def loglikelihood(self, requests, disable_tqdm: bool = False):
        results = self.score_tokens([self.encode_pair(*req.args) for req in requests])
        for req, res in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return results

    def rolling_windows(self, tokens):
        """The (context, continuation) windows that score every token of a document once:
        <|endoftext|> + the first block_size - 1 tokens, then windows of up to block_size new
        tokens, each with the block_size tokens before its last one as input (lm-eval's
        get_rolling_token_windows with context_len=1, as its HF model does). The last window so
        always gets a full block of context."""
        return [make_disjoint_window(w) for w in
                get_rolling_token_windows(tokens, prefix_token=EOT, max_seq_len=self.block_size, context_len=1)]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
        windows, owner = [], []
        for k, req in enumerate(requests):
            for w in self.rolling_windows(self.tok_encode(req.args[0])):
                windows.append(w)
                owner.append(k)
        totals = [0.0] * len(requests)
        for k, (ll, _) in zip(owner, self.score_tokens(windows)):
            totals[k] += ll
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    # --- generation --------------------------------------------------------------------

    @torch.no_grad()
    def generate_until(self, requests, disable_tqdm: bool = False):
        """Greedy continuation of each context by model.generate (KV cache), cut before the
        first `until` string (and <|endoftext|>, as lm-eval's HF model adds it). One request at
        a time: the model has no attention mask, so prompts of different lengths cannot share
        a batch. The paper's tasks never generate; this is for completeness."""
        out = []
        for req in requests:
            context, kwargs = req.args
            kwargs = dict(kwargs or {})
            if kwargs.get("do_sample") and not self._warned_sampling:
                print("warning: tucker-gpt generates greedily; do_sample/temperature are ignored", file=sys.stderr)
                self._warned_sampling = True
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            until.append(self.enc.decode([EOT]))
            max_gen = int(kwargs.get("max_gen_toks", 256))
            # room for the generation, as lm-eval's HF model leaves; when max_gen does not fit,
            # keep half a block and let model.generate slide its window
            keep = max(self.block_size - max_gen, self.block_size // 2)
            ctx = (self.tok_encode(context) or [EOT])[-keep:]
            x = torch.tensor([ctx], dtype=torch.long, device=self.device)
            with self.autocast:
                y = self.model.generate(x, max_gen, temperature=0, use_cache=True)
            text = self.tok_decode(y[0, len(ctx):].tolist())
            for stop in until:
                text = text.split(stop)[0]
            self.cache_hook.add_partial("generate_until", req.args, text)
            out.append(text)
        return out


# -----------------------------------------------------------------------------
# results


def flatten_results(results: dict) -> dict:
    """lm-eval's {'task': {'acc,none': x, 'acc_stderr,none': s, 'alias': ..}} -> {'task': {'acc': x, ..}}."""
    return {task: {key.split(",")[0]: value for key, value in r.items() if key != "alias"}
            for task, r in results.items()}


def paper_row(metrics: dict, mc_metric: str = "acc_norm") -> dict:
    """The paper's zero-shot columns from flattened metrics; None where a task was not run."""
    row = {}
    for key, (task, metric) in ROW_SOURCES.items():
        value = metrics.get(task, {}).get(mc_metric if metric == MC else metric)
        row[key] = None if value is None else (100 * value if key.endswith("_acc") else value)
    ppls = [row["wikitext2_ppl"], row["lambada_ppl"]]
    accs = [row[k] for k in ROW_SOURCES if k.endswith("_acc")]
    row["mean_ppl"] = statistics.fmean(ppls) if None not in ppls else None
    row["mean_acc"] = statistics.fmean(accs) if None not in accs else None
    return {key: row[key] for key in ZERO_SHOT_COLUMNS}


def _limit(text):
    if text is None:
        return None
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text}: examples per task (>= 1) or a fraction of them (0 .. 1)")
    return int(value) if value >= 1 and value == int(value) else value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out_dir", required=True, help="run folder holding the checkpoint; zeroshot.json goes here")
    ap.add_argument("--ckpt", default="ckpt.pt", help="checkpoint file name inside out_dir (another than ckpt.pt: the "
                    "result goes to zeroshot.partial.json)")
    ap.add_argument("--tasks", default=",".join(PAPER_TASKS), help="comma-separated lm-eval task names")
    ap.add_argument("--limit", type=_limit, default=None,
                    help="examples per task (N >= 1) or a fraction (< 1); for quick checks, not for the table")
    ap.add_argument("--batch_size", type=int, default=32, help="requests per forward pass")
    ap.add_argument("--device", default="", help="'' = cuda if available else cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--tokenizer", default="",
                    help="GPT-2 ranks file for offline use (else env TUCKER_GPT2_TIKTOKEN, else tiktoken 'gpt2')")
    ap.add_argument("--mc_metric", default="acc_norm", choices=("acc_norm", "acc"),
                    help="accuracy of HellaSwag, PIQA, ARC-E, ARC-C in the row")
    ap.add_argument("--include_path", action="append", default=[], help="more folders of task YAMLs")
    ap.add_argument("--bootstrap_iters", type=int, default=100000, help="lm-eval's stderr bootstrap (0 = none)")
    ap.add_argument("--output", default="", help="default: <out_dir>/zeroshot.json (the paper's tasks in full, what "
                    "scripts/results.py reads), <out_dir>/zeroshot.partial.json with --limit, other --tasks or --ckpt")
    args = ap.parse_args(argv)

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        ap.error(f"--tasks {args.tasks!r} names no task")
    # a quick check (--limit, other tasks than the paper's, another checkpoint than the run's) never replaces the
    # table's full evaluation: it goes to zeroshot.partial.json, which scripts/results.py does not read
    partial = args.limit is not None or sorted(tasks) != sorted(PAPER_TASKS) or args.ckpt != "ckpt.pt"  # any order
    path = Path(args.output) if args.output else Path(args.out_dir) / ("zeroshot.partial.json" if partial else
                                                                        "zeroshot.json")
    if not Path(args.out_dir).is_dir():  # the run's folder itself is missing: say so (not "--output", not given)
        ap.error(f"--out_dir {args.out_dir}: not a folder (the run's folder, holding {args.ckpt})")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):  # now, not after hours of evaluation
        ap.error(f"--output {path}: its folder {path.parent} is not a writable folder")
    t0 = time.time()
    try:  # checkpoint.load_model: a missing or unreadable checkpoint is one line; so is the tokenizer and the device
        lm = TuckerLM(out_dir=args.out_dir, ckpt=args.ckpt, tokenizer=args.tokenizer or None,
                      batch_size=args.batch_size, device=args.device or None, dtype=args.dtype)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    include = [str(EVAL_TASKS_DIR)] + args.include_path
    # indexing lm-eval's own ~15k task files takes seconds: only when a task needs them
    task_manager = TaskManager(include_path=include, include_defaults=False)
    if not set(tasks) <= set(task_manager.all_tasks):
        task_manager = TaskManager(include_path=include)
    unknown = [t for t in tasks if t not in task_manager.all_tasks]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; see `lm_eval ls tasks` and {EVAL_TASKS_DIR}")
    try:
        res = lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager, limit=args.limit,
                                      bootstrap_iters=args.bootstrap_iters, log_samples=False)
    except OSError as e:  # ConnectionError and the Hub's errors among them: a task's dataset is not to be had
        first = next((line for line in str(e).splitlines() if line.strip()), "")
        print(f"error: a task's dataset could not be loaded ({type(e).__name__}: {first[:200]}); without a network "
              "the tasks' Hugging Face datasets must already be in the HF cache (HF_HOME / HF_DATASETS_CACHE)",
              file=sys.stderr)
        sys.exit(2)
    metrics = flatten_results(res["results"])
    row = paper_row(metrics, args.mc_metric)
    summary = {
        "out_dir": args.out_dir, "ckpt": args.ckpt, "tasks": tasks, "limit": args.limit,
        "mc_metric": args.mc_metric, "dtype": args.dtype, "batch_size": args.batch_size,
        "device": str(lm.device), "lm_eval_version": getattr(lm_eval, "__version__", None),
        "model_config": lm.model.config.to_dict(),
        "n_samples": res.get("n-samples"), "wall_time_s": time.time() - t0,
        "units": "row: perplexities as they are, accuracies in percent (the paper's columns)",
        "metrics": metrics, "row": row,
    }
    tmp = path.with_suffix(f".json.tmp.{os.getpid()}")  # one a process: two quick checks of a run do not collide
    tmp.write_text(json.dumps(summary, indent=1, default=str))
    os.replace(tmp, path)  # never a half-written file for results.py to read
    for task, m in metrics.items():
        print(f"{task:16s} " + "  ".join(f"{k}={v:.4f}" for k, v in m.items()
                                         if "stderr" not in k and k != "sample_len" and isinstance(v, (int, float))))
    print("row (the paper's columns; accuracies in %):")
    for key, value in row.items():
        print(f"  {key:16s} {'—' if value is None or (isinstance(value, float) and math.isnan(value)) else f'{value:.2f}'}")
    print(f"wrote {path}")
    return summary


if __name__ == "__main__":
    main()
