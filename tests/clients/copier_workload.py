"""The transactional copy workload of test_txn_copier.py (one broker) and
tests/cluster/test_cluster_txn.py (3 nodes): an input topic of unique values, one Kafka
`org.apache.kafka.tools.TransactionalMessageCopier` (kafka-tools 4.1, from
`tests/fetch-jars.sh kafka`) per input partition copying it to the output topic's same
partition, faults at given points of the copy's progress, and the exactly-once check
(tests/cluster/checker.py's check_copy) of the output.

Each copier makes one transaction per poll (up to --transaction-size records plus the consumer
offsets, sent with the group metadata: TxnOffsetCommit v3), aborts about a third of them at
random (--enable-random-aborts) and rewinds to the committed offsets, and exits once the
committed offset reaches the input partition's end. A copier killed with SIGKILL is started
again with the same transactional.id: the new instance fences the old one, whose open
transaction the coordinator aborts, and resumes from the committed offsets.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

REPO = Path(__file__).resolve().parents[2]
RUN_CLASS = REPO / "tests" / "kafka" / "run-class.sh"
KAFKA_LIB = Path(os.environ.get("KAFKA_LIB_DIR", REPO / "tests" / "kafka" / "lib"))
COPIER_CLASS = "org.apache.kafka.tools.TransactionalMessageCopier"
INPUT, OUTPUT, GROUP = "copier-in", "copier-out", "copier-group"
TXN_SIZE = int(os.environ.get("STRATA_TEST_COPIER_TXN_SIZE", "500"))
# A copier killed inside a transaction that already holds its offsets leaves them pending: its
# next instance reads its committed position (an OffsetFetch with require_stable, before it
# calls initTransactions) and gets UNSTABLE_OFFSET_COMMIT until the coordinator aborts the
# transaction at its timeout. Kafka does the same; a short timeout and cleanup interval keep
# that stall short. BROKER_ENV is for the broker(s) under test.
TXN_TIMEOUT_MS = 10000
BROKER_ENV = {"STRATA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000"}
FAULT_SPACING = 0.05  # a fault waits for this much more progress after the previous one

_spec = importlib.util.spec_from_file_location("cluster_checker", REPO / "tests" / "cluster" / "checker.py")
checker = importlib.util.module_from_spec(_spec)
sys.modules["cluster_checker"] = checker  # dataclasses look their module up there
_spec.loader.exec_module(checker)


def require_kafka_tools() -> None:
    if not any(KAFKA_LIB.glob("kafka-tools-*.jar")):
        reason = f"no kafka-tools jar in {KAFKA_LIB}; run tests/fetch-jars.sh kafka"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


class Copier:
    """One TransactionalMessageCopier JVM for input partition `partition`; its JSON status
    lines ("remaining" = records still to copy, counted from the committed offset at start)
    are followed on a thread."""

    def __init__(self, bootstrap: str, partition: int, log_dir: Path):
        self.bootstrap, self.partition, self.log_dir = bootstrap, partition, log_dir
        self.proc: subprocess.Popen | None = None
        self.follower: threading.Thread | None = None
        self.remaining: int | None = None
        self.done = False
        self.starts = 0

    def start(self) -> "Copier":
        self.starts += 1
        self.remaining, self.done = None, False
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx192m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        err = open(self.log_dir / f"copier-{self.partition}-{self.starts}.stderr", "wb")
        self.proc = subprocess.Popen(
            [str(RUN_CLASS), COPIER_CLASS, "--broker-list", self.bootstrap,
             "--input-topic", INPUT, "--input-partition", str(self.partition),
             "--output-topic", OUTPUT, "--transactional-id", f"copier-{self.partition}",
             "--consumer-group", GROUP, "--transaction-size", str(TXN_SIZE),
             "--transaction-timeout", str(TXN_TIMEOUT_MS), "--enable-random-aborts", "--use-group-metadata"],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        err.close()
        self.follower = threading.Thread(target=self._follow, args=(self.proc,), daemon=True)
        self.follower.start()
        return self

    def _follow(self, proc: subprocess.Popen) -> None:
        # The client's log4j lines (KAFKA_LOG_LEVEL) come on stdout too: kept beside stderr.
        other = open(self.log_dir / f"copier-{self.partition}-{self.starts}.stdout", "wb")
        for line in proc.stdout:
            try:
                status = json.loads(line)
            except ValueError:
                other.write(line)
                other.flush()
                continue
            if proc is self.proc:
                self.remaining = status.get("remaining", self.remaining)
                # The copier prints ShutdownComplete from a finally block, after an error too:
                # done only with nothing left to copy.
                self.done = status.get("stage") == "ShutdownComplete" and self.remaining == 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited_unfinished(self) -> bool:
        """The process ended without its ShutdownComplete line (read to its end first)."""
        if self.alive() or self.done:
            return False
        self.follower.join(timeout=10)
        return not self.done

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)

    def stderr_tail(self) -> str:
        path = self.log_dir / f"copier-{self.partition}-{self.starts}.stderr"
        return "\n".join(path.read_text(errors="replace").splitlines()[-15:])


def fill_input(bootstrap: str, records: int, partitions: int) -> dict[int, int]:
    """checker.input_value(p, 0..n-1) into input partition p, in order; returns {p: n}."""
    counts = {p: records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)}
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                     "enable.idempotence": True, "queue.buffering.max.messages": 500000})
    failed: list[str] = []

    def report(err, _msg):
        if err is not None:
            failed.append(str(err))

    for p, n in counts.items():
        for i in range(n):
            while True:
                try:
                    prod.produce(INPUT, value=checker.input_value(p, i).encode(), partition=p, on_delivery=report)
                    break
                except BufferError:
                    prod.poll(0.05)
    assert prod.flush(120) == 0 and not failed, failed[:5]
    return counts


def read_committed_output(bootstrap: str, partitions: int, isolation: str = "read_committed") \
        -> tuple[dict[int, list[tuple[int, str]]], dict[int, int]]:
    """The output as a read_committed consumer sees it, up to each partition's end (the last
    stable offset, which is the high watermark once no transaction is open); and the HWs."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier-checker", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "auto.offset.reset": "error"})
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(OUTPUT, p), timeout=15)[1] for p in range(partitions)}
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        c.assign([TopicPartition(OUTPUT, p, 0) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + 120
        while at_eof != set(range(partitions)):
            assert time.monotonic() < deadline, f"read_committed stuck: EOF on {at_eof}, " \
                f"{({p: len(v) for p, v in out.items()})} records of HW {highs}"
            for m in c.consume(5000, 0.5):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    raise KafkaException(m.error())
                at_eof.discard(m.partition())
                out[m.partition()].append((m.offset(), m.value().decode()))
        return out, highs
    finally:
        c.close()


def group_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(INPUT, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


@dataclass
class CopyRun:
    """Copies `counts` ({input partition: records}) with one copier per partition while
    `faults` [(progress, name)] fire in order: "one copier" and "all copiers" are SIGKILL and
    restart of copiers, any other name is handed to `inject(name)`, which returns what it did."""
    bootstrap: str
    counts: dict[int, int]
    log_dir: Path
    deadline_s: float
    faults: list[tuple[float, str]]
    inject: Callable[[str], str] = lambda name: name
    done_faults: list[str] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)
    copiers: list[Copier] = field(default_factory=list)
    copy_s: float = 0.0

    def run(self) -> "CopyRun":
        total = sum(self.counts.values())
        self.copiers = [Copier(self.bootstrap, p, self.log_dir).start() for p in sorted(self.counts)]
        started = time.monotonic()
        pending = list(self.faults)
        last_fault_at = 0.0
        victim = 0
        try:
            while True:
                assert time.monotonic() < started + self.deadline_s, \
                    f"copy not done in {self.deadline_s:.0f}s: remaining {[c.remaining for c in self.copiers]}; " \
                    f"faults {self.done_faults}; copier exits {self.exits}"
                for c in self.copiers:
                    if c.exited_unfinished():
                        # A copier gives up on some errors (it throws on a fenced producer, or on
                        # an error it cannot abort from): start it again, as an operator would.
                        self.exits.append(f"copier {c.partition} exited {c.proc.returncode} (start "
                                          f"{c.starts}): {c.stderr_tail()[-600:]}")
                        c.start()
                if all(c.done for c in self.copiers):
                    break
                known = [c.remaining for c in self.copiers]
                # Only when every copier (restarted ones too) reports again: no fault hits a
                # copier still starting.
                progress = None if None in known else 1 - sum(known) / total
                if pending and progress is not None and progress >= max(pending[0][0], last_fault_at + FAULT_SPACING):
                    _, what = pending.pop(0)
                    last_fault_at = progress
                    at = f"at {progress:.0%} ({time.monotonic() - started:.0f} s)"
                    if what in ("one copier", "all copiers"):
                        chosen = self.copiers if what == "all copiers" else [self.copiers[victim % len(self.copiers)]]
                        victim += 1
                        for c in chosen:
                            c.kill9()
                        self.done_faults.append(f"kill -9 copier(s) {[c.partition for c in chosen]} {at}")
                        for c in chosen:
                            c.start()
                    else:
                        self.done_faults.append(f"{self.inject(what)} {at}")
                time.sleep(0.2)
        finally:
            for c in self.copiers:
                c.kill9()
        self.copy_s = time.monotonic() - started
        self.pending = pending
        return self

    def check(self, bootstrap: str, leader_bootstrap: Callable[[int], str]) -> tuple["checker.Report", dict]:
        """check_copy over the output (read_committed from `bootstrap`, raw from each
        partition's leader), the group's committed offsets, and the faults all injected."""
        partitions = len(self.counts)
        started = time.monotonic()
        committed, highs = read_committed_output(bootstrap, partitions)
        raw = {p: checker.read_raw_partition(leader_bootstrap(p), OUTPUT, p, highs[p]) for p in range(partitions)}
        report = checker.check_copy(self.counts, committed, raw)
        # The checker is not vacuous: the same output read_uncommitted shows the aborted
        # copies, which check_copy must flag (a broker ignoring isolation_level would be caught).
        if report.stats.get("transactions_abort", 0):
            dirty, _ = read_committed_output(bootstrap, partitions, "read_uncommitted")
            flagged = {v.split("]")[0].lstrip("[") for v in checker.check_copy(self.counts, dirty, raw).violations}
            if not {"aborted read", "duplicate"} <= flagged:
                report.fail("checker blind", f"read_uncommitted output flagged only {sorted(flagged)}")
        offsets = group_offsets(bootstrap, partitions)
        for p, n in self.counts.items():
            if offsets.get(p) != n:
                report.fail("lost offset commit", f"group {GROUP} committed offset {offsets.get(p)} for "
                                                  f"input partition {p}; its end is {n}")
        if self.pending:
            report.fail("faults not injected", f"the copy ended before {self.pending} (injected: "
                                               f"{self.done_faults}): raise STRATA_TEST_COPIER_RECORDS")
        summary = {"records": sum(self.counts.values()), "partitions": partitions,
                   "transaction_size": TXN_SIZE, "copy_s": round(self.copy_s, 1),
                   "check_s": round(time.monotonic() - started, 1), "faults": self.done_faults,
                   "copier_starts": sum(c.starts for c in self.copiers), "copier_exits": self.exits,
                   "highs": highs, "passed": report.ok, **report.stats}
        return report, summary
