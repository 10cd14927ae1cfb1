"""Shared pieces of the crash, power-loss and torn-tail tests: a producer that records exactly
which records were acknowledged, and a checker that every one of them survived."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from confluent_kafka import Producer

from common import SKIP_HW_CHECK, read_all


@dataclass
class AckLog:
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)  # (partition, offset) -> value
    failed: int = 0
    sent: set[bytes] = field(default_factory=set)


def produce_until(bootstrap: str, topic: str, partitions: int, log: AckLog, acked_target: int,
                  on_target: Callable[[], None], extra_after_target: int = 200, deadline_s: float = 120,
                  conf: dict | None = None) -> None:
    """Produces value b"rec-<n>" round-robin with acks=all; once `acked_target` records are
    acknowledged it calls `on_target()` (the fault) while more records are still in flight,
    sends `extra_after_target` more, then waits (bounded) for every delivery outcome. `conf`
    overrides the producer's settings (short timeouts, made for a fault, by default)."""
    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 1,
        "enable.idempotence": False,
        "message.timeout.ms": 8000,
        "socket.timeout.ms": 3000,
        "reconnect.backoff.max.ms": 500,
        "queue.buffering.max.messages": 20000,
        **(conf or {}),
    })

    def on_delivery(err, msg):
        if err is None:
            log.acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            log.failed += 1

    n = 0
    fired = False
    extra = 0
    deadline = time.monotonic() + deadline_s
    while extra < extra_after_target:
        assert time.monotonic() < deadline, f"only {len(log.acked)} acks before the deadline"
        value = f"rec-{n:08d}".encode()
        try:
            p.produce(topic, value=value, partition=n % partitions, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.05)
            continue
        log.sent.add(value)
        n += 1
        if fired:
            extra += 1
        p.poll(0)
        if not fired and len(log.acked) >= acked_target:
            on_target()
            fired = True
    p.flush(30)
    assert len(p) == 0, f"{len(p)} records with no delivery outcome"


def assert_acked_survived(bootstrap: str, topic: str, partitions: int, log: AckLog) -> dict[int, list]:
    """Every acked record is at its acked offset; every partition reads contiguously from 0;
    nothing that was never sent appears. Returns the consumed records."""
    at_least = {}
    for (p, off) in log.acked:
        at_least[p] = max(at_least.get(p, 0), off + 1)
    # Read to the high watermark: a watermark below an acked offset is itself the failure.
    consumed = read_all(bootstrap, topic, partitions, at_least=at_least if SKIP_HW_CHECK else None)
    for p in range(partitions):
        msgs = consumed[p]
        assert [m.offset() for m in msgs] == list(range(len(msgs))), f"partition {p}: offsets not contiguous"
        assert SKIP_HW_CHECK or consumed.highs[p] >= at_least.get(p, 0), (
            f"partition {p}: high watermark {consumed.highs[p]} below acked end {at_least.get(p, 0)}")
        for m in msgs:
            assert m.value() in log.sent, f"partition {p} offset {m.offset()}: never-sent value {m.value()!r:.80}"
    for (p, off), value in sorted(log.acked.items()):
        got = consumed[p][off].value() if off < len(consumed[p]) else None
        assert got == value, f"acked record {value!r} at partition {p} offset {off} lost (found {got!r})"
    return consumed


def produce_after_restart(bootstrap: str, topic: str, partitions: int, consumed: dict[int, list]) -> None:
    """New records after recovery land at the next offset of each partition (no gap, no overlap)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
    got = {}
    for part in range(partitions):
        p.produce(topic, value=b"after-restart", partition=part,
                  on_delivery=lambda err, msg: got.__setitem__(msg.partition(), (err, msg.offset())))
    assert p.flush(60) == 0
    for part in range(partitions):
        err, off = got[part]
        assert err is None, f"partition {part}: produce after restart failed: {err}"
        assert off == len(consumed[part]), f"partition {part}: new record at {off}, log ended at {len(consumed[part])}"
