#!/usr/bin/env python3
"""Derive heshare's model constants from the bundled public measurements.

Usage: scripts/calibrate.py DATA_DIR
DATA_DIR holds the folders gavel-osdi20/, zeus-nsdi23/ (see their README files for source and
licence). Pure Python, no third-party packages, deterministic. Every constant in
slurm-conf/heshare.toml whose comment says "calibrate.py" is printed by this script.
"""
import csv
import math
import statistics
import sys
from collections import defaultdict

DATA = sys.argv[1] if len(sys.argv) > 1 else "data"


def rows(path):
    with open(f"{DATA}/{path}", newline="") as f:
        return list(csv.DictReader(f))


def family(job_type):
    return job_type.split(" (")[0]


# --- 1. Gavel: speed of each job family on P100 relative to V100 (isolated, 1 GPU) -----------
iso = defaultdict(dict)
for r in rows("gavel-osdi20/gavel_simulation_isolated_throughputs.csv"):
    if r["consolidated"] == "1" and r["scale_factor"] == "1":
        iso[r["job_type"]][r["gpu_type"]] = float(r["throughput_steps_per_s"])

ratios = {jt: t["p100"] / t["v100"] for jt, t in iso.items() if "p100" in t and "v100" in t}
fam = defaultdict(list)
for jt, q in ratios.items():
    fam[family(jt)].append(q)
geo = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
p100_all = geo(list(ratios.values()))
print("# Gavel isolated throughput, P100 / V100 (geometric mean over batch sizes)")
print(f"all job types ({len(ratios)}): {p100_all:.3f}")
for f_, qs in sorted(fam.items()):
    print(f"  {f_:16s} n={len(qs)}  p100/v100={geo(qs):.3f}")

# --- 2. Gavel co-location: normalised throughput of a pair sharing one V100 -----------------
sums = []
for r in rows("gavel-osdi20/gavel_simulation_colocated_throughputs.csv"):
    if r["gpu_type"] != "v100" or r["scale_factor"] != "1" or r["other_scale_factor"] != "1":
        continue
    a, b = r["job_type"], r["other_job_type"]
    ta, tb = float(r["throughput_steps_per_s"]), float(r["other_throughput_steps_per_s"])
    if ta <= 0 or tb <= 0 or "v100" not in iso[a] or "v100" not in iso[b]:
        continue
    sums.append(ta / iso[a]["v100"] + tb / iso[b]["v100"])
sums.sort()
med = statistics.median(sums)
print("\n# Gavel co-located pairs on one V100: sum of normalised throughputs")
print(f"pairs={len(sums)} median={med:.3f} p25={sums[len(sums)//4]:.3f} p75={sums[3*len(sums)//4]:.3f}")
# heshare's model for two identical training jobs, each with an MPS share of 0.5 and a
# clock-bound fraction c (Zeus V100 median, section 3, C_TRAIN): the SM-bound part takes twice
# as long, the rest is unchanged, and each job slows the other by 1 + kappa * m * b with memory
# intensity m = 1 and busy fraction b = 0.5. The pair's summed normalised throughput is
#   2 / ((2c + 1 - c) * (1 + kappa / 2)).
# Solve kappa so that equals Gavel's median.
C_TRAIN = 0.25
kappa = max(0.0, 2.0 * (2.0 / (med * (1.0 + C_TRAIN)) - 1.0))
print(f"contention kappa fitted to the median with c={C_TRAIN}: {kappa:.3f}")

# --- 3. Zeus: DVFS response (power-limit sweeps) ---------------------------------------------
# Model (src/model.rs): at relative SM clock r = f / f_max,
#   time(r)  = T1 * (c / r + 1 - c)              c: compute-bound fraction (per workload)
#   power(r) = P_idle + (P_max - P_idle) * u * (beta + (1 - beta) * r ** gamma)
# A power limit p caps power(r) <= p; the highest limit is taken as r = 1.
# For each (beta, gamma) we fit c and u per workload, and pick the (beta, gamma) with the least
# squared relative error over all points.
def fit_workload(pts, beta, gamma, p_idle, p_max):
    """Best (squared relative error, c, u) for one workload's sweep at the given beta, gamma."""
    t1 = pts[-1][1]
    best_w = None
    for ci in range(1, 21):
        c = ci * 0.05
        rs = []
        for p, t, w in pts:
            x = t / t1 - (1 - c)
            rs.append(min(1.0, c / x) if x > 0 else 1.0)
        hs = [beta + (1 - beta) * r ** gamma for r in rs]
        # least squares for u in (w - p_idle) = (p_max - p_idle) * u * h
        num = sum((w - p_idle) * h for (_, _, w), h in zip(pts, hs))
        den = sum(((p_max - p_idle) * h) ** 2 for h in hs) / (p_max - p_idle)
        u = min(1.0, max(0.05, num / den)) if den > 0 else 1.0
        e = sum(((p_idle + (p_max - p_idle) * u * h) - w) ** 2 / w ** 2
                for (_, _, w), h in zip(pts, hs))
        if best_w is None or e < best_w[0]:
            best_w = (e, c, u)
    return best_w


def zeus_fit(gpu, p_idle, cap=float("inf")):
    groups = defaultdict(list)
    for r in rows(f"zeus-nsdi23/summary_power_{gpu}.csv"):
        if float(r["power_limit"]) > cap:
            continue
        key = (r["dataset"], r["network"], r["batch_size"], r["optimizer"])
        groups[key].append((float(r["power_limit"]), float(r["time_per_epoch"]), float(r["average_power"])))
    for pts in groups.values():
        pts.sort()
    p_max = max(p for g in groups.values() for p, _, _ in g)
    best = None
    for bi in range(0, 13):
        beta = bi * 0.05
        for gi in range(0, 49):
            gamma = 0.2 + gi * 0.1
            fits = [fit_workload(pts, beta, gamma, p_idle, p_max) for pts in groups.values()]
            err = sum(f[0] for f in fits)
            n = sum(len(pts) for pts in groups.values())
            if best is None or err < best[0]:
                best = (err, beta, gamma, n, statistics.median(f[1] for f in fits))
    err, beta, gamma, n, cmed = best
    per_net = defaultdict(lambda: ([], []))
    for key, pts in groups.items():
        _, c, u = fit_workload(pts, beta, gamma, p_idle, p_max)
        per_net[key[1]][0].append(c)
        per_net[key[1]][1].append(u)
    print(f"{gpu:8s} p_idle={p_idle} p_max={p_max:.0f} workloads={len(groups)} points={n} "
          f"beta={beta:.2f} gamma={gamma:.1f} median_c={cmed:.2f} rms_rel_err={math.sqrt(err / n):.3f}")
    for net, (cs_, us_) in sorted(per_net.items()):
        print(f"    {net:18s} n={len(cs_):2d} median c={statistics.median(cs_):.2f} median u={statistics.median(us_):.2f}")
    return beta, gamma


print("\n# Zeus power-limit sweeps fitted to heshare's DVFS model")
# Idle powers: PWR's table (pwr-ccgrid25-power-model) for V100/P100; A40 and RTX6000 are not in
# it and use the same 12% of the top limit as PWR's V100 (30 / 250 W of a PCIe V100).
for gpu, idle in (("v100", 30), ("p100", 25), ("a40", 36), ("rtx6000", 31)):
    zeus_fit(gpu, idle)
# The A10 is the A40's die capped at 150 W: its power curve is the A40's below 150 W, with the
# 150 W limit as its full clock.
print("a10 = a40 up to 150 W:")
zeus_fit("a40", 36, cap=150)

# --- 4. Zeus: BERT fine-tuning speed on P100 relative to V100 at the top power limit --------
def top_limit_time(gpu, network):
    best = {}
    for r in rows(f"zeus-nsdi23/summary_power_{gpu}.csv"):
        if r["network"] != network:
            continue
        key = (r["dataset"], r["batch_size"], r["optimizer"])
        p = float(r["power_limit"])
        if key not in best or p > best[key][0]:
            best[key] = (p, float(r["time_per_epoch"]))
    return {k: v[1] for k, v in best.items()}

print("\n# Zeus, P100 / V100 speed at each GPU's top power limit")
for net in ("bert_base_uncased", "resnet50", "shufflenetv2", "deepspeech2", "ncf"):
    v, p = top_limit_time("v100", net), top_limit_time("p100", net)
    common = sorted(set(v) & set(p))
    if common:
        print(f"  {net:18s} n={len(common)} p100/v100={geo([v[k] / p[k] for k in common]):.3f}")


# --- 5. GPU types without a measured sweep: relative throughput from datasheets -------------
# Roofline midpoint for mixed-precision training: the geometric mean of the dense FP16 tensor
# TFLOPS ratio and the memory bandwidth ratio against a V100-SXM2 (125 TFLOPS, 900 GB/s).
# Datasheet figures (NVIDIA product pages / whitepapers):
SPECS = {"t4": (65, 320), "a10": (125, 600), "a100": (312, 1555), "h100": (835, 3900)}
print("\n# Datasheet roofline midpoint, relative to V100 (FP16 tensor TFLOPS, GB/s)")
for g, (tf, bw) in SPECS.items():
    print(f"  {g:5s} tflops={tf:4d} bw={bw:5d} relative_throughput={math.sqrt(tf / 125 * bw / 900):.3f}")
fam_all = [geo(qs) for qs in fam.values()]
zeus_q = []
for net in ("bert_base_uncased", "resnet50", "shufflenetv2", "deepspeech2", "ncf"):
    v, p = top_limit_time("v100", net), top_limit_time("p100", net)
    common = sorted(set(v) & set(p))
    zeus_q.append(geo([v[k] / p[k] for k in common]))
p100 = geo(fam_all + zeus_q)
print(f"  p100 measured: geometric mean of {len(fam_all)} Gavel families and {len(zeus_q)} Zeus networks = {p100:.3f}")

# --- 6. Per-class sensitivity to GPU speed: speed(class, g) = relative_throughput(g) ** a ----
print("\n# Speed exponents a = ln(P100/V100 of the class) / ln(P100/V100 of the catalog)")
for name, q in sorted({**{f: geo(qs) for f, qs in fam.items()},
                       "BERT (Zeus)": zeus_q[0], "ResNet-50 (Zeus)": zeus_q[1]}.items()):
    a = math.log(q) / math.log(p100)
    print(f"  {name:18s} p100/v100={q:.3f} a={a:.2f}{'  (negative: clamp to 0)' if a < 0 else ''}")

import json
edp = json.load(open(f"{DATA}/ai-inference-energy-dvfs/edp_optimization_results.json"))
# time at the maximum clock = time at the EDP optimum / (1 - performance_vs_max / 100)
# (performance_vs_max < 0 means the optimum is slower than the maximum clock).
t_max = {}
for r in edp:
    t_max[(r["gpu"], r["workload"])] = r["optimal_timing_edp_seconds"] / (1 - r["performance_vs_max_edp_percent"] / 100)
print("\n# Inference (ai-inference-energy): time at max clock and implied exponent vs the catalog")
# The catalog's relative_throughput of A100 and H100: published per-GPU training ratios (A100
# 2.0x V100 for ResNet-50 and BERT-Large, Sandia SAND2021-0870; H100 1.9x A100 on average over
# MLPerf Training v2.1), not the datasheet roofline, which overstates them.
rel = {"V100": 1.0, "A100": 2.0, "H100": 2.0 * 1.9}
for wl in sorted({w for _, w in t_max}):
    v = t_max[("V100", wl)]
    parts = []
    xs, ys = [], []
    for g in ("A100", "H100"):
        sp = v / t_max[(g, wl)]
        parts.append(f"{g} speedup={sp:.2f}")
        xs.append(math.log(rel[g])); ys.append(math.log(sp))
    a = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    print(f"  {wl:16s} " + " ".join(parts) + f"  a={a:.2f}")
    for g in ("V100", "A100", "H100"):
        r = next(r for r in edp if r["gpu"] == g and r["workload"] == wl)
        print(f"      {g}: edp-optimal {r['optimal_frequency_edp_mhz']} of {r['max_frequency_mhz']} MHz, "
              f"energy -{r['energy_savings_edp_percent']}%, time {-r['performance_vs_max_edp_percent']:+.1f}%")

# --- 7. Inference DVFS response from the EDP optima -----------------------------------------
# At the EDP-optimal clock f (r = f / f_max) the run took (1 + d) times as long as at f_max, so
# the clock-bound fraction is c = d / (1 / r - 1) (0 when the optimum was not slower). Average
# power there is E / t; with the catalog's idle power and the benchmark's power cap as maximum,
# and the DVFS constants used for that type in heshare.toml, the power utilisation is
#   u = (P - idle) / ((max - idle) * (beta + (1 - beta) * r ** gamma)).
CAPS = {"V100": (30, 250, 0.30, 2.0), "A100": (50, 250, 0.30, 2.0), "H100": (50, 400, 0.30, 2.0)}
print("\n# Inference clock-bound fraction c and power utilisation u at the EDP optimum")
by_wl = defaultdict(lambda: ([], []))
for r in edp:
    ratio = r["optimal_frequency_edp_mhz"] / r["max_frequency_mhz"]
    d = -r["performance_vs_max_edp_percent"] / 100
    c = max(0.0, d) / (1 / ratio - 1) if ratio < 1 else 0.0
    idle, cap, beta, gamma = CAPS[r["gpu"]]
    p = r["optimal_energy_edp_joules"] / r["optimal_timing_edp_seconds"]
    u = (p - idle) / ((cap - idle) * (beta + (1 - beta) * ratio ** gamma))
    by_wl[r["workload"]][0].append(min(1.0, c))
    by_wl[r["workload"]][1].append(min(1.0, max(0.0, u)))
    print(f"  {r['gpu']} {r['workload']:16s} r={ratio:.2f} slower={d:+.3f} c={c:.3f} P={p:6.1f} W u={u:.2f}")
for wl, (cs_, us_) in sorted(by_wl.items()):
    print(f"  {wl:16s} median c={statistics.median(cs_):.3f} median u={statistics.median(us_):.2f}")

# --- 8. Inference clock knee: below a fraction k of the maximum clock a service is compute-bound
# and slows in proportion (time = k / r). Where the EDP optimum was measurably slower than the
# maximum clock (more than 1%), k = r * (1 + slowdown); elsewhere it says only that k is lower.
print("\n# Inference clock knee k (time factor max(1, k / r)) from the EDP optima")
knees = defaultdict(list)
for r in edp:
    ratio = r["optimal_frequency_edp_mhz"] / r["max_frequency_mhz"]
    d = -r["performance_vs_max_edp_percent"] / 100
    if d > 0.01:
        knees[r["workload"]].append(ratio * (1 + d))
for wl in sorted({r["workload"] for r in edp}):
    ks = knees.get(wl, [])
    print(f"  {wl:16s} points={len(ks)} knee={statistics.median(ks):.2f}" if ks else f"  {wl:16s} no point slower than 1%")
