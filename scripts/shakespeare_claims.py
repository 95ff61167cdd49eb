"""
Check the paper's qualitative claims about the Shakespeare table against our runs, with numbers.

    python -m scripts.results shakespeare          # writes results/shakespeare/table.json
    python -m scripts.shakespeare_claims           # reads it, prints results/shakespeare/claims.md

Each claim is stated as "holds", "does not hold" or "within noise", against the seed spread
(sample std of the rows run with several seeds). Nothing here is hard-coded but the claims.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if __name__ == "__main__" and not __package__:  # run as a file: the repository's modules are importable
    sys.path.insert(0, str(REPO))
from atomic_files import write_text  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=str(REPO / "results/shakespeare/table.json"))
    ap.add_argument("--out", default=str(REPO / "results/shakespeare/claims.md"))
    args = ap.parse_args(argv)
    try:
        recs = json.loads(Path(args.table).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: --table {args.table}: {getattr(e, 'strerror', None) or e} (python -m scripts.results "
                         "shakespeare writes it)")
    if not isinstance(recs, list) or not all(isinstance(r, dict) and "row" in r and "rope" in r for r in recs):
        raise SystemExit(f"error: --table {args.table} is not scripts.results' table.json (a list of rows)")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise SystemExit(f"error: --out {out}: its folder {out.parent} does not exist")
    by = {(r["row"], r["rope"]): r for r in recs if r.get("val_loss") is not None}

    def record(row, rope):
        if (row, rope) not in by:  # the claims need every row of the paper's table (with its paper value)
            raise SystemExit(f"error: {args.table} has no loss for row {row!r} with RoPE {rope} (the claims need the "
                             "whole table: python -m scripts.results shakespeare)")
        return by[(row, rope)]

    def loss(row, rope):
        return record(row, rope)["val_loss"]

    def paper(row, rope):
        return record(row, rope)["paper"]["val_loss"]

    stds = [r["val_loss_std"] for r in recs if r.get("n_seeds", 1) > 1 and r.get("val_loss_std") is not None]
    noise = statistics.mean(stds) if stds else float("nan")
    lines = ["# The paper's Shakespeare claims, checked against our runs", "",
             f"Seed spread (mean sample std of the rows with 3 seeds): {noise:.3f} "
             f"({100 * noise / loss('mha', 'off'):.2f}% of MHA's loss). A difference below about twice that "
             "is called 'within noise'.", ""]

    def verdict(diff, expect_positive=True):
        if abs(diff) < 2 * noise:
            return "within noise"
        return "holds" if (diff > 0) == expect_positive else "does not hold (opposite sign)"

    # 1. Tucker [8,64,64] separated within ~1.5% of MHA with ~11% of its attention parameters
    lines.append("## 1. Tucker [8,64,64] separated vs MHA")
    share = record("tucker_8_64_64", "off")["attn_params_mb"] / record("mha", "off")["attn_params_mb"]
    for rope in ("off", "on"):
        gap = 100 * (loss("tucker_8_64_64", rope) / loss("mha", rope) - 1)
        pgap = 100 * (paper("tucker_8_64_64", rope) / paper("mha", rope) - 1)
        lines.append(f"- RoPE {rope}: gap {gap:+.2f}% (paper {pgap:+.2f}%) with {100 * share:.1f}% of the attention "
                     f"parameters: {'holds' if gap < 1.5 else 'does not hold'}")

    # 2. Tucker beats MLA at equal KV cache (compare the best of each family at each cache size)
    lines += ["", "## 2. Tucker vs MLA at equal KV cache (best row of each family per cache size, RoPE off)"]
    for rope in ("off",):
        sizes = sorted({r["kv_cache_mb"] for r in recs if r["rope"] == rope and r["family"].startswith(("MLA", "Tucker"))})
        for kv in sizes:
            fam = {}
            for r in recs:
                if r["rope"] != rope or r["kv_cache_mb"] != kv or r.get("val_loss") is None:
                    continue
                key = "Tucker" if r["family"].startswith("Tucker") else "MLA" if r["family"].startswith("MLA") else None
                if key and (key not in fam or r["val_loss"] < fam[key]["val_loss"]):
                    fam[key] = r
            if len(fam) == 2:
                t, m = fam["Tucker"], fam["MLA"]
                d = m["val_loss"] - t["val_loss"]
                lines.append(f"- KV {kv:g} MiB: {t['label']} {t['val_loss']:.3f} ({t['attn_params_mb']:.2f} MB) vs "
                             f"{m['label']} {m['val_loss']:.3f} ({m['attn_params_mb']:.2f} MB): MLA − Tucker = "
                             f"{d:+.3f}: {verdict(d)}")

    # 3. Shared KV costs Tucker a little
    lines += ["", "## 3. Tucker shared KV vs separated (same ranks)"]
    diffs = []
    for ranks in ("8_128_128", "8_64_64", "6_64_64", "6_32_32", "4_32_32"):
        for rope in ("off", "on"):
            d = loss(f"tucker_shared_{ranks}", rope) - loss(f"tucker_{ranks}", rope)
            diffs.append(d)
    mean_d = statistics.mean(diffs)
    lines.append(f"- shared − separated over 10 pairs: mean {mean_d:+.3f}, range {min(diffs):+.3f} .. {max(diffs):+.3f}, "
                 f"{sum(d > 0 for d in diffs)}/10 positive: {verdict(mean_d)} (paper: every pair positive, "
                 f"mean {statistics.mean(paper(f'tucker_shared_{r}', p) - paper(f'tucker_{r}', p) for r in ('8_128_128', '8_64_64', '6_64_64', '6_32_32', '4_32_32') for p in ('off', 'on')):+.3f})")

    # 4. RoPE improves every family
    lines += ["", "## 4. RoPE (latent RoPE for Tucker) vs learned positions"]
    rows = sorted({r["row"] for r in recs if not r["row"].startswith("mla_shared_latent")})
    deltas = {row: loss(row, "on") - loss(row, "off") for row in rows if (row, "on") in by and (row, "off") in by}
    better = sum(d < 0 for d in deltas.values())
    lines.append(f"- on − off over {len(deltas)} rows: mean {statistics.mean(deltas.values()):+.3f}, "
                 f"{better}/{len(deltas)} rows improve; MHA {deltas['mha']:+.3f}, Tucker [8,64,64] "
                 f"{deltas['tucker_8_64_64']:+.3f}: {verdict(-statistics.mean(deltas.values()))} "
                 f"(paper: every row improves, mean {statistics.mean(paper(r, 'on') - paper(r, 'off') for r in deltas):+.3f})")

    # 5. MLA trains with latent RoPE
    lines += ["", "## 5. MLA with latent RoPE (shared KV)"]
    for dc in (128, 64, 32):
        lat, dec = loss(f"mla_shared_latent{dc}", "on"), loss(f"mla_shared{dc}", "on")
        lines.append(f"- dcK={dc}: latent {lat:.3f} vs decoupled {dec:.3f} (paper {paper(f'mla_shared_latent{dc}', 'on'):.3f} "
                     f"vs {paper(f'mla_shared{dc}', 'on'):.3f}); trains: holds; latent − decoupled {lat - dec:+.3f}")

    # 6. Lower Tucker ranks cost validation loss gradually
    lines += ["", "## 6. Tucker separated, ranks in the paper's order"]
    order = ["8_128_128", "8_64_64", "6_64_64", "6_32_32", "4_32_32"]
    for rope in ("off", "on"):
        ours = [loss(f"tucker_{r}", rope) for r in order]
        monotone = all(b >= a - 2 * noise for a, b in zip(ours, ours[1:]))
        spread = ours[-1] - ours[0]
        lines.append(f"- RoPE {rope}: " + ", ".join(f"[{r.replace('_', ',')}] {v:.3f}" for r, v in zip(order, ours)) +
                     f"; last − first {spread:+.3f} (paper {paper('tucker_4_32_32', rope) - paper('tucker_8_128_128', rope):+.3f}): "
                     f"{verdict(spread) if monotone else 'does not hold (not monotone beyond noise)'}")

    text = "\n".join(lines) + "\n"
    write_text(out, text)  # atomically: a kill leaves the old claims, not half of the new
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
