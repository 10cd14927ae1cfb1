"""Hostile bytes on raw sockets must not hurt the broker or any other connection."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

import kproto
from common import create_topic, read_all

OBSERVE_S = 2.0


def send_and_observe(bootstrap: str, payload: bytes, half_close: bool = False) -> tuple[str, bytes]:
    """Sends raw bytes on a fresh connection; returns ("closed"|"silent"|"data", bytes read)."""
    with kproto.connect(bootstrap) as sock:
        sock.settimeout(OBSERVE_S)
        try:
            sock.sendall(payload)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            data = sock.recv(65536)
        except socket.timeout:
            return "silent", b""
        except (ConnectionResetError, BrokenPipeError):
            return "closed", b""
        return ("data", data) if data else ("closed", b"")


def one_response(bootstrap: str, frame: bytes) -> tuple[int, bytes] | None:
    """Sends one frame; returns (correlation id, body), or None if the broker closed the connection."""
    with kproto.connect(bootstrap) as sock:
        sock.sendall(frame)
        try:
            return kproto.recv_response(sock)
        except (kproto.ProtocolError, ConnectionResetError):
            return None


class SteadyClient:
    """A well-behaved producer and group-less consumer running beside the abuse; every record
    must be acked and read back in order with no error."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.errors: list[str] = []
        self.acked = 0
        self.read: list[bytes] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.produce), threading.Thread(target=self.consume)]

    def produce(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "message.timeout.ms": 20000})
        n = 0
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            p.produce(self.topic, value=f"steady-{n}".encode(), partition=0, on_delivery=self.on_delivery)
            n += 1
            p.poll(0.01)
        if p.flush(30) != 0:
            self.errors.append("producer: records left undelivered")

    def on_delivery(self, err, msg):
        if err is not None:
            self.errors.append(f"produce: {err}")
        else:
            self.acked += 1

    def consume(self):
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused", "enable.auto.commit": False})
        c.assign([TopicPartition(self.topic, 0, 0)])
        deadline = time.monotonic() + 300
        # Keep reading until stopped and caught up with everything acked (bounded).
        while time.monotonic() < deadline and not (self.stop.is_set() and len(self.read) >= self.acked
                                                   and not self.threads[0].is_alive()):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                self.errors.append(f"consume: {m.error()}")
                continue
            self.read.append(m.value())
        c.close()

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in self.threads), "steady client threads did not finish"


def metadata_v1_with_topic_count(count: int) -> bytes:
    return kproto.request(kproto.API_METADATA, 1, 5, struct.pack(">i", count))


def test_garbage_never_hurts_the_broker_or_other_clients(broker):
    """Proves bad input (random bytes, truncated frames, absurd and negative sizes, unknown APIs,
    unsupported versions, huge array counts, a bad CRC) gets an error or a closed connection, is
    never stored, and leaves a concurrent well-behaved client and the broker
    itself unharmed."""
    create_topic(broker.bootstrap, "steady", 1)
    create_topic(broker.bootstrap, "bad-crc", 1)  # target of the malformed Produce requests
    steady = SteadyClient(broker.bootstrap, "steady")
    steady.start()
    rng = random.Random(1234)
    cases: list[tuple[str, bytes, bool]] = []
    for i in range(8):
        cases.append((f"random bytes #{i}", rng.randbytes(rng.choice([1, 7, 64, 4096, 65536])), False))
    cases += [
        ("random bytes behind a plausible size", struct.pack(">i", 200) + rng.randbytes(200), False),
        ("truncated frame then EOF", struct.pack(">i", 100) + b"\x00\x12\x00\x00", True),
        ("size prefix 0x7fffffff", struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16, False),
        ("negative size -1", struct.pack(">i", -1) + b"\x00" * 16, False),
        ("negative size min", struct.pack(">i", -(2**31)) + b"\x00" * 16, False),
        ("zero size", struct.pack(">i", 0), False),
        ("header only, truncated client id", struct.pack(">ihhih", 10, 3, 1, 1, 0x7FFF), False),
        ("unknown api key 9999", kproto.request(9999, 0, 1, b""), False),
        ("unknown api key -1", kproto.request(-1, 0, 1, b""), False),
        ("Metadata v999", kproto.request(kproto.API_METADATA, 999, 1, b""), False),
        ("Metadata topics count 2^31-1", metadata_v1_with_topic_count(0x7FFFFFFF), False),
        ("Metadata topics count -2", metadata_v1_with_topic_count(-2), False),
        ("Produce partitions count 2^31-1",
         kproto.request(kproto.API_PRODUCE, 3, 1, kproto.kstring(None) + struct.pack(">hii", -1, 1000, 1)
                        + kproto.kstring("bad-crc") + struct.pack(">i", 0x7FFFFFFF)), False),
        ("Produce records length beyond frame",
         kproto.request(kproto.API_PRODUCE, 3, 1, kproto.kstring(None) + struct.pack(">hii", -1, 1000, 1)
                        + kproto.kstring("bad-crc") + struct.pack(">iii", 1, 0, 0x7FFFFFF0) + b"\x00" * 8), False),
        ("Produce with a bad CRC",
         kproto.request(kproto.API_PRODUCE, 3, 1, kproto.produce_v3_body(
             "bad-crc", 0, kproto.record_batch([(b"k", b"evil")], corrupt_crc=True))), False),
        ("Produce v99", kproto.request(kproto.API_PRODUCE, 99, 1, b""), False),
        ("ApiVersions v999", kproto.request(kproto.API_API_VERSIONS, 999, 1, b""), False),
        ("many frames pipelined", b"".join(kproto.request(18, 0, i, b"") for i in range(500)), False),
    ]
    try:
        for name, payload, half_close in cases:
            # Any reaction is allowed on the abused connection (error, close, silence) ...
            send_and_observe(broker.bootstrap, payload, half_close)
            # ... but the process lives and still serves new connections.
            assert broker.alive(), f"broker died after {name}:\n{broker.log_tail()}"
            kproto.api_versions(broker.bootstrap)

        # A connection that first behaves (and is answered) and then sends garbage.
        with kproto.connect(broker.bootstrap) as sock:
            sock.sendall(kproto.request(18, 0, 77, b""))
            corr, _ = kproto.recv_response(sock)
            assert corr == 77
            try:
                sock.sendall(os.urandom(1024))
            except (ConnectionResetError, BrokenPipeError):
                pass
    finally:
        steady.finish()

    assert broker.alive(), f"broker died:\n{broker.log_tail()}"
    assert kproto.api_versions(broker.bootstrap)
    # Every Produce aimed at "bad-crc" above was malformed or corrupt: none may be stored.
    assert read_all(broker.bootstrap, "bad-crc", 1).highs[0] == 0, "malformed input was written to the log"
    assert not steady.errors, steady.errors[:10]
    assert steady.acked > 0
    assert steady.read == [f"steady-{i}".encode() for i in range(steady.acked)], \
        f"steady consumer read {len(steady.read)} of {steady.acked}, or out of order"


def test_api_versions_unsupported_version_answers_error_35(broker):
    """Proves an ApiVersions request at a version the broker does not know gets Kafka's
    UNSUPPORTED_VERSION (35) in a v0 body, which clients use to downgrade, not a closed socket."""
    resp = one_response(broker.bootstrap, kproto.request(kproto.API_API_VERSIONS, 999, 42, b""))
    assert resp is not None, "ApiVersions v999: connection closed instead of UNSUPPORTED_VERSION"
    corr, body = resp
    assert corr == 42
    assert struct.unpack(">h", body[:2])[0] == kproto.ERR_UNSUPPORTED_VERSION


def test_bad_crc_produce_is_rejected_and_not_stored(broker):
    """Proves a Produce whose batch CRC-32C is wrong gets CORRUPT_MESSAGE (2) and is never
    written: valid batches sent before and after it get offsets 0 and 1 and are all that is read."""
    create_topic(broker.bootstrap, "bad-crc", 1)
    good = kproto.produce_raw(broker.bootstrap, "bad-crc", 0, kproto.record_batch([(b"k", b"good-0")]))
    assert good == [("bad-crc", 0, 0, 0)], good
    bad = kproto.produce_raw(broker.bootstrap, "bad-crc", 0,
                             kproto.record_batch([(b"k", b"evil")], corrupt_crc=True))
    assert [(t, p, err) for t, p, err, _ in bad] == [("bad-crc", 0, kproto.ERR_CORRUPT_MESSAGE)], bad
    good = kproto.produce_raw(broker.bootstrap, "bad-crc", 0, kproto.record_batch([(b"k", b"good-1")]))
    assert good == [("bad-crc", 0, 0, 1)], good
    stored = read_all(broker.bootstrap, "bad-crc", 1)
    assert [m.value() for m in stored[0]] == [b"good-0", b"good-1"]
    assert stored.highs[0] == 2
