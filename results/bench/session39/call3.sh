#!/bin/bash
# session 39 call 3: generate's weight fingerprint as flat runs (note_weight_changes at this commit) against a norm a tensor; GPT-2 124M (MHA, Tucker
# [8,64,64]) on the GPU in bf16 and fp32: each way of taking it (median of 50); generate (500 tokens, batch 1,
# graph) with the fingerprint on and off in one process, alternating (5 rounds); whether the fingerprint ever
# says 'changed' between generate calls that change no weight; then the fixed CUDA test.
export PYTHONUNBUFFERED=1
D=$OUT/c3; mkdir -p $D
git rev-parse HEAD > $D/commit.txt; git status --short >> $D/commit.txt
export TUCKER_GPT2_TIKTOKEN=$PWD/.carry/data/gpt2.tiktoken TUCKER_SHAKESPEARE_TXT=$PWD/.carry/data/input.txt
timeout 240 python3 - > $D/fingerprint.txt 2>&1 <<'PY'
import statistics, time, torch
from model import GPT, GPTConfig
def timed(fn, n=50):
    fn(); ts = []
    for _ in range(n):
        torch.cuda.synchronize(); t0 = time.perf_counter(); fn(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
def ways(params, m):
    return {
        "foreach_f64": lambda: torch.stack([torch.stack(torch._foreach_norm(params, o, dtype=torch.float64)) for o in (1, 2)]),
        "note_weight_changes": m.note_weight_changes,
    }
for dtype in (torch.bfloat16, torch.float32):
    for attn in (dict(attn="mha"), dict(attn="tucker", tucker_ranks=(8, 64, 64))):
        m = GPT(GPTConfig(**attn)).to("cuda", dtype).eval()
        params = [p.detach() for p in m.parameters()]
        for name, fn in ways(params, m).items():
            try:
                print(f"{attn['attn']} {dtype} {name}: {timed(fn):.3f} ms", flush=True)
            except Exception as e:
                print(f"{attn['attn']} {dtype} {name}: {type(e).__name__}: {e}", flush=True)
# generate with and without the fingerprint, one process
for attn in (dict(attn="tucker", tucker_ranks=(8, 64, 64)), dict(attn="mha")):
    torch.manual_seed(0)
    m = GPT(GPTConfig(**attn)).to("cuda", torch.bfloat16).eval()
    real = m.note_weight_changes
    said = []
    def spy():
        r = real(); said.append(r); return r
    prompt = torch.randint(50257, (1, 16), device="cuda")
    m.generate(prompt, 8, temperature=0)
    res = {"on": [], "off": []}
    for rnd in range(5):
        for mode in ("on", "off"):
            m.note_weight_changes = spy if mode == "on" else (lambda: False)
            torch.cuda.synchronize(); t0 = time.perf_counter()
            m.generate(prompt, 500, temperature=0)
            torch.cuda.synchronize(); res[mode].append(time.perf_counter() - t0)
    on, off = statistics.median(res["on"]), statistics.median(res["off"])
    print(f"{attn['attn']} generate 500 tokens graph bf16: fingerprint on {on*1e3:.2f} ms, off {off*1e3:.2f} ms "
          f"(+{(on-off)*1e3:.2f} ms); on {[round(t*1e3,1) for t in res['on']]}, off {[round(t*1e3,1) for t in res['off']]}; "
          f"changed said {sum(said)} of {len(said)}", flush=True)
PY
echo "fingerprint rc $?" >> $D/rc.txt
timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/test_decode.py tests/test_sample.py tests/test_checkpoint.py \
  tests/test_train.py tests/test_graph_step.py -k "cuda or version_bump or fingerprint or max_new or stop_at_eot or bf16_checkpoint or checkpoint_file" \
  > $D/tests.txt 2>&1
echo "tests rc $?" >> $D/rc.txt
OUT=$D timeout 330 bash scripts/gpu_smoke.sh > $D/smoke_log.txt 2>&1; echo "gpu_smoke rc $?" >> $D/rc.txt
rm -rf $D/smoke/data $D/smoke/*/ckpt*.pt
(cd $OUT && tar czf c3.tgz c3)
