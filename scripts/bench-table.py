#!/usr/bin/env python3
"""The decision-latency table in docs/evaluation.md, from `heshare bench --json` runs.

    for i in 1 2 3; do cargo run --release -- bench --json bench$i.json; done
    python3 scripts/bench-table.py bench1.json bench2.json bench3.json

Each cell is the range over the runs (min-max); the ratios are each run's own, against the
best-fit scan timed in the same run. No figure is typed by hand.
"""
import json
import sys


def rng(vals, fmt):
    lo, hi = min(vals), max(vals)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def t(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def main(paths):
    runs = [json.load(open(p)) for p in paths]
    rows = [{r["name"]: r for r in run["rows"]} for run in runs]
    first = runs[0]
    print(
        "{} runs of `heshare bench --json FILE` on {} ({} GPUs, {} busy), {} decisions each, "
        "profiles from a {}-key store; `python3 scripts/bench-table.py FILE...`.\n".format(
            len(runs), first["cluster"], first["gpus"], first["busy_gpus"],
            first["decisions"], first["profile_keys"],
        )
    )
    print("| | p50 | p99 |")
    print("|---|---|---|")
    names = [r["name"] for r in first["rows"]]
    for n in names:
        p50 = [r[n]["p50_us"] for r in rows]
        p99 = [r[n]["p99_us"] for r in rows]
        print(f"| {n} | {rng(p50, t)} | {rng(p99, t)} |")
    base = "baseline: best-fit scan"
    for n, label in [
        ("plugin job_submit (live snapshot)", "ratio plugin decision / best-fit"),
        ("unlabelled, by profile (store)", "ratio profiled decision / best-fit"),
    ]:
        r50 = [r[n]["p50_us"] / r[base]["p50_us"] for r in rows]
        r99 = [r[n]["p99_us"] / r[base]["p99_us"] for r in rows]
        x = lambda v: f"{v:.1f}×"
        print(f"| {label} | {rng(r50, x)} | {rng(r99, x)} |")
    print(
        "\nThe store is {:.0f} MB of JSON, parsed in {} ms (the snapshot thread does it when the "
        "file changes, outside job_submit).".format(
            first["store_mb"], rng([r["store_parse_ms"] for r in runs], lambda v: f"{v:.0f}")
        )
    )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: bench-table.py BENCH.json... (from heshare bench --json)")
    main(sys.argv[1:])
