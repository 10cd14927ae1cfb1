"""Kafka's `listeners`: several listeners on one broker, each answering Metadata with the
brokers' addresses on that listener (`advertised_listeners`), as Kafka does."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from harness import free_port

pytestmark = pytest.mark.skipif(
    __import__("harness").broker_kind() != "strata", reason="strata's listener flags")


def metadata_brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    md = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"}).list_topics(timeout=10)
    return sorted((b.id, b.host, b.port) for b in md.brokers.values())


def test_two_plaintext_listeners_each_advertised(broker_factory):
    """Proves two plaintext listeners (PLAINTEXT and a named INTERNAL one, mapped to PLAINTEXT)
    both serve clients, and each answers Metadata with its own advertised address: the
    INTERNAL listener is advertised as `localhost`, the PLAINTEXT one as 127.0.0.1. A record
    produced through one is consumed through the other; kcat sees the same addresses."""
    outer, inner = free_port(), free_port()
    b = broker_factory(port=outer, extra_args=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{outer},INTERNAL://127.0.0.1:{inner}",
        "--listener-security-protocol-map", "INTERNAL:PLAINTEXT",
        "--advertised-listeners", f"PLAINTEXT://127.0.0.1:{outer},INTERNAL://localhost:{inner}",
    ])
    outer_bs, inner_bs = f"127.0.0.1:{outer}", f"127.0.0.1:{inner}"
    assert metadata_brokers(outer_bs) == [(0, "127.0.0.1", outer)]
    assert metadata_brokers(inner_bs) == [(0, "localhost", inner)]

    topic = "two-listeners"
    p = Producer({"bootstrap.servers": outer_bs, "acks": "all", "broker.address.family": "v4"})
    for i in range(10):
        p.produce(topic, key=str(i).encode(), value=f"via-outer-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": inner_bs, "group.id": "g-listeners",
                  "auto.offset.reset": "earliest", "broker.address.family": "v4"})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    while len(got) < 10:
        m = c.poll(10)
        assert m is not None, f"consumed only {got}"
        assert m.error() is None, m.error()
        got.append(m.value().decode())
    c.close()
    assert got == [f"via-outer-{i}" for i in range(10)]

    if shutil.which("kcat"):
        for bootstrap, host, port in [(outer_bs, "127.0.0.1", outer), (inner_bs, "localhost", inner)]:
            out = subprocess.run(["kcat", "-L", "-J", "-b", bootstrap, "-X", "broker.address.family=v4"],
                                 capture_output=True, timeout=30, check=True).stdout
            brokers = json.loads(out)["brokers"]
            assert [x["name"] for x in brokers] == [f"{host}:{port}"], brokers


def test_bad_listeners_refused_at_start(tmp_path):
    """Proves a listener with no security protocol stops the broker at start with the setting
    named, instead of serving with a listener missing."""
    from harness import strata_bin
    port = free_port()
    r = subprocess.run([str(strata_bin()), "serve", "--data-dir", str(tmp_path / "d"),
                        "--listeners", f"CLIENT://127.0.0.1:{port}"],
                       capture_output=True, timeout=30)
    assert r.returncode != 0
    assert b"listeners" in r.stderr and b"CLIENT" in r.stderr, r.stderr
