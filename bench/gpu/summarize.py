"""Joins `sparsetir bench --device cuda` and bench/gpu/peers.py JSON lines into Markdown tables,
with the ratio peer time / sparsetir time per case (higher is better for sparsetir) and geometric
means per table.

    python3 summarize.py OURS.jsonl PEERS.jsonl   # one table (CSR operators against cuSPARSE)
    python3 summarize.py --out DIR                # every table of a `bench/gpu/run.sh` run

With --out, every `cusparse*.jsonl` of DIR is read (run.sh times the peers more than once: on
small matrices cuSPARSE's time moved by up to 1.7x between runs), and each case is compared
with the fastest of the peer's runs: the ratios never gain from a slow peer run.
"""
import json
import math
import os
import sys


def read(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def fastest(runs):
    """Per (op, matrix, feat), the peer row with the smallest time over several runs' rows."""
    best = {}
    for rows in runs:
        for r in rows:
            if "ms" not in r:
                continue
            key = (r.get("op"), r.get("matrix"), r.get("feat"))
            if key not in best or r["ms"] < best[key]["ms"]:
                best[key] = r
    return list(best.values())


def geomean(rs):
    return math.exp(sum(math.log(x) for x in rs) / len(rs))


def means(ratios, label=""):
    for op, rs in sorted(ratios.items()):
        print(f"\n{label}{op}: geometric mean {geomean(rs):.2f}x over {len(rs)} cases "
              f"(min {min(rs):.2f}x, max {max(rs):.2f}x)")


def csr_table(ours_rows, peer_rows):
    ours = {(r["op"], r["matrix"], r["feat"]): r for r in ours_rows}
    peers = {(r["op"], r["matrix"], r["feat"]): r for r in peer_rows if "ms" in r}
    print("| op | matrix | feat | nnz | format | sparsetir ms | cuSPARSE ms | ratio | check |")
    print("|---|---|---:|---:|---|---:|---:|---:|---|")
    ratios = {}
    for key in sorted(ours):
        o = ours[key]
        p = peers.get(key)
        ms = (o.get("seconds") or 0) * 1e3
        if p and ms > 0:
            r = p["ms"] / ms
            ratios.setdefault(key[0], []).append(r)
            print(f"| {key[0]} | {key[1]} | {key[2]} | {o['nnz']} | {o.get('format', 'csr')} | "
                  f"{ms:.4f} | {p['ms']:.4f} | {r:.2f}x | {o['check']} |")
    means(ratios)


def hyb_table(auto_rows, peer_rows):
    """hyb alone (the candidate `--format auto` measured), against cuSPARSE CSR SpMM."""
    peers = {(r["matrix"], r["feat"]): r for r in peer_rows if r.get("op") == "spmm" and "ms" in r}
    print("| matrix | feat | hyb ms | schedule | cuSPARSE ms | ratio | hyb (scalar loads) ms |")
    print("|---|---:|---:|---|---:|---:|---:|")
    ratios = {}
    for o in auto_rows:
        p = peers.get((o["matrix"], o["feat"]))
        hyb = [c for c in o.get("candidates", []) if c["format"].startswith("hyb") and c.get("seconds") and c.get("check", True)]
        if not (p and hyb):
            continue
        # hyb's schedules (scalar loads; at widths that are multiples of 128 float4 loads, and
        # from 256 also 128-feature chunks over threadIdx.z), with the long rows split over
        # buckets or (format `...+csr`) kept whole, a thread block each: the fastest, as `auto`
        # picks it. The last column: SparseTIR's form (split rows, scalar loads).
        best = min(hyb, key=lambda c: c["seconds"])
        plain = [c for c in hyb if c.get("schedule", "hyb") == "hyb" and not c["format"].endswith("+csr")]
        label = best.get("schedule", "hyb") + (" +csr" if best["format"].endswith("+csr") else "")
        r = p["ms"] / (best["seconds"] * 1e3)
        ratios.setdefault("spmm hyb", []).append(r)
        ratios.setdefault(f"spmm hyb, width {o['feat']}", []).append(r)
        plain_ms = f"{plain[0]['seconds'] * 1e3:.4f}" if plain else ""
        print(f"| {o['matrix']} | {o['feat']} | {best['seconds'] * 1e3:.4f} | {label} | "
              f"{p['ms']:.4f} | {r:.2f}x | {plain_ms} |")
    means(ratios)


def bsr_table(ours_rows, peer_rows):
    peers = {}
    for r in peer_rows:
        if r.get("op") == "spmm_bsr" and "ms" in r:
            peers.setdefault((r["matrix"], r["block"], r["feat"]), []).append(r)
    print("| matrix | block | feat | dtype | sparsetir ms | check | peer | peer dtype | peer ms | ratio |")
    print("|---|---:|---:|---|---:|---|---|---|---:|---:|")
    ratios = {}
    for o in ours_rows:
        blk = int(o["format"].split("=")[1].rstrip(")")) if "block=" in o.get("format", "") else 0
        ms = (o.get("seconds") or 0) * 1e3
        for p in peers.get((o["matrix"], blk, o["feat"]), []):
            if ms <= 0:
                continue
            r = p["ms"] / ms
            ratios.setdefault(f"bsr:{blk} {o['dtype']} vs {p['peer']}", []).append(r)
            print(f"| {o['matrix']} | {blk} | {o['feat']} | {o['dtype']} | {ms:.4f} | {o['check']} | "
                  f"{p['peer']} | {p['dtype']} | {p['ms']:.4f} | {r:.2f}x |")
    means(ratios)


def attention_table(ours_rows, peer_rows):
    peers = {(r["op"], r["dtype"]): r for r in peer_rows if r.get("op", "").startswith("attention")}
    print("| mask | format | softmax | heads | feat | dtype | sparsetir ms | kernels ms | check | sdpa (boolean mask) ms | ratio | sdpa (no mask) ms |")
    print("|---|---|---|---:|---:|---|---:|---|---|---:|---:|---:|")
    for o in ours_rows:
        ms = (o.get("seconds") or 0) * 1e3
        p = peers.get(("attention", o["dtype"]))
        q = peers.get(("attention_nomask", o["dtype"]))
        if ms > 0 and p:
            each = " / ".join(f"{k} {v * 1e3:.4f}" for k, v in (o.get("kernel_seconds") or {}).items() if v)
            print(f"| {o['matrix']} | {o.get('format', 'csr')} | {o.get('softmax', '')} | {o['heads']} | {o['feat']} | {o['dtype']} | {ms:.4f} | {each} | {o['check']} | "
                  f"{p['ms']:.4f} | {p['ms'] / ms:.2f}x | {q['ms'] if q else float('nan'):.4f} |")


def gemm_table(ours_rows, peer_rows):
    gemm = [r for r in peer_rows if r.get("op") == "gemm"]
    # (The last column sets each time against cuBLAS's kernel alone, `peers.py`'s `device_ms`,
    # where the run recorded it: the stricter of the two ratios, events counting the host's
    # launch of each call too.)
    print("| shape | format (sparsetir, or peer) | dtype | 2:4 ms | check | cuBLAS dense ms | ratio | ratio to cuBLAS's GPU time |")
    print("|---|---|---|---:|---|---:|---:|---:|")

    def strict(g, ms):
        return f"{g['device_ms'] / ms:.2f}x" if g.get("device_ms") and ms else "—"
    for o in ours_rows:
        ms = (o.get("seconds") or 0) * 1e3
        # Plain `2:4` names the form it took (on Hopper: the measured fastest) in `format`.
        name = o.get("requested_format", "2:4")
        if o.get("format", name) not in (name, "2:4"):
            name = f"{name} → {o['format']}"
        for g in gemm:
            if ms > 0 and g["m"] == o["rows"] and g["k"] == o["cols"] and g["n"] == o["feat"]:
                print(f"| {o['rows']}x{o['cols']}x{o['feat']} | {name} | {o.get('dtype', '')} | {ms:.4f} | {o['check']} | "
                      f"{g['ms']:.4f} | {g['ms'] / ms:.2f}x | {strict(g, ms)} |")
    # The 2:4 libraries (PyTorch's semi-structured tensors: cuSPARSELt, CUTLASS) on the same
    # shape, against the same cuBLAS time: what the best library reaches on this device.
    for p in (r for r in peer_rows if r.get("op") == "spmm24"):
        for g in gemm:
            if g["m"] == p["m"] and g["k"] == p["k"] and g["n"] == p["n"]:
                if p.get("ms"):
                    print(f"| {p['m']}x{p['k']}x{p['n']} | peer: {p['peer']} | {p['dtype']} | {p['ms']:.4f} | {p.get('check')} | "
                          f"{g['ms']:.4f} | {g['ms'] / p['ms']:.2f}x | {strict(g, p['ms'])} |")
                # Their kernels' GPU time alone (`peers.py`'s `device_ms`), against cuBLAS's.
                if p.get("device_ms") and g.get("device_ms"):
                    print(f"| {p['m']}x{p['k']}x{p['n']} | peer: {p['peer']}, kernels' GPU time | {p['dtype']} | "
                          f"{p['device_ms']:.4f} | {p.get('check')} | {g['ms']:.4f} | {g['ms'] / p['device_ms']:.2f}x | "
                          f"{strict(g, p['device_ms'])} |")
                else:
                    print(f"| {p['m']}x{p['k']}x{p['n']} | peer: {p['peer']} | {p['dtype']} | — | {p.get('error', '')} | {g['ms']:.4f} | — | — |")


def listing(rows):
    print("| op | matrix | feat | dtype | format | schedule | ms | check |")
    print("|---|---|---:|---|---|---|---:|---|")
    for o in rows:
        ms = (o.get("seconds") or 0) * 1e3
        print(f"| {o['op']} | {o['matrix']} | {o.get('feat', 1)} | {o.get('dtype', 'float32')} | "
              f"{o.get('format', '')} | {o.get('schedule', '')} | {ms:.4f} | {o.get('check')} |")


def main():
    if sys.argv[1] != "--out":
        csr_table(read(sys.argv[1]), read(sys.argv[2]))
        return
    d = sys.argv[2]
    runs = [read(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.startswith("cusparse") and f.endswith(".jsonl")]
    peers = fastest(runs)
    print(f"cuSPARSE CSR peers: the fastest of {len(runs)} run(s) per case")
    formats = read(os.path.join(d, "peers_formats.jsonl"))
    sections = [
        ("CSR (default GPU schedules) against cuSPARSE", csr_table, "sparsetir.jsonl", peers),
        ("SpMM --format auto (CSR or hyb per case)", csr_table, "sparsetir_auto.jsonl", peers),
        ("SpMM hyb (the auto candidate) against cuSPARSE CSR", hyb_table, "sparsetir_auto.jsonl", peers),
        ("BSR SpMM on tensor cores against cuSPARSE bsrmm", bsr_table, "sparsetir_bsr.jsonl", formats),
        ("Masked attention against scaled_dot_product_attention", attention_table, "attention.jsonl", formats),
        ("2:4 SpMM (mma.sp) against dense cuBLAS", gemm_table, "sparsetir_24.jsonl", formats),
    ]
    for title, fn, ours, p in sections:
        rows = read(os.path.join(d, ours))
        if rows:
            print(f"\n## {title}\n")
            fn(rows, p)
    for title, f in [("SpMV SELL-C-sigma", "sparsetir_formats.jsonl"),
                     ("16-bit SpMM beside float32 CSR", "sparsetir_dtype.jsonl")]:
        rows = read(os.path.join(d, f))
        if rows:
            if title:
                print(f"\n## {title}\n")
            listing(rows)


if __name__ == "__main__":
    main()
