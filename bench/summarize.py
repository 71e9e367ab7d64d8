#!/usr/bin/env python3
"""Prints the side-by-side table of bench/run-all.sh: per case, sparsetir's median seconds, the
fastest peer's, their ratio (peer / ours; > 1 means sparsetir is faster), and the geometric mean of
the ratios per operator, plus the compile/load figures sparsetir reported.

Usage: summarize.py RESULTS_DIR [OPS...]   (reads OP-peers.jsonl and OP-sparsetir.jsonl)
"""
import json, math, os, sys


def read(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def best_of_rounds(rows, key):
    """Keeps, per key, the row with the smallest median (run-all.sh repeats every case ROUNDS
    times, peers and sparsetir alike, to damp the shared machine's noise)."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["seconds"] < best[k]["seconds"]:
            best[k] = r
    return list(best.values())


STREAM_GBS = 30.0  # SPEC §9: what this machine streams on 2 cores


def roofline(ours):
    """SPEC §9's SpMM traffic model for the R-MAT graphs: bytes(R) = 4(m+1) + 8 nnz + 4 K R
    + 8 K m, with R (dense rows of B fetched) between n (every row once: full reuse) and nnz
    (no reuse). Prints the bandwidth each bound implies at our median time, against the
    machine's ~30 GB/s."""
    rows = [r for r in ours if r["matrix"].startswith("rmat")]
    if not rows:
        return
    print("\nMemory roofline (SPEC §9 model; achieved = bytes / median seconds; "
          f"machine ≈ {STREAM_GBS:.0f} GB/s):\n")
    print("| matrix | feat | MB at R = n | MB at R = nnz | GB/s at R = n | GB/s at R = nnz "
          "| time at 30 GB/s, R = n (ms) | share of roofline |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        m, n, nnz, k, t = r["rows"], r["cols"], r["nnz"], r["feat"], r["seconds"]
        base = 4 * (m + 1) + 8 * nnz + 8 * k * m
        lo, hi = base + 4 * k * n, base + 4 * k * nnz
        bound = lo / (STREAM_GBS * 1e9)
        print(f"| {r['matrix']} | {k} | {lo/1e6:.1f} | {hi/1e6:.1f} | {lo/t/1e9:.1f} | "
              f"{hi/t/1e9:.1f} | {bound*1e3:.3f} | {bound/t:.0%} |")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    ops = sys.argv[2:] or ["spmm", "sddmm", "spmv"]
    # Issue-6 targets (composable formats, `--format auto`); TARGETS=issue5 gives the earlier ones.
    if os.environ.get("TARGETS") == "issue5":
        targets = {"spmm": 1.0, "sddmm": 2.0, "spmv": 1.0}
    else:
        targets = {"spmm": 1.5, "sddmm": 3.0, "spmv": 1.2, "spgemm": 1.5, "spadd": 1.5}
    for op in ops:
        peers = [r for r in read(os.path.join(out, f"{op}-peers.jsonl")) if "seconds" in r]
        peers = best_of_rounds(peers, lambda r: (r["peer"], r["matrix"], r["feat"]))
        ours_all = read(os.path.join(out, f"{op}-sparsetir.jsonl"))
        unchecked = [r for r in ours_all if not r.get("check")]
        ours = best_of_rounds(ours_all, lambda r: (r["matrix"], r["feat"]))
        ours.sort(key=lambda r: ([x["matrix"] for x in ours_all].index(r["matrix"]), r["feat"]))
        print(f"\n### {op}\n")
        print("| matrix | nnz | feat | format | convert ms | sparsetir ms | GFLOP/s | check "
              "| best peer | peer ms | ratio |")
        print("|---|---:|---:|---|---:|---:|---:|---|---|---:|---:|")
        ratios = []
        for r in ours:
            cands = [p for p in peers if p["matrix"] == r["matrix"] and p["feat"] == r["feat"]]
            if not cands:
                continue
            best = min(cands, key=lambda p: p["seconds"])
            ratio = best["seconds"] / r["seconds"] if r["seconds"] > 0 else float("nan")
            ratios.append(ratio)
            if best["nnz"] != r["nnz"]:
                print(f"<!-- nnz differs: peers {best['nnz']} ours {r['nnz']} -->")
            fmt = r.get("format", "csr")
            conv = r.get("convert_seconds", 0.0) * 1e3
            print(f"| {r['matrix']} | {r['nnz']} | {r['feat']} | {fmt} | {conv:.2f} | "
                  f"{r['seconds']*1e3:.4f} | "
                  f"{r['gflops']:.2f} | {r['check']} | {best['peer']} | {best['seconds']*1e3:.4f} | "
                  f"{ratio:.2f}× |")
        if ratios:
            g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            t = targets.get(op, 1.0)
            verdict = "met" if g >= t else f"MISSED by {t / g:.2f}×"
            low = min(ratios)
            print(f"\n{op}: geometric mean ratio {g:.2f}× over {len(ratios)} cases "
                  f"(target ≥ {t:.1f}×: {verdict}); lowest case {low:.2f}×, "
                  f"{sum(1 for x in ratios if x < 1.0)} case(s) below 1.0×")
        if op == "spmm":
            roofline(ours)
        if unchecked:
            print(f"{op}: {len(unchecked)} run(s) with check: false")
        comp = [r.get("compile_seconds", 0) for r in ours_all]
        load = [r.get("load_seconds", 0) for r in ours_all if r.get("cache") == "hit"]
        if comp:
            print(f"{op}: cold compile (front end + cc + load) max {max(comp)*1e3:.0f} ms; "
                  f"cached load max {max(load)*1e3:.2f} ms" if load else
                  f"{op}: cold compile max {max(comp)*1e3:.0f} ms; no cached load recorded")


if __name__ == "__main__":
    main()
