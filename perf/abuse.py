#!/usr/bin/env python3
"""Abuse harness (issue 10): is the broker's memory bounded, and is a well-behaved client
unharmed, while others misbehave?

While a good client produces (acks=all) and consumes one record per second, this runs:
- slowloris connections that each claim a 100 MiB request (the 4-byte size) and then trickle
  one byte per second; one the broker closes (request_timeout_ms) is reopened at once;
- idle connections that connect and say nothing;
- fetchers asking for 2 GB (response and partition max_bytes) from a partition filled with
  `--fill-mb` MB, pipelined `--fetch-depth` deep, reading every response.
It reports the broker's RSS at rest (before the abuse) and its peak during it (sampled, and
the kernel's VmHWM after resetting it), the good client's failures, and whether the broker
still answers afterwards. By default it starts its own broker (release binary, defaults,
2 shards); `run()` is also used by tests/clients/test_abuse.py with smaller numbers.

    perf/abuse.py                      # 200 slowloris, 2,000 idle, 4 fetchers x 2 deep, 200 MB
    perf/abuse.py --duration 120 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "clients"))

import kproto  # noqa: E402

MIB = 1024 * 1024
TWO_GB = 2**31 - 1


def raise_open_files_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssSampler:
    """Samples VmRSS every 100 ms; `peak` is the highest sample or VmHWM since `reset`."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_kib = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def reset(self):
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS
        except OSError:
            pass
        self.peak_kib = status_kib(self.pid, "VmRSS")

    def loop(self):
        while not self.stop.is_set():
            try:
                self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmRSS"))
            except OSError:
                return
            time.sleep(0.1)

    def start(self):
        self.reset()
        self.thread.start()

    def finish(self) -> int:
        self.stop.set()
        self.thread.join()
        try:
            self.peak_kib = max(self.peak_kib, status_kib(self.pid, "VmHWM"))
        except OSError:
            pass
        return self.peak_kib


class GoodClient:
    """Produces one record per second (acks=all) and consumes them; counts every failure."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer, Producer

        self.bootstrap, self.topic = bootstrap, topic
        self.failures: list[str] = []
        self.acked: list[bytes] = []
        self.read: list[bytes] = []
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "message.timeout.ms": 60000, "linger.ms": 0})
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "abuse-good",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.threads = [threading.Thread(target=self.produce, daemon=True),
                        threading.Thread(target=self.consume, daemon=True)]

    def on_delivery(self, err, msg):
        if err is not None:
            self.failures.append(f"produce: {err}")
        else:
            self.acked.append(msg.value())

    def produce(self):
        n = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, value=f"good-{n}".encode(), partition=0,
                                  on_delivery=self.on_delivery)
            n += 1
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                self.producer.poll(0.1)
        if self.producer.flush(60) != 0:
            self.failures.append("produce: records left undelivered")

    def consume(self):
        from confluent_kafka import KafkaError, TopicPartition

        self.consumer.assign([TopicPartition(self.topic, 0, 0)])
        while not (self.stop.is_set() and len(self.read) >= len(self.acked)
                   and not self.threads[0].is_alive()):
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    self.failures.append(f"consume: {msg.error()}")
                continue
            self.read.append(msg.value())
            if self.stop.is_set() and time.monotonic() > self.give_up:
                break
        self.consumer.close()

    def start(self):
        self.give_up = float("inf")
        for t in self.threads:
            t.start()

    def finish(self, timeout_s: float = 90.0) -> list[str]:
        self.give_up = time.monotonic() + timeout_s
        self.stop.set()
        for t in self.threads:
            t.join(timeout_s)
        if self.read != self.acked:
            self.failures.append(
                f"consume: read {len(self.read)} records, acked {len(self.acked)}, "
                f"in order: {self.read == self.acked[:len(self.read)]}")
        return self.failures


class Slowloris:
    """`n` connections, each claiming a 100 MiB request and sending one more byte a second."""

    def __init__(self, host: str, port: int, n: int):
        self.addr, self.n = (host, port), n
        self.socks: list[socket.socket | None] = [None] * n
        self.closed_by_broker = 0
        self.connect_failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(self.addr, timeout=5)
            s.sendall(struct.pack(">i", 100 * MIB))
            s.setblocking(False)
            return s
        except OSError:
            self.connect_failures += 1
            return None

    def loop(self):
        while not self.stop.is_set():
            for i in range(self.n):
                s = self.socks[i]
                if s is None:
                    self.socks[i] = self.open()
                    continue
                # Peek for the broker's close, then trickle one more byte; either failing
                # means the broker closed this connection, which is replaced.
                try:
                    try:
                        if s.recv(1, socket.MSG_PEEK) == b"":
                            raise ConnectionResetError
                    except BlockingIOError:
                        pass
                    try:
                        s.send(b"\x00")
                    except BlockingIOError:
                        pass
                except OSError:
                    self.closed_by_broker += 1
                    s.close()
                    self.socks[i] = self.open()
            self.stop.wait(1.0)
        for s in self.socks:
            if s is not None:
                s.close()


class Idle:
    """`n` connections that never send anything."""

    def __init__(self, host: str, port: int, n: int):
        self.socks = []
        self.connect_failures = 0
        for _ in range(n):
            try:
                self.socks.append(socket.create_connection((host, port), timeout=5))
            except OSError:
                self.connect_failures += 1

    def still_open(self) -> int:
        n = 0
        for s in self.socks:
            s.setblocking(False)
            try:
                if s.recv(1, socket.MSG_PEEK) != b"":
                    n += 1
            except BlockingIOError:
                n += 1
            except OSError:
                pass
        return n

    def close(self):
        for s in self.socks:
            s.close()


class BigFetchers:
    """`n` connections each keeping `depth` Fetches of 2 GB in flight on `topic`-0."""

    def __init__(self, bootstrap: str, topic: str, n: int, depth: int, log_end: int):
        self.bootstrap, self.topic, self.depth, self.log_end = bootstrap, topic, depth, log_end
        self.responses = 0
        self.bytes = 0
        self.largest = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.loop, daemon=True) for _ in range(n)]

    def request(self, corr: int) -> bytes:
        offset = random.randrange(0, max(self.log_end, 1))
        return kproto.request(kproto.API_FETCH, 4, corr, kproto.fetch_v4_body(
            self.topic, 0, offset, max_bytes=TWO_GB, partition_max_bytes=TWO_GB, max_wait_ms=500))

    def loop(self):
        try:
            with kproto.connect(self.bootstrap, timeout_s=60) as sock:
                corr = 0
                for _ in range(self.depth):
                    corr += 1
                    sock.sendall(self.request(corr))
                while not self.stop.is_set():
                    _, body = kproto.recv_response(sock)
                    size = sum(len(r[4]) for r in kproto.parse_fetch_v4(body))
                    self.responses += 1
                    self.bytes += size
                    self.largest = max(self.largest, size)
                    corr += 1
                    sock.sendall(self.request(corr))
        except (OSError, kproto.ProtocolError) as e:
            if not self.stop.is_set():
                self.errors.append(repr(e))

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)


def fill(bootstrap: str, topic: str, megabytes: int) -> int:
    """Writes `megabytes` MB of 100 KB records to `topic`-0; returns the records written."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                  "batch.size": 1_000_000, "message.max.bytes": 1_000_000})
    value = os.urandom(100_000)
    n = megabytes * 10
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(120)
    assert left == 0, f"{left} fill records undelivered"
    return n


def create_topics(bootstrap: str, topics: list[str]):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(30)


def run(bootstrap: str, pid: int, slowloris: int = 200, idle: int = 2000, fetchers: int = 4,
        fetch_depth: int = 2, fill_mb: int = 200, duration_s: float = 60.0, log=print) -> dict:
    host, port = bootstrap.rsplit(":", 1)
    port = int(port)
    create_topics(bootstrap, ["abuse-big", "abuse-good"])
    t0 = time.monotonic()
    records = fill(bootstrap, "abuse-big", fill_mb)
    log(f"filled abuse-big with {fill_mb} MB ({records} records) in {time.monotonic() - t0:.0f}s")
    good = GoodClient(bootstrap, "abuse-good")
    good.start()
    time.sleep(5)
    rest_kib = status_kib(pid, "VmRSS")
    log(f"rest RSS {rest_kib / 1024:.0f} MiB")
    sampler = RssSampler(pid)
    sampler.start()
    idlers = Idle(host, port, idle)
    log(f"{len(idlers.socks)} idle connections open ({idlers.connect_failures} failed)")
    loris = Slowloris(host, port, slowloris)
    loris.thread.start()
    big = BigFetchers(bootstrap, "abuse-big", fetchers, fetch_depth, records)
    big.start()
    time.sleep(duration_s)
    big.finish()
    loris.stop.set()
    loris.thread.join()
    idle_open = idlers.still_open()
    peak_kib = sampler.finish()
    idlers.close()
    time.sleep(3)
    failures = good.finish()
    alive = True
    try:
        kproto.api_versions(bootstrap, timeout_s=10)
    except (OSError, kproto.ProtocolError):
        alive = False
    result = {
        "rest_rss_mib": round(rest_kib / 1024),
        "peak_rss_mib": round(peak_kib / 1024),
        "peak_above_rest_mib": round((peak_kib - rest_kib) / 1024),
        "good_records_acked": len(good.acked),
        "good_records_read": len(good.read),
        "good_failures": failures,
        "slowloris_closed_by_broker": loris.closed_by_broker,
        "slowloris_connect_failures": loris.connect_failures,
        "idle_opened": len(idlers.socks),
        "idle_still_open_at_end": idle_open,
        "fetch_responses": big.responses,
        "fetch_largest_response_bytes": big.largest,
        "fetch_errors": big.errors,
        "broker_alive": alive and os.path.exists(f"/proc/{pid}"),
        "duration_s": duration_s,
        "params": {"slowloris": slowloris, "idle": idle, "fetchers": fetchers,
                   "fetch_depth": fetch_depth, "fill_mb": fill_mb},
    }
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "strata"))
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--slowloris", type=int, default=200)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--fetchers", type=int, default=4)
    ap.add_argument("--fetch-depth", type=int, default=2)
    ap.add_argument("--fill-mb", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    print(f"open-files limit {raise_open_files_limit()}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="strata-abuse-") as tmp:
        log_path = Path(tmp) / "broker.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [args.bin, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", f"{tmp}/data",
                 "--shards", str(args.shards)], stdout=log, stderr=subprocess.STDOUT)
        try:
            bootstrap = f"127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    kproto.api_versions(bootstrap, timeout_s=2)
                    break
                except (OSError, kproto.ProtocolError):
                    assert time.monotonic() < deadline, log_path.read_text()[-2000:]
                    time.sleep(0.1)
            result = run(bootstrap, proc.pid, args.slowloris, args.idle, args.fetchers,
                         args.fetch_depth, args.fill_mb, args.duration)
            result["broker_alive"] = result["broker_alive"] and proc.poll() is None
        finally:
            proc.terminate()
            proc.wait(30)
        warnings = [line for line in log_path.read_text(errors="replace").splitlines()
                    if " WARN " in line or " ERROR " in line]
        result["broker_warnings"] = warnings[:20]
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
