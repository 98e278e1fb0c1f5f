#!/usr/bin/env python3
"""Writes data/site-example/sacct.txt: a made-up week of GPU jobs on the made-up site of
data/site-example/slurm.conf, in the form

    sacct --allocations --parsable2 \\
      --format=JobID,Submit,Start,End,AllocTRES,User,Timelimit,Account,JobName,ReqTRES,NodeList

It is generated, not any site's accounting: 12 users in 3 accounts submit recurring scripts
(training on 1-4 whole GPUs, typed or not, and inference services on MPS shares) at an
uncongested load, each placed first-fit on the nodes its request allows and started within a
few seconds of its submission (an untyped request's limit written for the slowest type), so a plain-Slurm replay can be checked against the recorded
starts. A few rows never ran or had not ended when exported, and one ran on a node since
retired, bigger than any node left: what a real export holds and a replay must name. Deterministic (seed 7).

    python3 scripts/make-site-example.py > data/site-example/sacct.txt
"""

import random
import sys
from datetime import datetime, timedelta

rng = random.Random(7)
T0 = datetime(2026, 3, 2, 8, 0, 0)

# The nodes of data/site-example/slurm.conf: name -> (type, GPUs).
NODES = {}
for i in range(1, 5):
    NODES[f"a100-{i:02d}"] = ("a100", 4)
for i in range(1, 7):
    NODES[f"v100-{i:02d}"] = ("v100m16", 8)
for i in range(1, 9):
    NODES[f"t4-{i:02d}"] = ("t4", 4)

ACCOUNTS = {"vision": ["ana", "ben", "chen", "dara"], "nlp": ["eli", "fay", "gus", "hana"],
            "serving": ["ivo", "jun", "kai", "lea"]}

# Scripts: (user, account, name, kind, gpus, mps_pct, type asked or None, runtime_s, limit_s)
SCRIPTS = []
for account, users in ACCOUNTS.items():
    for user in users:
        for k in range(rng.randint(2, 3)):
            if account == "serving":
                pct = rng.choice([10, 20, 25, 30, 50])
                SCRIPTS.append((user, account, f"serve-{k}", "mps", 1, pct,
                                rng.choice([None, None, "t4", "a100"]),
                                rng.uniform(1200, 7200), 8 * 3600))
            else:
                gpus = rng.choice([1, 1, 1, 2, 2, 4])
                ty = rng.choice([None, None, "a100", "v100m16", "t4"])
                runtime = rng.uniform(1800, 6 * 3600) * (1.5 if ty == "t4" else 1.0)
                limit = (int(runtime * 1.8) // 3600 + 1) * 3600
                SCRIPTS.append((user, account, f"train-{k}", "gpu", gpus, None, ty,
                                runtime, limit))

busy = {n: [] for n in NODES}  # node -> list of (start, end, gpu fraction held)


def held(node, at):
    return sum(f for (s, e, f) in busy[node] if s <= at < e)


def place(at, gpus, frac, ty, runtime):
    """First-fit on a node of an allowed type that has room for the whole run."""
    for node, (t, n) in NODES.items():
        if ty is not None and t != ty:
            continue
        if frac < 1.0 and t == "v100m16":
            continue  # MPS is configured on the A100 and T4 nodes only
        need = gpus if frac >= 1.0 else frac
        # Checking the start and every later start within the run is enough for a step function.
        points = [at] + [s for (s, e, f) in busy[node] if at < s < at + runtime]
        if all(held(node, p) + need <= n + 1e-9 for p in points):
            return node, t
    return None, None


def fmt(d):
    return d.strftime("%Y-%m-%dT%H:%M:%S")


def hms(s):
    s = int(s)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


rows = []
job_id = 40000
t = 0.0
while t < 7 * 86400 and len(rows) < 300:
    t += rng.expovariate(1 / 2000.0)
    user, account, name, kind, gpus, pct, ty, runtime, limit = rng.choice(SCRIPTS)
    run = runtime * rng.lognormvariate(0, 0.1)
    job_id += 1
    frac = 1.0 if kind == "gpu" else pct / 100.0
    if kind == "gpu":
        req = f"billing={8 * gpus},cpu={8 * gpus},gres/gpu{':' + ty if ty else ''}={gpus},mem={32 * gpus}G,node=1"
    else:
        req = f"billing=4,cpu=4,gres/mps{':' + ty if ty else ''}={pct},mem=16G,node=1"
    start = t + rng.randint(0, 3)
    node, on = place(start, gpus, frac, ty, run)
    if node is None:
        continue  # would have queued: left out of an uncongested example
    busy[node].append((start, start + run, gpus if frac >= 1.0 else frac))
    if ty is None and kind == "gpu":
        # An untyped request may land on any type: its user writes the limit for the slowest
        # (the catalog's relative throughputs: A100 2.0, V100 1.0, T4 0.43).
        speed = {"a100": 2.0, "v100m16": 1.0, "t4": 0.43}
        limit = (int(run * speed[on] / 0.43 * 1.3) // 3600 + 1) * 3600
    if kind == "gpu":
        alloc = f"billing={8 * gpus},cpu={8 * gpus},gres/gpu:{on}={gpus},gres/gpu={gpus},mem={32 * gpus}G,node=1"
    else:
        alloc = f"billing=4,cpu=4,gres/mps={pct},mem=16G,node=1"
    rows.append((job_id, T0 + timedelta(seconds=t), T0 + timedelta(seconds=start),
                 T0 + timedelta(seconds=start + run), alloc, user, hms(limit), account, name,
                 req, node))

out = sys.stdout
out.write("JobID|Submit|Start|End|AllocTRES|User|Timelimit|Account|JobName|ReqTRES|NodeList\n")
for (jid, sub, st, en, alloc, user, limit, account, name, req, node) in rows:
    out.write(f"{jid}|{fmt(sub)}|{fmt(st)}|{fmt(en)}|{alloc}|{user}|{limit}|{account}|{name}|{req}|{node}\n")
last = rows[-1][1]
# What real exports hold besides: a job cancelled while pending, one still running, and one that
# ran on an 8-GPU node since retired (no node of slurm.conf can hold it now).
out.write(f"{job_id + 1}|{fmt(last)}|Unknown|Unknown|billing=8,cpu=8,gres/gpu=1,mem=32G,node=1|ana|04:00:00|vision|train-0|billing=8,cpu=8,gres/gpu=1,mem=32G,node=1|None assigned\n")
out.write(f"{job_id + 2}|{fmt(last)}|{fmt(last)}|Unknown|billing=16,cpu=16,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|eli|12:00:00|nlp|train-1|billing=16,cpu=16,gres/gpu=2,mem=64G,node=1|a100-01\n")
out.write(f"{job_id + 3}|{fmt(last)}|{fmt(last)}|{fmt(last + timedelta(hours=3))}|billing=64,cpu=64,gres/gpu:a100=8,gres/gpu=8,mem=256G,node=1|fay|1-00:00:00|nlp|big-0|billing=64,cpu=64,gres/gpu:a100=8,mem=256G,node=1|a100-09\n")
