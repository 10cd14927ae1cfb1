"""Connections and request memory are bounded as Kafka bounds them: a claimed frame size is not
allocated up front, a shard's request bytes are capped (`queued_max_request_bytes`) with the
sender waiting, stalled requests and idle connections are closed, connections past
`max_connections_per_ip` are refused cleanly, and a Fetch never carries more than
`fetch_max_bytes` whatever it asks."""

from __future__ import annotations

import socket
import struct
import time

import pytest

import kproto
from common import create_topic

MIB = 1024 * 1024
# Generous waits for things that must happen eventually; nothing is asserted about speed.
EVENTUALLY_S = 30.0


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def closed_by_broker(sock: socket.socket, within_s: float = EVENTUALLY_S) -> bool:
    """True once the broker closes `sock` (EOF or reset), False if it is still open after `within_s`."""
    sock.settimeout(within_s)
    try:
        return sock.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def answers(sock: socket.socket, timeout_s: float = EVENTUALLY_S) -> bool:
    """Sends ApiVersions v0 on `sock`; True if it is answered."""
    sock.settimeout(timeout_s)
    try:
        sock.sendall(kproto.request(kproto.API_API_VERSIONS, 0, 5, b""))
        corr, _ = kproto.recv_response(sock)
        return corr == 5
    except (OSError, kproto.ProtocolError):
        return False


def test_claimed_size_is_not_allocated_up_front(broker):
    """Twenty connections each claim a 100 MiB request and send 100 bytes of it: the broker's
    memory does not grow by the 2 GB claimed (it grows as bytes arrive), and it keeps serving."""
    pid = broker.proc.pid
    before = rss_bytes(pid)
    socks = []
    try:
        for _ in range(20):
            s = kproto.connect(broker.bootstrap)
            s.sendall(struct.pack(">i", 100 * MIB) + b"\x00" * 100)
            socks.append(s)
        time.sleep(2.0)
        grown = rss_bytes(pid) - before
        assert grown < 256 * MIB, f"RSS grew by {grown / MIB:.0f} MiB for 2 KB of requests"
        with kproto.connect(broker.bootstrap) as other:
            assert answers(other)
    finally:
        for s in socks:
            s.close()


def test_stalled_request_and_idle_connection_are_closed(broker_factory, monkeypatch):
    """With request_timeout_ms=1000 a request left incomplete closes its connection, and with
    connections_max_idle_ms=3000 a connection that did its work and went quiet is closed; a
    connection that keeps asking stays open past both."""
    monkeypatch.setenv("STRATA_REQUEST_TIMEOUT_MS", "1000")
    monkeypatch.setenv("STRATA_CONNECTIONS_MAX_IDLE_MS", "3000")
    broker = broker_factory()
    with kproto.connect(broker.bootstrap) as stalled, kproto.connect(broker.bootstrap) as idle, \
            kproto.connect(broker.bootstrap) as busy:
        stalled.sendall(struct.pack(">i", 1000) + b"\x00" * 10)
        assert answers(idle)
        assert closed_by_broker(stalled), "a stalled request must close its connection"
        # `busy` asks every half second for longer than both timeouts.
        for _ in range(10):
            assert answers(busy), "an active connection must not be closed"
            time.sleep(0.5)
        assert closed_by_broker(idle), "an idle connection must be closed"


def test_connections_past_per_ip_limit_are_refused_cleanly(broker_factory, monkeypatch):
    """With max_connections_per_ip=5, five connections are served, a sixth is closed at once
    (not left hanging), and closing one makes room for another."""
    monkeypatch.setenv("STRATA_MAX_CONNECTIONS_PER_IP", "5")
    broker = broker_factory()
    # The readiness probe's connection holds a place until the broker has seen it close:
    # take the five places again until all five are served.
    deadline = time.monotonic() + EVENTUALLY_S
    while True:
        held = [kproto.connect(broker.bootstrap) for _ in range(5)]
        if all(answers(s, timeout_s=5.0) for s in held):
            break
        for s in held:
            s.close()
        assert time.monotonic() < deadline, "five connections were never served together"
        time.sleep(0.2)
    try:
        with kproto.connect(broker.bootstrap) as extra:
            assert closed_by_broker(extra, within_s=10.0), "the sixth connection must be closed"
        held.pop().close()
        deadline = time.monotonic() + EVENTUALLY_S
        while True:
            with kproto.connect(broker.bootstrap) as again:
                if answers(again, timeout_s=2.0):
                    break
            assert time.monotonic() < deadline, "a freed place must admit a new connection"
            time.sleep(0.2)
    finally:
        for s in held:
            s.close()


def test_request_budget_makes_senders_wait(broker_factory, monkeypatch):
    """On one shard with queued_max_request_bytes = socket_request_max_bytes = 1 MiB, a client
    holding almost 1 MiB of an unfinished request makes a second client's small request wait
    (it is not read) until the first one goes away; then it is answered."""
    monkeypatch.setenv("STRATA_SOCKET_REQUEST_MAX_BYTES", str(MIB))
    monkeypatch.setenv("STRATA_QUEUED_MAX_REQUEST_BYTES", str(MIB))
    broker = broker_factory(shards=1)
    hog = kproto.connect(broker.bootstrap)
    try:
        hog.sendall(struct.pack(">i", MIB) + b"\x00" * (MIB - 100))
        time.sleep(1.0)
        with kproto.connect(broker.bootstrap) as small:
            small.settimeout(2.0)
            small.sendall(kproto.request(kproto.API_API_VERSIONS, 0, 9, b""))
            with pytest.raises(socket.timeout):
                small.recv(1)
            hog.close()
            small.settimeout(EVENTUALLY_S)
            corr, _ = kproto.recv_response(small)
            assert corr == 9
    finally:
        hog.close()


def test_fetch_is_clamped_to_fetch_max_bytes_before_reading(broker_factory, monkeypatch):
    """With fetch_max_bytes=256 KiB, a Fetch asking 2 GB (response and partition) from a 2 MiB
    partition gets at most 256 KiB plus one batch, and a min_bytes of 2 GB does not make it
    wait for data that could never fit."""
    monkeypatch.setenv("STRATA_FETCH_MAX_BYTES", str(256 * 1024))
    broker = broker_factory()
    create_topic(broker.bootstrap, "big", partitions=1)
    batch = kproto.record_batch([(None, b"x" * 4096) for _ in range(16)])
    for _ in range(32):
        for _, _, err, _ in kproto.produce_raw(broker.bootstrap, "big", 0, batch):
            assert err == 0
    two_gb = 2**31 - 1
    with kproto.connect(broker.bootstrap, timeout_s=EVENTUALLY_S) as sock:
        sock.sendall(kproto.request(kproto.API_FETCH, 4, 3, kproto.fetch_v4_body(
            "big", 0, 0, max_bytes=two_gb, partition_max_bytes=two_gb, max_wait_ms=500, min_bytes=two_gb)))
        corr, body = kproto.recv_response(sock)
    assert corr == 3
    [(_, _, err, hw, records)] = kproto.parse_fetch_v4(body)
    assert err == 0 and hw == 32 * 16
    assert 0 < len(records) <= 256 * 1024 + len(batch), len(records)
