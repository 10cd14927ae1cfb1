"""Self-tests of the harness, workload and checker against today's single-node broker (no
controller flags): the plumbing the cluster tests rely on works end to end on a real broker.

They use RF=1, STRATA_CLUSTER_REPLICA_READ=fetch semantics for the replica comparison (one
replica, read with the debugging Fetch) unless `strata log dump` exists."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

import checker
from checker import Workload
from harness import strata_bin
from verify import verify_cluster

pytestmark = pytest.mark.selftest


def log_dump_exists() -> bool:
    return subprocess.run([str(strata_bin()), "log", "dump", "--help"], capture_output=True).returncode == 0


@pytest.fixture(autouse=True)
def replica_read(monkeypatch):
    if not log_dump_exists():
        monkeypatch.setenv("STRATA_CLUSTER_REPLICA_READ", "fetch")


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_workload_and_checker_on_one_broker(cluster_factory, idempotent, request):
    """Proves the workload/checker path on a real broker: producers and the observer run for a
    few seconds against one strata serve, a kill -9 + restart happens midway, and the checker
    passes with every acked record found at its offset and the replica read agreeing."""
    c = cluster_factory(size=1, controller=False, start=False)
    c.start(wait_registered=False)
    topic = "selftest"
    c.create_topic(topic, 3, replication_factor=1, full_isr=False)
    w = Workload(c.bootstrap, topic, 3, idempotent=idempotent, rate_per_producer=100).start()
    w.wait_acked(100)
    c.kill9(1)
    c.restart(1, wait_registered=False)
    acked = w.acked()
    w.wait_acked(acked + 100)
    history = w.stop()
    s = verify_cluster(c, history, topic, 3, request.node.nodeid, selftest=True)
    assert s["ops_ok"] > 200 and s["records_checked"] >= s["ops_ok"]
    assert s["replica_records_checked"] == s["records_checked"]


def test_single_broker_in_a_namespace_isolate_and_heal(cluster_factory):
    """Proves the netns path with the real binary: a broker started inside a namespace is
    reachable from the root namespace at 10.77.0.11, unreachable while isolated, reachable
    again after heal, and still serves the records produced before."""
    c = cluster_factory(size=1, network="netns", controller=False, start=False)
    c.start(wait_registered=False)
    node = c.nodes[1]
    assert node.host == "10.77.0.11"
    topic = "ns-selftest"
    c.create_topic(topic, 1, replication_factor=1, full_isr=False)
    w = Workload(c.bootstrap, topic, 1, idempotent=True, producers=1, rate_per_producer=200).start()
    w.wait_acked(50)
    history = w.stop()

    def reachable() -> bool:
        try:
            socket.create_connection((node.host, node.port), timeout=1).close()
            return True
        except OSError:
            return False

    assert reachable()
    c.isolate(1, allow_client=False)
    assert not reachable(), "isolated broker still reachable"
    c.heal(1)
    deadline = time.monotonic() + 5
    while not reachable():
        assert time.monotonic() < deadline, "healed broker unreachable"
        time.sleep(0.1)
    log, highs = checker.read_topic(c.bootstrap, topic, 1)
    r = checker.check_history(history, log, highs)
    assert r.ok, r.explain()


@pytest.mark.parametrize("fault", ["isolate", "sigstop"])
def test_workload_rides_out_a_stall_of_its_only_broker(cluster_factory, fault, request):
    """Proves the workload's retry path and the checker's outcome bookkeeping under a stall:
    the only broker (in a namespace) is cut off or paused for 5 s mid-run while both
    idempotent producers keep sending; after it returns, writes resume, and the checker passes
    (acked values at their offsets, no duplicates, order kept)."""
    c = cluster_factory(size=1, network="netns", controller=False, start=False)
    c.start(wait_registered=False)
    topic = f"stall-{fault}"
    c.create_topic(topic, 3, replication_factor=1, full_isr=False)
    w = Workload(c.bootstrap, topic, 3, idempotent=True, rate_per_producer=100).start()
    w.wait_acked(100)
    if fault == "isolate":
        c.isolate(1, allow_client=False)
        time.sleep(5)
        c.heal(1)
    else:
        c.pause(1)
        time.sleep(5)
        c.resume(1)
    acked = w.acked()
    w.wait_acked(acked + 200)
    history = w.stop()
    s = verify_cluster(c, history, topic, 3, request.node.nodeid, selftest=True)
    assert s["ops_ok"] > 300
