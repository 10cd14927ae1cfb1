#!/usr/bin/env python3
"""Per-stage latency of the RF3 commit chain from the brokers' `e2e_trace` debug events.

Run the three brokers with STRATA_LOG=warn,e2e_trace=debug,strata::shard::replica::leader=debug
(logs n1.log, n2.log, n3.log in one directory, node id = file number), a topic whose name starts
with `e2e-`, then: perf/e2e-trace.py LOGDIR [SKIP_SECONDS]. For every leader append (end offset
E) it finds when each follower staged E (rappend), fsynced it (durable), when the leader heard of
that fsync (the `follower fetch` debug line of a Fetch or a durable-end report with
durable_offset >= E) and when the leader's HW passed E. The events cost CPU themselves (about
10k lines/s at 25k records/s): compare stages, not absolute totals, with an untraced run.
perf/RESULTS-replication.md (2026-12-03, e2e) shows its output.
"""
import re, sys, bisect, datetime, collections, os
d = sys.argv[1]
skip = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
ts_re = re.compile(r'^(\S+Z)\s+DEBUG\s+(\S+?):\s+(.*)$')
def t_of(s):
    return datetime.datetime.strptime(s[:26], "%Y-%m-%dT%H:%M:%S.%f").timestamp()
def kv(rest):
    return dict(re.findall(r'(\w+)=(\S+)', rest))
ev = collections.defaultdict(lambda: collections.defaultdict(list))  # (kind,node,part) -> list
ffetch = collections.defaultdict(list)  # (leader,part,replica) -> [(t,durable,fetch)]
counts = collections.Counter()
fsync_us = collections.defaultdict(list)
t_first = None
for n in (1, 2, 3):
    for line in open(os.path.join(d, f"n{n}.log"), errors="replace"):
        m = ts_re.match(line)
        if not m: continue
        t = t_of(m.group(1)); tgt = m.group(2); rest = m.group(3)
        if tgt == "e2e_trace":
            name = rest.split()[0]
            a = kv(rest)
            counts[(n, name)] += 1
            if "dir" in a:
                base = os.path.basename(a["dir"])
                if not base.startswith("e2e-"): continue
                part = int(base.rsplit("-", 1)[1])
                if name in ("append", "rappend", "durable"):
                    ev[(name, n, part)]["t"].append(t); ev[(name, n, part)]["v"].append(int(a["end"]))
                    if name == "durable": fsync_us[n].append(int(a["us"]))
                elif name == "hw":
                    ev[("hw", n, part)]["t"].append(t); ev[("hw", n, part)]["v"].append(int(a["hw"]))
        elif "follower fetch" in rest:
            a = kv(rest)
            if not a.get("topic", "").startswith("e2e-"): continue
            ffetch[(n, int(a["partition"]), int(a["replica"]))].append((t, int(a["durable_offset"]), int(a["fetch_offset"])))
def first_ge(key, E):
    e = ev.get(key)
    if not e: return None
    # values are non-decreasing in time for one log
    v = e["v"]; i = bisect.bisect_left(v, E)
    return e["t"][i] if i < len(v) else None
leaders = {}
for (name, n, part) in list(ev):
    if name == "append": leaders[part] = n
stages = collections.defaultdict(list)
for part, L in sorted(leaders.items()):
    fol = [f for f in (1, 2, 3) if f != L]
    rep = {}
    for f in fol:
        lst = ffetch.get((L, part, f), [])
        # running max of durable over time
        ts, ds = [], []; m = -1
        for t, du, fo in lst:
            if du > m: m = du; ts.append(t); ds.append(du)
        rep[f] = (ts, ds)
    ap = ev[("append", L, part)]
    t_start = ap["t"][0] + skip
    for t0, E in zip(ap["t"], ap["v"]):
        if t0 < t_start: continue
        thw = first_ge(("hw", L, part), E)
        tld = first_ge(("durable", L, part), E)
        if thw is None: continue
        stages["leader fsync (append -> leader durable)"].append(((tld or t0) - t0))
        stages["TOTAL append -> leader HW"].append(thw - t0)
        reps = []
        for f in fol:
            ts_ = first_ge(("rappend", f, part), E); td = first_ge(("durable", f, part), E)
            ts, ds = rep[f]; i = bisect.bisect_left(ds, E); tr = ts[i] if i < len(ts) else None
            if None in (ts_, td, tr): continue
            stages["f: leader append -> follower staged"].append(ts_ - t0)
            stages["f: follower staged -> follower durable (fsync wait)"].append(td - ts_)
            stages["f: follower durable -> leader hears it"].append(tr - td)
            reps.append((tr, ts_ - t0, td - ts_, tr - td, f))
        if len(reps) == 2:
            reps.sort()
            tr, a, b, c, f = reps[1]
            stages["last follower: append -> staged"].append(a)
            stages["last follower: staged -> durable"].append(b)
            stages["last follower: durable -> leader hears"].append(c)
            stages["last report -> HW set"].append(thw - tr)
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]
print(f"{'stage':58} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
for k, xs in stages.items():
    if not xs: continue
    print(f"{k:58} {len(xs):6} {pct(xs,50)*1e3:8.2f} {pct(xs,90)*1e3:8.2f} {pct(xs,99)*1e3:8.2f} {sum(xs)/len(xs)*1e3:8.2f}")
for n in (1, 2, 3):
    xs = fsync_us[n]
    if xs: print(f"node {n}: fdatasync n={len(xs)} p50 {pct(xs,50)/1e3:.2f} ms p90 {pct(xs,90)/1e3:.2f} p99 {pct(xs,99)/1e3:.2f} ms")
print({f"n{k[0]}:{k[1]}": v for k, v in sorted(counts.items())})
