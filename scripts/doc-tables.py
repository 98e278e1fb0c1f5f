#!/usr/bin/env python3
"""The results tables of docs/evaluation.md, from the simulator's and the benchmark's JSON, so
that no figure there is typed by hand.

    cargo run --release -- simulate --suite --json suite.json
    python3 scripts/doc-tables.py suite suite.json          # the scenario suite's table
    python3 scripts/doc-tables.py compare before.json after.json  # a change, world by world

    for i in 1 2 3; do cargo run --release -- bench --json bench$i.json; done
    python3 scripts/doc-tables.py bench bench1.json bench2.json bench3.json

    for i in 1 2 3; do cargo run --release -- bench --node-helper 300 --json nh$i.json; done
    python3 scripts/doc-tables.py node-helper nh1.json nh2.json nh3.json

    cargo run --release -- simulate --mode placement --json placement.json
    python3 scripts/doc-tables.py placement placement.json  # FGD's protocol against its paper

suite: per world the best baseline of the first seed, heshare as it ships, told every job's
class (labelled) and told every job's truth (oracle), each as facility energy per job / mean
JCT / p99 JCT over the best baseline's (median over seeds), and heshare's kills plain Slurm
never had (all seeds) and, of those, the runs of jobs heshare did not leave as their users
asked (the rest it left as asked: they ran beside other neighbours or on another type than
under plain Slurm), with heshare's and plain Slurm's kills in all, then the geometric means; the
range of heshare's per-seed energy and mean JCT ratios is the spread a change must leave before
it counts. compare: heshare (learned) in two suite runs, world by world, and whether the
second's median lies outside the first's seeds' range ("better"/"worse") or inside it ("within
spread"). bench: each cell the range over the runs, ratios each run's own against the best-fit
scan timed in the same run. placement: the median
GPU allocation over seeds against the FGD paper's.
"""
import json
import sys


def cell(r):
    return "{:.2f}x / {:.2f}x / {:.2f}x".format(
        r["energy_ratio"], r["mean_jct_ratio"], r["p99_jct_ratio"]
    )


def suite(paths):
    (path,) = paths
    d = json.load(open(path))
    seeds = d["seeds"]
    print(
        "{} suite, {} seed{}, {:.0f} s: `heshare simulate --suite{} --json FILE`, then "
        "`python3 scripts/doc-tables.py suite FILE`.\n".format(
            "quick" if d["quick"] else "full",
            seeds,
            "" if seeds == 1 else "s",
            d["wall_s"],
            " --quick" if d["quick"] else "",
        )
    )
    print(
        "| world | best baseline | heshare energy / JCT / p99 | heshare's seeds: energy; JCT | "
        "labelled | oracle | kills: heshare / plain Slurm | plain Slurm never had: all / "
        "heshare's choice |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for w in d["worlds"]:
        rows = {r["policy"]: r for r in w["heshare"]}
        print(
            "| {} | {} | {} | {} | {} | {} | {} | {} |".format(
                w["world"]["name"],
                w["best_baseline"]["policy"],
                cell(rows["heshare"]),
                seeds_cell(rows["heshare"]),
                cell(rows["heshare-labelled"]),
                cell(rows["heshare-oracle"]),
                kills(w),
                caused(w),
            )
        )
    s = {r["policy"]: r for r in d["summary"]}

    def g(p):
        r = s[p]
        return "{:.2f}x / {:.2f}x / {:.2f}x".format(
            r["energy_geomean"], r["mean_jct_geomean"], r["p99_jct_geomean"]
        )

    print(
        "| **geometric mean** | | **{}** | | {} | {} | | |".format(
            g("heshare"), g("heshare-labelled"), g("heshare-oracle")
        )
    )


def policy_row(w, name):
    return next(r for r in w["rows"] if r["policy"] == name)


def kills(w):
    return "{} / {}".format(
        policy_row(w, "heshare")["killed"], policy_row(w, "slurm-mps")["killed"]
    )


def caused(w):
    """heshare's kills of runs plain Slurm never killed, and of those the ones on jobs heshare
    did not leave as their users asked (the rest were left as asked, and ran out of time beside
    other neighbours or on another type than under plain Slurm)."""
    h = policy_row(w, "heshare")
    n, asked = h["killed_not_by_plain_slurm"], h["killed_not_by_plain_slurm_as_asked"]
    if n is None:
        return "-"
    return "{} / {}".format(n, n - (asked or 0))


def f2(x):
    return f"{x:.2f}"


def seeds_cell(r):
    return "{}; {}".format(
        rng(r["energy_ratio_per_seed"], f2), rng(r["mean_jct_ratio_per_seed"], f2)
    )


def verdict(before, after, per_seed, median):
    lo, hi = min(before[per_seed]), max(before[per_seed])
    x = after[median]
    return "better" if x < lo else "worse" if x > hi else "within spread"


def compare(paths):
    a_path, b_path = paths
    a, b = json.load(open(a_path)), json.load(open(b_path))
    print(
        "heshare (learned), before (`{}`, {} seeds) and after (`{}`, {} seeds): energy / mean "
        "JCT / p99 over the best baseline (median over seeds), the seeds' range, and whether "
        "after lies outside before's range.\n".format(a_path, a["seeds"], b_path, b["seeds"])
    )
    print(
        "| world | before | before's seeds: energy; JCT | after | after's seeds | energy | "
        "mean JCT | plain Slurm never had, all / heshare's choice: before; after |"
    )
    print("|---|---|---|---|---|---|---|---|")
    after = {w["world"]["name"]: w for w in b["worlds"]}
    for w in a["worlds"]:
        name = w["world"]["name"]
        if name not in after:
            continue
        x = {r["policy"]: r for r in w["heshare"]}["heshare"]
        y = {r["policy"]: r for r in after[name]["heshare"]}["heshare"]
        print(
            "| {} | {} | {} | {} | {} | {} | {} | {}; {} |".format(
                name,
                cell(x),
                seeds_cell(x),
                cell(y),
                seeds_cell(y),
                verdict(x, y, "energy_ratio_per_seed", "energy_ratio"),
                verdict(x, y, "mean_jct_ratio_per_seed", "mean_jct_ratio"),
                caused(w),
                caused(after[name]),
            )
        )
    for p in ("heshare", "heshare-labelled", "heshare-oracle"):
        sa = {r["policy"]: r for r in a["summary"]}.get(p)
        sb = {r["policy"]: r for r in b["summary"]}.get(p)
        if sa and sb:
            print(
                "- {} geometric mean: {:.3f} / {:.3f} / {:.3f} -> {:.3f} / {:.3f} / {:.3f}".format(
                    p,
                    sa["energy_geomean"],
                    sa["mean_jct_geomean"],
                    sa["p99_jct_geomean"],
                    sb["energy_geomean"],
                    sb["mean_jct_geomean"],
                    sb["p99_jct_geomean"],
                )
            )


def rng(vals, fmt):
    lo, hi = min(vals), max(vals)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def t(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def bench(paths):
    runs = [json.load(open(p)) for p in paths]
    rows = [{r["name"]: r for r in run["rows"]} for run in runs]
    first = runs[0]
    print(
        "{} runs of `heshare bench --json FILE` on {} ({} GPUs, {} busy), {} decisions each, "
        "profiles from a {}-key store; `python3 scripts/doc-tables.py bench FILE...`.\n".format(
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


def node_helper(paths):
    runs = [json.load(open(p)) for p in paths]
    rows = [{r["name"]: r for r in run["rows"]} for run in runs]
    print(
        "{} runs of `heshare bench --node-helper {} --json FILE`; "
        "`python3 scripts/doc-tables.py node-helper FILE...`.\n".format(
            len(runs), runs[0]["node_helper_rounds"]
        )
    )
    print("| | p50 | p99 |")
    print("|---|---|---|")
    for r in runs[0]["rows"]:
        n = r["name"]
        p50 = [x[n]["p50_us"] for x in rows]
        p99 = [x[n]["p99_us"] for x in rows]
        label = "`{}`".format(n.replace("baseline: ", "")) + (
            " (baseline: process start)" if n.startswith("baseline") else ""
        )
        print(f"| {label} | {rng(p50, t)} | {rng(p99, t)} |")
    base = "baseline: heshare --version"
    r50 = [x["heshare prolog"]["p50_us"] / x[base]["p50_us"] for x in rows]
    print("| ratio prolog to the baseline (p50) | {} | |".format(rng(r50, lambda v: f"{v:.1f}×")))


def placement(paths):
    (path,) = paths
    d = json.load(open(path))
    print(
        "{} seeds at load {:.2f} on {} GPUs: `heshare simulate --mode placement --json FILE`, then "
        "`python3 scripts/doc-tables.py placement FILE`.\n".format(
            len(d["seeds"]) if isinstance(d["seeds"], list) else d["seeds"], d["load"], d["gpus"]
        )
    )
    print("| scheduler | heshare's replay | FGD paper | difference |")
    print("|---|---|---|---|")
    for r in d["results"]:
        paper = r.get("published_alloc_rate")
        diff = "" if paper is None else "{:+.2f}".format(r["alloc_rate"] - paper).replace("-", "−")
        print(
            "| {} | {:.2f} | {} | {} |".format(
                r["policy"], r["alloc_rate"], "" if paper is None else f"{paper:.2f}", diff
            )
        )


if __name__ == "__main__":
    tables = {
        "suite": suite,
        "compare": compare,
        "bench": bench,
        "node-helper": node_helper,
        "placement": placement,
    }
    if len(sys.argv) < 3 or sys.argv[1] not in tables:
        sys.exit("usage: doc-tables.py suite|compare|bench|node-helper|placement FILE.json...")
    tables[sys.argv[1]](sys.argv[2:])
