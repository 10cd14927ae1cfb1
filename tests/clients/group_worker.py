"""A group consumer run as a subprocess by test_groups.py (so a test can kill -9 it).

Usage: group_worker.py LIB BOOTSTRAP TOPIC GROUP OUT_FILE [--instance ID] [--strategy S]
                       [--session-ms N]

LIB is kafka-python or confluent. Every record is processed by appending one line
`R <partition> <offset>` to OUT_FILE (flushed), and the consumer commits synchronously after
each poll's records: a record is committed only after it was written, so a kill -9 can cause
duplicates of uncommitted work but never a gap. Assignment changes are logged as
`A <p,p,...>` (full assignment after the change) with `+`/`-` events for incremental ones.
Runs until SIGTERM, then closes the consumer (leaving the group unless static).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

stop = False


def on_term(*_):
    global stop
    stop = True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("group")
    ap.add_argument("out")
    ap.add_argument("--instance")
    ap.add_argument("--strategy")
    ap.add_argument("--session-ms", type=int, default=6000)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    out = open(args.out, "a", buffering=1)

    def log(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    if args.lib == "kafka-python":
        return run_kafka_python(args, log)
    return run_confluent(args, log)


def run_kafka_python(args, log) -> int:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=max(args.session_ms // 6, 200),
        max_poll_records=20,
        request_timeout_ms=30000,
        reconnect_backoff_max_ms=500,
    )
    assigned: set[int] = set()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            for tp in revoked:
                assigned.discard(tp.partition)
            log("A " + ",".join(str(p) for p in sorted(assigned)))

        def on_partitions_assigned(self, new):
            for tp in new:
                assigned.add(tp.partition)
            log("A " + ",".join(str(p) for p in sorted(assigned)))

    consumer.subscribe([args.topic], listener=Listener())
    log("READY")
    while not stop:
        try:
            batches = consumer.poll(timeout_ms=200)
        except KafkaError as e:
            # kafka-python 3 raises a retriable error (the coordinator's connection refused
            # while the broker restarts) out of poll(), where the Java client retries inside
            # it: an application polls again, and so does this one.
            if not e.retriable:
                raise
            log(f"E poll {type(e).__name__}")
            time.sleep(0.2)
            continue
        if not batches:
            continue
        offsets = {}
        for tp, records in batches.items():
            for r in records:
                log(f"R {tp.partition} {r.offset}")
                offsets[tp] = OffsetAndMetadata(r.offset + 1, "", -1)
        try:
            consumer.commit(offsets)
        except Exception as e:  # a rebalance or broker restart: the work is redone later
            log(f"E commit {type(e).__name__}")
    consumer.close()
    return 0


def run_confluent(args, log) -> int:
    from confluent_kafka import Consumer, KafkaException

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_ms,
        "heartbeat.interval.ms": max(args.session_ms // 6, 200),
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if args.instance:
        conf["group.instance.id"] = args.instance
    if args.strategy:
        conf["partition.assignment.strategy"] = args.strategy
    consumer = Consumer(conf)
    assigned: set[int] = set()

    def on_assign(c, parts):
        for p in parts:
            assigned.add(p.partition)
        log("+ " + ",".join(str(p.partition) for p in parts))
        log("A " + ",".join(str(p) for p in sorted(assigned)))

    def on_revoke(c, parts):
        for p in parts:
            assigned.discard(p.partition)
        log("- " + ",".join(str(p.partition) for p in parts))
        log("A " + ",".join(str(p) for p in sorted(assigned)))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    log("READY")
    while not stop:
        msgs = consumer.consume(num_messages=50, timeout=0.2)
        good = [m for m in msgs if m.error() is None]
        for m in good:
            log(f"R {m.partition()} {m.offset()}")
        if good:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as e:
                log(f"E commit {e}")
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
