#!/usr/bin/env python3
"""Strata's 3-node cluster beside a 3-node Apache Kafka 4.1 cluster, in one run on this one box
(issue 14, "Performance against Apache Kafka itself"; `perf/replication.sh --peer kafka`).

Deployments, each 3 nodes on loopback with its data on the same disk (--data-dir):
  strata         3 `strata serve` processes started exactly as perf/replication-ab.sh starts
                 them: `--shards 1 --no-pin-shards` (unpinned), one KRaft voter each
  kafka          3 Apache Kafka 4.1 nodes, each broker and controller
                 (tests/kafka/reference_kafka.py, ReferenceKafkaCluster): Kafka's defaults,
                 its start script's JVM flags, 2 GiB heap each; acks come from the page cache
  kafka-flush1   the same with `log.flush.interval.messages=1`: every append is fsynced
                 before it counts, which is Strata's durability (--no-flush1 leaves it out)

Cases (1 KiB records, 8 partitions, 8 producer connections, same seconds and warm-up as
perf/replication-ab.sh; --cases picks some):
  rf1-acksall    RF 1, acks=all, closed loop
  rf3-acksall    RF 3, acks=all, min.insync.replicas=2, closed loop (issue 14: the cluster's
                 write rate, RF x MB/s, target Strata >= 1.5x Kafka)
  rf3-acks1      RF 3, acks=1, closed loop
  e2e-rf3        RF 3, acks=all, min.insync.replicas=2, produce and consume at a fixed rate
                 (--rate, 25,000 records/s): send-to-receipt latency (target: Strata's p99 <=
                 Kafka's)

One client drives every deployment: `strata bench` (a generic Kafka client). Topics are
created with `strata topic create` (Kafka's CreateTopics) with the same configs, then the
harness waits for every partition to have a leader, a full ISR and an answer to ListOffsets.
Each deployment gets a fresh cluster per round, first warmed by an unmeasured 5 s RF3 produce
(the JVM compiles its hot paths; Strata gets the same run). Rounds are interleaved (round 1
strata, kafka, kafka-flush1; round 2 the reverse; ...) so drift of this shared machine hits all
alike. Before every run the page cache is synced and the disk left to go quiet (perf/peer.py's
`settle`): Kafka as shipped leaves GBs dirty that would otherwise be written back during the
next run. Broker CPU is utime + stime of the 3 broker processes (/proc), read from the end of
the bench's warm-up to its end, over the bytes produced in that time. Disk bytes written in the
same window come from /proc/diskstats. Machine limits (fio direct write/read, fdatasync p99)
are measured in the same run (perf/peer.py's `fio_limits`).

Usage: perf/replication_peer.py [--rounds N] [--seconds N] [--warmup N] [--rate N]
           [--cases "rf1-acksall rf3-acksall rf3-acks1 e2e-rf3"] [--no-flush1] [--no-limits]
           [--data-dir DIR] [--out DIR] [--kafka-heap SIZE]
Writes --out/results.jsonl (one object per run), report.md and commands.txt
(default perf/out-replication-peer). Needs target/release/strata (or STRATA_BIN), the Kafka jars
in tests/kafka/lib (tests/fetch-jars.sh kafka), java, fio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "kafka"))
sys.path.insert(0, str(ROOT / "perf"))
import reference_kafka  # noqa: E402
from reference_kafka import ReferenceKafkaCluster, free_ports  # noqa: E402
from peer import cpu_seconds, dirty_mb, disk_sectors, fio_limits, log, settle  # noqa: E402

BIN = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
PARTITIONS = 8
PRODUCERS = 8
RECORD_SIZE = 1024
ALL_CASES = ["rf1-acksall", "rf3-acksall", "rf3-acks1", "e2e-rf3"]
# Unmeasured load on a fresh cluster before its first case (JIT warm-up for Kafka's JVMs).
CLUSTER_WARMUP_S = 5
BENCH_TIMEOUT_S = 600
SECTOR_BYTES = 512


def foreign_load(ours: list[int]) -> list[str]:
    """Brokers, load generators and fio runs on this machine that this harness did not start
    (another session's benchmark): listed in every run's result, since they share the cores
    and the disk with the run."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in ours or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        cmd = " ".join(a.decode(errors="replace") for a in argv if a)
        if ("kafka.Kafka" in cmd or " serve " in cmd or " bench " in cmd or cmd.startswith("fio ")
                or "org.apache.kafka.tools" in cmd):
            found.append(f"{d.name}: {cmd[:160]}")
    return found


def strata_cmd(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout)


class StrataCluster:
    """3 `strata serve` processes, flags as in perf/replication-ab.sh (unpinned)."""

    def __init__(self, workdir: Path, commands: list[str]):
        self.workdir = workdir
        self.commands = commands
        flat = free_ports(6)
        self.ports = list(zip(flat[0::2], flat[1::2]))
        self.procs: list[subprocess.Popen] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p, _ in self.ports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self) -> None:
        voters = ",".join(f"{n + 1}@127.0.0.1:{c}" for n, (_, c) in enumerate(self.ports))
        for n, (p, c) in enumerate(self.ports, start=1):
            cmd = [str(BIN), "serve", "--node-id", str(n), "--listen", f"127.0.0.1:{p}",
                   "--advertised-listener", f"127.0.0.1:{p}", "--controller-listen", f"127.0.0.1:{c}",
                   "--controller-voters", voters, "--data-dir", str(self.workdir / f"n{n}"),
                   "--shards", "1", "--no-pin-shards"]
            self.commands.append(" ".join(cmd))
            self.workdir.mkdir(parents=True, exist_ok=True)
            with open(self.workdir / f"n{n}.log", "ab") as out:
                self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"strata serve exited ({p.returncode}); see {self.workdir}/n*.log")
            r = strata_cmd("cluster", "status", "--json", "--bootstrap", self.bootstrap)
            try:
                if r.returncode == 0 and len(json.loads(r.stdout)["brokers"]) >= 3:
                    return
            except (ValueError, KeyError):
                pass
            time.sleep(0.1)
        raise TimeoutError("the Strata cluster did not list 3 brokers within 60 s")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        self.procs = []


class KafkaCluster:
    """A ReferenceKafkaCluster under the harness's interface."""

    def __init__(self, workdir: Path, overrides: dict[str, str], heap: str, commands: list[str]):
        self.cluster = ReferenceKafkaCluster(workdir, nodes=3, overrides=overrides, heap=heap)
        self.commands = commands

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def pids(self) -> list[int]:
        return self.cluster.pids

    def start(self) -> None:
        self.cluster.start()
        for node in self.cluster.nodes:
            self.commands.append(f"KAFKA_HEAP_OPTS='-Xms{node.heap} -Xmx{node.heap}' "
                                 f"KAFKA_OPTS='{node.jvm_opts}' tests/kafka/run-class.sh kafka.Kafka "
                                 f"{node.config_path}   # " + " ".join(
                                     f"{k}={v}" for k, v in node.settings().items()))

    def stop(self) -> None:
        self.cluster.stop()


def wait_isr(bootstrap: str, topic: str, rf: int, timeout_s: float = 30) -> bool:
    """Every partition has a leader and a full ISR, and every leader answers ListOffsets."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        d = strata_cmd("topic", "describe", topic, "--bootstrap", bootstrap)
        s = strata_cmd("cluster", "status", "--json", "--bootstrap", bootstrap)
        try:
            ps = [p for p in json.loads(s.stdout)["partitions"] if p.get("topic") == topic]
        except (ValueError, KeyError):
            ps = []
        if (d.stdout.count("LogEndOffset: ") == PARTITIONS and len(ps) == PARTITIONS
                and all((p.get("leader") if p.get("leader") is not None else -1) >= 0
                        and len(p.get("isr") or []) == rf for p in ps)):
            return True
        time.sleep(0.2)
    return False


def case_args(case: str, rate: int) -> tuple[str, int, str, list[str]]:
    """(bench mode, replication factor, acks, topic configs) of a case."""
    return {
        "rf1-acksall": ("produce", 1, "all", []),
        "rf3-acksall": ("produce", 3, "all", ["min.insync.replicas=2"]),
        "rf3-acks1": ("produce", 3, "1", []),
        "e2e-rf3": ("e2e", 3, "all", ["min.insync.replicas=2"]),
    }[case]


def run_bench(dep, label: str, topic: str, case: str, ctx: dict, measured: bool = True) -> dict:
    mode, rf, acks, configs = case_args(case, ctx["rate"])
    warmup, seconds = (ctx["warmup"], ctx["seconds"]) if measured else (0, CLUSTER_WARMUP_S)
    create = ["topic", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", str(rf),
              *[a for c in configs for a in ("--config", c)], "--bootstrap", dep.bootstrap]
    ctx["commands"].append(" ".join([str(BIN), *create]))
    cr = strata_cmd(*create)
    if cr.returncode != 0:
        return {"failed": True, "error": f"topic create: {(cr.stderr or cr.stdout)[-300:]}"}
    isr_full = wait_isr(dep.bootstrap, topic, rf)
    cmd = [str(BIN), "bench", mode, "--topic", topic, "--partitions", str(PARTITIONS),
           "--replication-factor", str(rf), *[a for c in configs for a in ("--topic-config", c)],
           "--record-size", str(RECORD_SIZE), "--producers", str(PRODUCERS), "--acks", acks,
           *(["--rate", str(ctx["rate"])] if mode == "e2e" else []),
           "--warmup", str(warmup), "--duration", str(seconds),
           "--bootstrap", dep.bootstrap, "--json", "--label", label]
    if measured:
        ctx["commands"].append(" ".join(cmd))
    load_before = os.getloadavg()[0]
    foreign = foreign_load(dep.pids)
    if foreign and measured:
        log(f"  WARNING: {len(foreign)} benchmark process(es) not started here are running: {foreign}")
    t_start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The measured window starts once the bench's warm-up is over (it connects and looks the
    # topic up in well under the 0.3 s added here) and ends when it exits.
    time.sleep(max(warmup + 0.3 - (time.monotonic() - t_start), 0))
    cpu0 = [cpu_seconds(p) for p in dep.pids]
    disk0, t0 = disk_sectors(read=False), time.monotonic()
    try:
        stdout, stderr = proc.communicate(timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    t1, disk1 = time.monotonic(), disk_sectors(read=False)
    cpu1 = [cpu_seconds(p) for p in dep.pids]
    lines = [line for line in stdout.splitlines() if line.strip().startswith("{")]
    try:
        r = json.loads(lines[-1]) if lines else None
    except ValueError:
        r = None
    if r is None or proc.returncode != 0:
        r = dict(r or {}, failed=True, error=(stderr or stdout)[-600:].strip() or f"exit {proc.returncode}")
    window = t1 - t0
    cpu = [b - a for a, b in zip(cpu0, cpu1)]
    produced_mb_s = (r.get("extra") or {}).get("produce_mb_per_sec") if mode == "e2e" else r.get("mb_per_sec")
    r.update({"mode": mode, "rf": rf, "acks": acks, "topic_configs": configs, "isr_full_at_start": isr_full,
              "window_s": round(window, 2), "broker_cpu_s": [round(c, 2) for c in cpu],
              "broker_cores": round(sum(cpu) / window, 2) if window > 0 else None,
              "disk_write_mb_s": round((disk1 - disk0) * SECTOR_BYTES / 1e6 / window, 1) if window > 0 else None,
              "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0], "foreign_processes": foreign})
    if produced_mb_s and window > 0:
        # CPU seconds per GB produced by the client (not counting replica copies).
        r["broker_cpu_s_per_gb"] = round(sum(cpu) / (produced_mb_s * window / 1000), 2)
    errors = (r.get("errors") or 0) + ((r.get("extra") or {}).get("produce_errors") or 0 if mode == "e2e" else 0)
    r["errors_total"] = errors
    if mode == "e2e" and not r.get("failed") and not (r.get("latency_us") or {}).get("count"):
        r.update(failed=True, error="e2e consumed no records")
    delete = strata_cmd("topic", "delete", topic, "--bootstrap", dep.bootstrap)
    if delete.returncode != 0:
        r["delete_error"] = (delete.stderr or delete.stdout)[-300:]
    time.sleep(1)  # Kafka deletes asynchronously; let the metadata settle before the next topic
    return r


def keep_logs(workdir: Path, logs: Path, prefix: str) -> None:
    """Copies the brokers' logs (Strata's nN.log, Kafka's nN/kafka.log) out of the data
    directory before it is removed, and logs how many WARN/ERROR lines each has."""
    logs.mkdir(parents=True, exist_ok=True)
    for f in sorted(workdir.glob("n*.log")) + sorted(workdir.glob("n*/kafka.log")):
        node = f.stem if f.name != "kafka.log" else f.parent.name
        dest = logs / f"{prefix}-{node}.log"
        shutil.copyfile(f, dest)
        text = re.sub(r"\x1b\[[0-9;]*m", "", dest.read_text(errors="replace"))  # Strata's log colours
        log(f"  {dest.name}: {text.count(' WARN ')} WARN, {text.count(' ERROR ')} ERROR lines")


def produce_rate(r: dict, unit: str):
    """A run's produce rate, `unit` "records" or "mb": an e2e run reports it among its extras."""
    if r.get("failed"):
        return None
    if r.get("mode") == "e2e":
        return (r.get("extra") or {}).get(f"produce_{unit}_per_sec")
    return r.get(f"{unit}_per_sec")


def rec_rate(r: dict):
    return produce_rate(r, "records")


def mb_rate(r: dict):
    return produce_rate(r, "mb")


def lat(r: dict, key: str):
    if r.get("failed"):
        return None
    v = (r.get("latency_us") or {}).get(key)
    return v / 1000 if v is not None else None


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(x, nd=1):
    return "—" if x is None else f"{x:,.{nd}f}"


def report(rows: list[dict], limits: dict, ctx: dict, deps: list[str]) -> str:
    L = [f"### Strata 3 nodes beside Apache Kafka 4.1.1 3 nodes (`perf/replication.sh --peer kafka`, "
         f"{ctx['started']})", ""]
    L.append(f"Build {ctx['build']}, binary {ctx['binary']}; {ctx['rounds']} round(s), medians over rounds; "
             f"{ctx['seconds']} s measured after {ctx['warmup']} s warm-up per run; 1 KiB records, "
             f"{PARTITIONS} partitions, {PRODUCERS} producers; e2e at {ctx['rate']:,} records/s. Load average "
             f"at start {ctx['load_start']:.2f}, at end {ctx['load_end']:.2f}. Machine limits of this run: fio "
             f"direct write {limits.get('fio_write_mb_s')} MB/s, direct read {limits.get('fio_read_mb_s')} MB/s, "
             f"fdatasync p99 {limits.get('fdatasync_p99_ms')} ms (16 KiB).")
    L.append("")
    L.append("| case | deployment | records/s | MB/s | cluster writes MB/s (RF x MB/s) | disk written MB/s | "
             "p50 ms | p99 ms | p99.9 ms | errors | broker CPU s/GB | broker cores |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    table = {}
    for case in ctx["cases"]:
        for d in deps:
            rs = [r for r in rows if r["case"] == case and r["deployment"] == d]
            if not rs:
                continue
            rf = rs[0].get("rf") or case_args(case, 0)[1]
            m = {"rps": med(rec_rate(r) for r in rs), "mb": med(mb_rate(r) for r in rs),
                 "p50": med(lat(r, "p50") for r in rs), "p99": med(lat(r, "p99") for r in rs),
                 "p999": med(lat(r, "p999") for r in rs),
                 "disk": med(r.get("disk_write_mb_s") for r in rs if not r.get("failed")),
                 "cpu": med(r.get("broker_cpu_s_per_gb") for r in rs if not r.get("failed")),
                 "cores": med(r.get("broker_cores") for r in rs if not r.get("failed")),
                 "errors": sum(r.get("errors_total") or 0 for r in rs),
                 "failed": sum(1 for r in rs if r.get("failed"))}
            m["cluster"] = m["mb"] * rf if m["mb"] is not None else None
            table[(case, d)] = m
            err = f"{m['errors']}" + (f" ({m['failed']} failed)" if m["failed"] else "")
            L.append(f"| {case} | {d} | {fmt(m['rps'], 0)} | {fmt(m['mb'])} | {fmt(m['cluster'])} | "
                     f"{fmt(m['disk'])} | {fmt(m['p50'], 2)} | {fmt(m['p99'], 2)} | {fmt(m['p999'], 2)} | {err} | "
                     f"{fmt(m['cpu'], 2)} | {fmt(m['cores'], 2)} |")
    L.append("")
    L.append("Latency is the produce latency (send to ack) for the closed-loop cases and send-to-receipt "
             "for e2e-rf3 (open loop, corrected for coordinated omission); records/s and MB/s of e2e-rf3 "
             "are the produced rate. Broker CPU s/GB: CPU seconds of the 3 broker processes per GB the "
             "client produced (replica copies not counted). Disk written: /proc/diskstats over the same "
             "window (Kafka as shipped writes back later, so its figure trails its produce rate).")
    e2e = [(d, table[("e2e-rf3", d)]["rps"]) for d in deps if ("e2e-rf3", d) in table]
    if e2e:
        L.append(f"e2e-rf3 offered {ctx['rate']:,} records/s; produced (median): "
                 + ", ".join(f"{d} {fmt(v, 0)}" for d, v in e2e)
                 + ". A deployment well below the offered rate was saturated: its latency is a queue.")
    L.append("")
    peers = [d for d in deps if d != "strata"]
    L.append("Ratios Strata / peer (medians):")
    L.append("")
    L.append("| case | figure | " + " | ".join(f"strata / {p}" for p in peers) + " |")
    L.append("|---|---|" + "---|" * len(peers))
    for case in ctx["cases"]:
        s = table.get((case, "strata"))
        if not s:
            continue
        figs = [("cluster writes MB/s", "cluster"), ("p99 ms", "p99"), ("broker CPU s/GB", "cpu")]
        for name, key in figs:
            cells = []
            for p in peers:
                k = table.get((case, p))
                cells.append(f"{s[key] / k[key]:.2f}x" if k and s[key] is not None and k[key] else "—")
            L.append(f"| {case} | {name} | " + " | ".join(cells) + " |")
    L.append("")
    s, k = table.get(("rf3-acksall", "strata")), table.get(("rf3-acksall", "kafka"))
    if s and k and s["cluster"] and k["cluster"]:
        x = s["cluster"] / k["cluster"]
        L.append(f"Issue 14, RF3 acks=all cluster writes Strata >= 1.5x Kafka: {x:.2f}x, "
                 f"{'met' if x >= 1.5 else 'not met'}.")
    s, k = table.get(("e2e-rf3", "strata")), table.get(("e2e-rf3", "kafka"))
    if s and k and s["p99"] is not None and k["p99"] is not None:
        L.append(f"Issue 14, e2e RF3 p99 at {ctx['rate']:,} records/s Strata <= Kafka: {s['p99']:.2f} vs "
                 f"{k['p99']:.2f} ms, {'met' if s['p99'] <= k['p99'] else 'not met'}.")
    L.append("")
    L.append("Every run (round, order, errors):")
    L.append("")
    L.append("| round | deployment | case | records/s | p50 ms | p99 ms | p99.9 ms | errors | load before/after | "
             "dirty MB before settle |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e = r.get("errors_total")
        e = f"{e} {r.get('errors_by_kind') or ''}".strip() if not r.get("failed") else f"FAILED ({e})"
        L.append(f"| {r['round']} | {r['deployment']} | {r['case']} | {fmt(rec_rate(r), 0)} | {fmt(lat(r, 'p50'), 2)} | "
                 f"{fmt(lat(r, 'p99'), 2)} | {fmt(lat(r, 'p999'), 2)} | {e} | "
                 f"{r.get('loadavg_before', 0):.1f}/{r.get('loadavg_after', 0):.1f} | {fmt(r.get('dirty_mb_before'), 0)} |")
    shared = [r for r in rows if r.get("foreign_processes")]
    if shared:
        L.append("")
        L.append(f"{len(shared)} of {len(rows)} runs shared the machine with benchmark processes this harness "
                 "did not start (`foreign_processes` in results.jsonl), e.g. "
                 f"`{shared[0]['foreign_processes'][0]}`.")
    bad = [r for r in rows if r.get("failed") or r.get("errors_total") or r.get("last_error")]
    L.append("")
    if bad:
        L.append("Runs with errors:")
        L.append("")
        for r in bad:
            L.append(f"- round {r['round']} {r['deployment']} {r['case']}: "
                     f"{'failed: ' + str(r.get('error')) if r.get('failed') else str(r.get('errors_total')) + ' errors'}"
                     f"{'; last error: ' + str(r.get('last_error')) if r.get('last_error') else ''}")
    else:
        L.append("No run reported an error.")
    L.append("")
    return "\n".join(L)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rate", type=int, default=25000)
    p.add_argument("--cases", default=" ".join(ALL_CASES))
    p.add_argument("--no-flush1", action="store_true", help="leave out Kafka with flush.messages=1")
    p.add_argument("--no-limits", action="store_true", help="skip the fio measurements")
    p.add_argument("--data-dir", type=Path,
                   default=Path(os.environ.get("PERF_DATA_DIR", "/var/tmp/strata-replication-peer")))
    p.add_argument("--out", type=Path, default=ROOT / "perf" / "out-replication-peer")
    p.add_argument("--kafka-heap", default=os.environ.get("STRATA_PEER_KAFKA_HEAP", "2g"),
                   help="JVM heap of each Kafka node (default 2g)")
    args = p.parse_args()
    cases = args.cases.split()
    unknown = [c for c in cases if c not in ALL_CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}; known: {ALL_CASES}")
    if not BIN.is_file():
        p.error(f"{BIN} not found: build it (cargo build --release) or set STRATA_BIN")
    if not reference_kafka.jars_present():
        p.error(f"no Kafka jars in {reference_kafka.LIB}: run tests/fetch-jars.sh kafka")
    if not shutil.which("java"):
        p.error("java not found on PATH (Kafka 4.1 needs Java 17+)")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(args.data_dir)], capture_output=True, text=True).stdout.strip()
    if fstype in ("tmpfs", "ramfs"):
        p.error(f"{args.data_dir} is on {fstype}; use a real disk (--data-dir)")
    ctx = {"seconds": args.seconds, "warmup": args.warmup, "rate": args.rate, "rounds": args.rounds,
           "cases": cases, "commands": [], "load_start": os.getloadavg()[0],
           "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "build": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip(),
           "binary": str(BIN)}
    args.out.mkdir(parents=True, exist_ok=True)
    for leftover in args.data_dir.iterdir():
        shutil.rmtree(leftover, ignore_errors=True)
    limits = {} if args.no_limits else fio_limits(args.data_dir, args.out)
    (args.out / "limits.json").write_text(json.dumps(limits) + "\n")
    deployments = [("strata", lambda: StrataCluster(args.data_dir / "strata", ctx["commands"])),
                   ("kafka", lambda: KafkaCluster(args.data_dir / "kafka", {}, args.kafka_heap, ctx["commands"]))]
    if not args.no_flush1:
        deployments.append(("kafka-flush1", lambda: KafkaCluster(
            args.data_dir / "kafka-flush1", {"log.flush.interval.messages": "1"}, args.kafka_heap, ctx["commands"])))
    rows: list[dict] = []
    raw = open(args.out / "results.jsonl", "w")
    try:
        for rnd in range(1, args.rounds + 1):
            order = deployments if rnd % 2 == 1 else list(reversed(deployments))
            for name, make in order:
                log(f"round {rnd}: {name}: starting 3 nodes (load average {os.getloadavg()[0]:.2f})")
                dep = make()
                try:
                    t = time.monotonic()
                    try:
                        dep.start()
                    except (RuntimeError, TimeoutError, OSError) as e:
                        # Every case of this deployment and round is recorded as failed, with why.
                        log(f"  FAILED to start: {e}")
                        for case in cases:
                            r = {"deployment": name, "case": case, "round": rnd, "failed": True,
                                 "error": f"cluster start: {str(e)[-400:]}", "errors_total": 0}
                            raw.write(json.dumps(r) + "\n")
                            rows.append(r)
                        continue
                    log(f"  up in {time.monotonic() - t:.1f} s: {dep.bootstrap}, pids {dep.pids}")
                    w = run_bench(dep, f"{name}-warmup-{rnd}", f"warm-{rnd}", "rf3-acksall", ctx, measured=False)
                    log(f"  cluster warm-up: {rec_rate(w) or 0:,.0f} records/s"
                        f"{' FAILED: ' + str(w.get('error')) if w.get('failed') else ''}")
                    for case in cases:
                        dirty = dirty_mb()
                        settle()
                        log(f"round {rnd}: {name}: {case}")
                        r = run_bench(dep, f"{name}-{case}-{rnd}", f"{case}-{rnd}", case, ctx)
                        r.update({"deployment": name, "case": case, "round": rnd, "dirty_mb_before": round(dirty)})
                        raw.write(json.dumps(r) + "\n")
                        raw.flush()
                        rows.append(r)
                        if r.get("failed"):
                            log(f"  FAILED: {r.get('error')}")
                        else:
                            lu = r.get("latency_us") or {}
                            log(f"  {rec_rate(r) or 0:,.0f} records/s {mb_rate(r) or 0:,.1f} MB/s p50 {lu.get('p50')} "
                                f"p99 {lu.get('p99')} us, errors {r['errors_total']}, broker CPU "
                                f"{r.get('broker_cpu_s_per_gb')} s/GB, disk {r.get('disk_write_mb_s')} MB/s")
                finally:
                    dep.stop()
                    keep_logs(args.data_dir / name, args.out / "logs", f"r{rnd}-{name}")
                    shutil.rmtree(args.data_dir / name, ignore_errors=True)
    finally:
        raw.close()
        (args.out / "commands.txt").write_text("\n".join(dict.fromkeys(
            c.replace(str(ROOT) + "/", "") for c in ctx["commands"])) + "\n")
    ctx["load_end"] = os.getloadavg()[0]
    text = report(rows, limits, ctx, [n for n, _ in deployments])
    (args.out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
