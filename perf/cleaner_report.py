#!/usr/bin/env python3
"""Summarises a perf/cleaner.sh run (its out dir, busy window start and end) as the markdown
of perf/RESULTS.md's log-cleaner section: fio's limits, the cleaner's passes and their
MB/s and ratio to fio, and produce busy vs idle."""
import datetime
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
busy_from, busy_to = float(sys.argv[2]), float(sys.argv[3])


def fio(name):
    job = json.loads((out / f"fio-{name}.json").read_text())["jobs"][0]
    return job["read"]["bw_bytes"] / 1e6, job["write"]["bw_bytes"] / 1e6


rw_r, rw_w = fio("rw")
read_only, _ = fio("read")
_, write_only = fio("write")
print("| limit (same run) | MB/s |\n|---|---|")
print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: read | {rw_r:,.1f} |")
print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: write | {rw_w:,.1f} |")
print(f"| fio 1 MiB O_DIRECT qd 8, 50/50 read+write: total | {rw_r + rw_w:,.1f} |")
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
print("| cleaner pass | bytes read | bytes written | records read → kept | s | MB/s cleaned | vs fio read+write total | (read+written)/s vs fio total |")
print("|---|---|---|---|---|---|---|---|")
for start, end, f in passes:
    s = int(f["ms"]) / 1000
    rd, wr = int(f["bytes_read"]), int(f["bytes_written"])
    mbs = rd / 1e6 / s if s else 0
    io = (rd + wr) / 1e6 / s if s else 0
    print(f"| {f['topic']}-{f['partition']} ratio {float(f['dirty_ratio']):.2f} | {rd:,} | {wr:,} | "
          f"{int(f['records_read']):,} → {int(f['records_kept']):,} | {s:.2f} | {mbs:,.1f} | "
          f"{mbs / (rw_r + rw_w):.0%} | {io / (rw_r + rw_w):.0%} |")
print()

runs = {}
for line in (out / "bench.jsonl").read_text().splitlines():
    r = json.loads(line)
    runs[r["label"]] = r
print("| produce 1 KiB acks=all, 4 producers, same shard | records/s | MB/s | p50 µs | p99 µs | p99 busy/idle |")
print("|---|---|---|---|---|---|")
for kind in ["closed", "open"]:
    idle, busy = runs.get(f"idle-{kind}"), runs.get(f"busy-{kind}")
    for label, r in [(f"cleaner idle, {kind} loop", idle), (f"cleaner busy, {kind} loop", busy)]:
        if not r:
            continue
        lat = r.get("latency_us") or {}
        ratio = ""
        if r is busy and idle:
            ratio = f"{lat.get('p99', 0) / max(1, (idle.get('latency_us') or {}).get('p99', 1)):.2f}×"
        print(f"| {label} | {r['records_per_sec']:,.0f} | {r['mb_per_sec']:,.1f} | {lat.get('p50')} | {lat.get('p99')} | {ratio} |")
print()
busy = [(s, e) for s, e, f in passes if f["topic"] == "busy"]
covered = any(s <= busy_from and e >= busy_to for s, e in busy)
print(f"Busy window {busy_to - busy_from:.1f} s; the pass over `busy` ran "
      + (f"{busy[0][0] - busy_from:+.1f} s .. {busy[0][1] - busy_from:+.1f} s from its start" if busy else "never")
      + (" (covering it whole)." if covered else " (NOT covering it whole)."))
print()
print((out / "load.txt").read_text())
