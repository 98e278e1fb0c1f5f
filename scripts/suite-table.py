#!/usr/bin/env python3
"""The scenario suite's results table in docs/evaluation.md, from the simulator's JSON.

    cargo run --release -- simulate --suite --json suite.json
    python3 scripts/suite-table.py suite.json > table.md

Per world: the best baseline of the first seed, heshare as it ships, told every job's class
(labelled) and told every job's truth (oracle), each as facility energy per job / mean JCT /
p99 JCT over the best baseline's (median over seeds), and heshare's kills that plain Slurm
never had (all seeds); then the geometric means. No figure is typed by hand.
"""
import json
import sys


def cell(r):
    return "{:.2f}x / {:.2f}x / {:.2f}x".format(
        r["energy_ratio"], r["mean_jct_ratio"], r["p99_jct_ratio"]
    )


def main(path):
    d = json.load(open(path))
    seeds = d["seeds"]
    print(
        "{} suite, {} seed{}, {:.0f} s: `heshare simulate --suite{} --json FILE`, then "
        "`python3 scripts/suite-table.py FILE`.\n".format(
            "quick" if d["quick"] else "full",
            seeds,
            "" if seeds == 1 else "s",
            d["wall_s"],
            " --quick" if d["quick"] else "",
        )
    )
    print(
        "| world | best baseline | heshare energy / JCT / p99 | labelled | oracle | "
        "heshare's kills plain Slurm never had |"
    )
    print("|---|---|---|---|---|---|")
    for w in d["worlds"]:
        rows = {r["policy"]: r for r in w["heshare"]}
        print(
            "| {} | {} | {} | {} | {} | {} |".format(
                w["world"]["name"],
                w["best_baseline"]["policy"],
                cell(rows["heshare"]),
                cell(rows["heshare-labelled"]),
                cell(rows["heshare-oracle"]),
                rows["heshare"]["caused_kills"],
            )
        )
    s = {r["policy"]: r for r in d["summary"]}

    def g(p):
        r = s[p]
        return "{:.2f}x / {:.2f}x / {:.2f}x".format(
            r["energy_geomean"], r["mean_jct_geomean"], r["p99_jct_geomean"]
        )

    print(
        "| **geometric mean** | | **{}** | {} | {} | |".format(
            g("heshare"), g("heshare-labelled"), g("heshare-oracle")
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: suite-table.py SUITE.json (from heshare simulate --suite --json)")
    main(sys.argv[1])
