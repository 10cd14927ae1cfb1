#!/usr/bin/env python3
"""Summarises a perf/cleaner.sh run (its out dir) as the markdown of perf/RESULTS.md's
log-cleaner section: fio's limits, the cleaner's passes (MB/s and ratio to fio), and, per
interleaved round, latency with the cleaner idle vs busy and how much of each busy bench the
cleaner's pass covered."""
import datetime
import json
import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])


def fio(name):
    path = out / f"fio-{name}.json"
    if not path.exists():
        return None
    job = json.loads(path.read_text())["jobs"][0]
    return job["read"]["bw_bytes"] / 1e6, job["write"]["bw_bytes"] / 1e6


fio_total = None
if fio("rw"):
    rw_r, rw_w = fio("rw")
    read_only, _ = fio("read")
    _, write_only = fio("write")
    fio_total = rw_r + rw_w
    print("| limit (same run) | MB/s |\n|---|---|")
    print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: read | {rw_r:,.1f} |")
    print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: write | {rw_w:,.1f} |")
    print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: total | {fio_total:,.1f} |")
    print(f"| fio 1 MiB O_DIRECT qd 8, read alone | {read_only:,.1f} |")
    print(f"| fio 1 MiB O_DIRECT qd 8, write alone | {write_only:,.1f} |")
    print()

passes = []
line_re = re.compile(r"^(\S+)Z .*log cleaned (.*)$")
for line in (out / "broker.log").read_text().splitlines():
    m = line_re.match(line)
    if not m:
        continue
    fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
    end = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
    ms = int(fields["ms"])
    passes.append((end - ms / 1000, end, fields))
pct = lambda x: f"{x / fio_total:.0%}" if fio_total else "n/a"
print("| cleaner pass | bytes read | bytes written | records read → kept | s | MB/s cleaned | vs fio read+write total | (read+written)/s vs fio total |")
print("|---|---|---|---|---|---|---|---|")
for start, end, f in passes:
    s = int(f["ms"]) / 1000
    rd, wr = int(f["bytes_read"]), int(f["bytes_written"])
    mbs = rd / 1e6 / s if s else 0
    io = (rd + wr) / 1e6 / s if s else 0
    print(f"| {f['topic']}-{f['partition']} ratio {float(f['dirty_ratio']):.2f} | {rd:,} | {wr:,} | "
          f"{int(f['records_read']):,} → {int(f['records_kept']):,} | {s:.2f} | {mbs:,.1f} | "
          f"{pct(mbs)} | {pct(io)} |")
print()

runs = {}
for line in (out / "bench.jsonl").read_text().splitlines():
    r = json.loads(line)
    runs[r["label"]] = r
windows = {}
for line in (out / "windows.txt").read_text().splitlines():
    kind, rnd, a, b = line.split()
    windows[(kind, rnd)] = (float(a), float(b))


def lat(label):
    r = runs.get(label) or {}
    return r, (r.get("latency_us") or {})


def coverage(rnd):
    """Fraction of the busy window of round `rnd` during which its log's pass ran."""
    a, b = windows[("busy", rnd)]
    for s, e, f in passes:
        if f["topic"] == f"dirty{rnd}":
            return max(0.0, min(b, e) - max(a, s)) / (b - a)
    return 0.0


rounds = sorted({rnd for _, rnd in windows}, key=int)
print("| round | phase | open loop, end to end (send → fetched): p50 / p99 / max µs | open loop, produce acks=all: p50 / p99 µs | closed loop produce: MB/s, p99 µs | busy window covered by the pass |")
print("|---|---|---|---|---|---|")
ratios = {"e2e_p99": [], "e2e_p50": [], "open_produce_p99": [], "closed_p99": [], "closed_mbs": []}
for rnd in rounds:
    row = {}
    for kind in ["idle", "busy"]:
        e2e, el = lat(f"{kind}-e2e-{rnd}")
        cl, cll = lat(f"{kind}-closed-{rnd}")
        pl = (e2e.get("extra") or {}).get("produce_latency_us") or {}
        row[kind] = (el, cl, cll, pl)
        cov = f"{coverage(rnd):.0%}" if kind == "busy" else ""
        print(f"| {rnd} | {kind} | {el.get('p50')} / {el.get('p99')} / {el.get('max')} | "
              f"{pl.get('p50')} / {pl.get('p99')} | "
              f"{cl.get('mb_per_sec', 0):,.1f}, {cll.get('p99')} | {cov} |")
    (ie, ic, icl, ip), (be, bc, bcl, bp) = row["idle"], row["busy"]
    if ip.get("p99") and bp.get("p99"):
        ratios["open_produce_p99"].append(bp["p99"] / ip["p99"])
    if ie.get("p99") and be.get("p99"):
        ratios["e2e_p99"].append(be["p99"] / ie["p99"])
        ratios["e2e_p50"].append(be["p50"] / ie["p50"])
    if icl.get("p99") and bcl.get("p99"):
        ratios["closed_p99"].append(bcl["p99"] / icl["p99"])
        ratios["closed_mbs"].append(bc["mb_per_sec"] / ic["mb_per_sec"])
print()
for k, v in ratios.items():
    if v:
        print(f"busy/idle {k}: " + ", ".join(f"{x:.2f}" for x in v) + f" (median {statistics.median(v):.2f})")
print()
print((out / "load.txt").read_text())
