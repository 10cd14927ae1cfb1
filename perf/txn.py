#!/usr/bin/env python3
"""Transactions measured (issue 13), all figures from one broker in one run:

- produce throughput, 1 KiB acks=all, 8 partitions, through Kafka's own ProducerPerformance
  (the Java client 4.1): idempotent only, then transactional committing every 100 ms and
  every 10 ms (`--transaction-duration-ms`), as a ratio to the idempotent figure;
- commit latency: confluent-kafka's `commit_transaction()` after 100 records over the 8
  partitions (AddPartitionsToTxn, EndTxn, the markers written and the state made durable),
  p50/p99 over the run;
- consume throughput of the transactional topic with Kafka's ConsumerPerformance,
  isolation.level=read_committed against read_uncommitted.

With `--verification both`, each round runs the produce and commit figures twice, on a
broker with `transaction_partition_verification_enable` (KIP-890 part 1) true and on one
with it false (each fresh, one at a time), and prints them side by side.

Usage: .venv/bin/python perf/txn.py [--records N] [--rounds R] [--commit-seconds S]
       [--data-dir DIR] [--verification on|off|both]
Needs target/release/strata (or STRATA_BIN), tests/kafka/lib (tests/fetch-jars.sh kafka) and
the venv's confluent-kafka. Prints a markdown section for perf/RESULTS.md; raw results in
--out (default perf/out-txn).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import shutil
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer import Strata, create_topic, java_tool, last_perf_line, log  # noqa: E402

PARTITIONS = 8
RECORD = 1024
COMMIT_BATCH = 100


def producer_perf(broker: Strata, topic: str, records: int, commands: list[str],
                  txn_ms: int | None) -> dict:
    args = ["org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", str(RECORD), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all",
            "enable.idempotence=true", "linger.ms=5", "batch.size=131072"]
    if txn_ms is not None:
        args += ["--transactional-id", f"perf-{topic}", "--transaction-duration-ms", str(txn_ms)]
    m = last_perf_line(java_tool(args, commands))
    if not m:
        return {"failed": True, "error": "no ProducerPerformance summary line"}
    rps = float(m.group(2))
    return {"records_per_sec": rps, "mb_per_sec": round(rps * RECORD / 1e6, 1),
            "p99_ms": int(m.group(8))}


def consumer_perf(broker: Strata, topic: str, records: int, isolation: str,
                  commands: list[str], workdir: Path) -> dict:
    conf = workdir / f"consumer-{isolation}.properties"
    conf.write_text(f"isolation.level={isolation}\n")
    out = java_tool(["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                     broker.bootstrap, "--topic", topic, "--messages", str(records),
                     "--consumer.config", str(conf), "--timeout", "60000",
                     "--group", f"perf-{isolation}-{time.monotonic_ns()}"], commands)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    header = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if header is None or header + 1 >= len(lines):
        return {"failed": True, "error": out[-300:]}
    cols = [c.strip() for c in lines[header].split(",")]
    vals = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(cols, vals))
    return {"mb_per_sec": round(float(row["MB.sec"]) * 1.048576, 1),
            "records_per_sec": float(row["nMsg.sec"]), "records": int(row["data.consumed.in.nMsg"])}


def commit_latency(broker: Strata, topic: str, seconds: float) -> dict:
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                  "transactional.id": f"perf-commit-{topic}", "linger.ms": 1})
    p.init_transactions(30)
    value = b"x" * RECORD
    lat_ms = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        p.begin_transaction()
        for i in range(COMMIT_BATCH):
            p.produce(topic, value=value, partition=i % PARTITIONS)
        p.flush(30)
        t0 = time.perf_counter()
        p.commit_transaction(30)
        lat_ms.append((time.perf_counter() - t0) * 1000)
    lat_ms.sort()
    q = statistics.quantiles(lat_ms, n=100)
    return {"commits": len(lat_ms), "p50_ms": round(q[49], 2), "p99_ms": round(q[98], 2),
            "max_ms": round(lat_ms[-1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--commit-seconds", type=float, default=20.0)
    ap.add_argument("--data-dir", default="/var/tmp/strata-perf-txn")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out-txn"))
    ap.add_argument("--verification", choices=("on", "off", "both"), default="on")
    a = ap.parse_args()
    if a.verification == "both":
        return compare_verification(a)
    os.environ["STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE"] = str(
        a.verification == "on").lower()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(a.data_dir)
    shutil.rmtree(workdir, ignore_errors=True)
    broker = Strata(workdir)
    broker.start()
    commands: list[str] = []
    rows: dict[str, list[dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M")
    load = [open("/proc/loadavg").read().split()[0]]
    try:
        for rnd in range(a.rounds):
            for label, txn_ms in (("idempotent", None), ("txn-100ms", 100), ("txn-10ms", 10)):
                topic = f"{label}-{rnd}"
                create_topic(broker, topic, PARTITIONS)
                log(f"round {rnd}: produce {label}")
                rows.setdefault(label, []).append(
                    producer_perf(broker, topic, a.records, commands, txn_ms))
            for iso in ("read_committed", "read_uncommitted"):
                log(f"round {rnd}: consume {iso}")
                rows.setdefault(iso, []).append(
                    consumer_perf(broker, f"txn-100ms-{rnd}", a.records, iso, commands, workdir))
            topic = f"commit-{rnd}"
            create_topic(broker, topic, PARTITIONS)
            log(f"round {rnd}: commit latency")
            rows.setdefault("commit", []).append(commit_latency(broker, topic, a.commit_seconds))
    finally:
        broker.stop()
        load.append(open("/proc/loadavg").read().split()[0])
        shutil.rmtree(workdir, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    (out / "commands.txt").write_text("\n".join(commands) + "\n")

    def med(label: str, key: str) -> float:
        vals = [r[key] for r in rows[label] if not r.get("failed")]
        return statistics.median(vals) if vals else float("nan")

    idem = med("idempotent", "mb_per_sec")
    print(f"Run {started}, {a.rounds} round(s), medians; {a.records} records of {RECORD} B, "
          f"{PARTITIONS} partitions; load average {load[0]} at start, {load[1]} at end.\n")
    print("| figure | value | ratio |\n|---|---|---|")
    for label in ("idempotent", "txn-100ms", "txn-10ms"):
        v = med(label, "mb_per_sec")
        print(f"| produce 1 KiB acks=all, ProducerPerformance, {label} (MB/s; p99 "
              f"{med(label, 'p99_ms'):.0f} ms) | {v:.1f} | {v / idem:.2f}x idempotent |")
    rc, ru = med("read_committed", "mb_per_sec"), med("read_uncommitted", "mb_per_sec")
    print(f"| consume the txn-100ms topic, ConsumerPerformance, read_committed (MB/s) | {rc:.1f} "
          f"| {rc / ru:.2f}x read_uncommitted |")
    print(f"| same, read_uncommitted (MB/s) | {ru:.1f} | |")
    print(f"| commit latency, confluent-kafka, {COMMIT_BATCH} records over {PARTITIONS} partitions: "
          f"p50 / p99 (ms) | {med('commit', 'p50_ms'):.2f} / {med('commit', 'p99_ms'):.2f} | "
          f"{int(med('commit', 'commits'))} commits |")
    for label, rs in rows.items():
        if any(r.get("failed") for r in rs):
            print(f"\n{label}: failed runs: {[r.get('error') for r in rs if r.get('failed')]}")
    return 0


def compare_verification(a) -> int:
    """Produce (transactional, 100 ms and 10 ms commits) and commit latency with KIP-890
    verification on and off, alternating per round on fresh brokers."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(a.data_dir)
    commands: list[str] = []
    rows: dict[str, list[dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M")
    load = [open("/proc/loadavg").read().split()[0]]
    modes = ("on", "off")
    for rnd in range(a.rounds):
        for mode in modes if rnd % 2 == 0 else modes[::-1]:
            os.environ["STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE"] = str(
                mode == "on").lower()
            shutil.rmtree(workdir, ignore_errors=True)
            broker = Strata(workdir)
            broker.start()
            try:
                for label, txn_ms in (("txn-100ms", 100), ("txn-10ms", 10)):
                    topic = f"{label}-{rnd}"
                    create_topic(broker, topic, PARTITIONS)
                    log(f"round {rnd}, verification {mode}: produce {label}")
                    rows.setdefault(f"{label}/{mode}", []).append(
                        producer_perf(broker, topic, a.records, commands, txn_ms))
                topic = f"commit-{rnd}"
                create_topic(broker, topic, PARTITIONS)
                log(f"round {rnd}, verification {mode}: commit latency")
                rows.setdefault(f"commit/{mode}", []).append(
                    commit_latency(broker, topic, a.commit_seconds))
            finally:
                broker.stop()
                shutil.rmtree(workdir, ignore_errors=True)
    load.append(open("/proc/loadavg").read().split()[0])
    (out / "results-verification.json").write_text(json.dumps(rows, indent=1))
    (out / "commands-verification.txt").write_text("\n".join(commands) + "\n")

    def med(label: str, key: str) -> float:
        vals = [r[key] for r in rows[label] if not r.get("failed")]
        return statistics.median(vals) if vals else float("nan")

    print(f"Run {started}, {a.rounds} round(s) alternating the order, medians; {a.records} "
          f"records of {RECORD} B, {PARTITIONS} partitions; load average {load[0]} at start, "
          f"{load[1]} at end.\n")
    print("| figure | verification on | off | on / off |\n|---|---|---|---|")
    for label in ("txn-100ms", "txn-10ms"):
        on, off = med(f"{label}/on", "mb_per_sec"), med(f"{label}/off", "mb_per_sec")
        print(f"| produce 1 KiB acks=all, ProducerPerformance, {label} (MB/s) | {on:.1f} "
              f"| {off:.1f} | {on / off:.2f}x |")
        on, off = med(f"{label}/on", "p99_ms"), med(f"{label}/off", "p99_ms")
        print(f"| same, p99 latency (ms) | {on:.0f} | {off:.0f} | |")
    for q in ("p50_ms", "p99_ms"):
        on, off = med("commit/on", q), med("commit/off", q)
        print(f"| commit latency, confluent-kafka, {COMMIT_BATCH} records over {PARTITIONS} "
              f"partitions, {q[:3]} (ms) | {on:.2f} | {off:.2f} | {on / off:.2f}x |")
    for label, rs in rows.items():
        if any(r.get("failed") for r in rs):
            print(f"\n{label}: failed runs: {[r.get('error') for r in rs if r.get('failed')]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
