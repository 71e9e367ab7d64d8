"""Joins `sparsetir bench --device cuda` and bench/gpu/peers.py JSON lines into a Markdown table
with the ratio sparsetir / cuSPARSE (by median time) per case and geometric means per operator."""
import json
import math
import sys


def read(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


ours = {(r["op"], r["matrix"], r["feat"]): r for r in read(sys.argv[1])}
peers = {(r["op"], r["matrix"], r["feat"]): r for r in read(sys.argv[2])}
print("| op | matrix | feat | nnz | sparsetir ms | cuSPARSE ms | ratio | check |")
print("|---|---|---:|---:|---:|---:|---:|---|")
ratios = {}
for key in sorted(ours):
    o = ours[key]
    p = peers.get(key)
    ms = (o["seconds"] or 0) * 1e3
    if p and ms > 0:
        r = p["ms"] / ms
        ratios.setdefault(key[0], []).append(r)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {o['nnz']} | {ms:.4f} | {p['ms']:.4f} | {r:.2f}x | {o['check']} |")
for op, rs in sorted(ratios.items()):
    g = math.exp(sum(math.log(x) for x in rs) / len(rs))
    print(f"\n{op}: geometric mean {g:.2f}x over {len(rs)} cases (min {min(rs):.2f}x, max {max(rs):.2f}x)")
