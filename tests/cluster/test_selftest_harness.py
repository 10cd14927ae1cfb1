"""Self-tests of harness.py's process control with today's binary: three nodes (no controller
flags, so three independent brokers) start, answer, pause, resume, die and restart as the
fault tests expect, on loopback and inside namespaces; and the cluster command line is the
contract the broker is being built to."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness import CLUSTER_ENV, Cluster, strata_bin

pytestmark = pytest.mark.selftest


def proc_state(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return "?"


def wait_state(pid: int, want: str, timeout_s: float = 5.0) -> str:
    """Signal delivery to a busy multi-threaded process takes a moment: poll."""
    deadline = time.monotonic() + timeout_s
    while (state := proc_state(pid)) != want and time.monotonic() < deadline:
        time.sleep(0.02)
    return state


def test_cluster_command_line_contract(tmp_path):
    """Node 2 of a loopback cluster is started with exactly the agreed flags and settings."""
    c = Cluster(tmp_path, size=3)
    n2 = c.nodes[2]
    cmd = n2.command(c.voters)
    assert cmd[:2] == [str(strata_bin()), "serve"]
    flags = dict(zip(cmd[2::2], cmd[3::2]))
    assert flags == {
        "--node-id": "2",
        "--listen": n2.address,
        "--advertised-listener": n2.address,
        "--data-dir": str(n2.data_dir),
        "--shards": "1",
        "--controller-listen": n2.controller_address,
        "--controller-voters": ",".join(f"{i}@127.0.0.1:{c.nodes[i].controller_port}" for i in (1, 2, 3)),
        "--process-roles": "broker,controller",
    }
    assert n2.env == CLUSTER_ENV
    assert len({n.port for n in c.nodes.values()} | {n.controller_port for n in c.nodes.values()}) == 6


@pytest.mark.parametrize("network", ["loopback", "netns"])
def test_three_nodes_lifecycle(cluster_factory, network):
    """Proves the process control the fault tests use: three nodes listen; SIGSTOP really stops
    the broker process (state T, even behind `ip netns exec`) and SIGCONT resumes it; kill -9
    ends it; restart reuses dirs and ports; SIGTERM stops each with exit code 0."""
    c = cluster_factory(size=3, network=network, controller=False, start=False)
    c.start(wait_registered=False)
    assert len({n.address for n in c.nodes.values()}) == 3
    if network == "netns":
        assert [n.host for n in c.nodes.values()] == ["10.77.0.11", "10.77.0.12", "10.77.0.13"]
    n1 = c.nodes[1]
    assert os.readlink(f"/proc/{n1.proc.pid}/exe") == str(strata_bin().resolve())

    c.pause(1)
    assert wait_state(n1.proc.pid, "T") == "T"
    assert c.live_bootstrap() == f"{c.nodes[2].address},{c.nodes[3].address}"
    c.resume(1)
    n1.wait_listening(timeout_s=5)

    c.kill9(2)
    assert not c.nodes[2].alive()
    c.restart(2, wait_registered=False)
    assert c.nodes[2].starts == 2 and c.nodes[2].alive()
    assert [f["kind"] for f in c.faults] == ["sigstop", "kill9"]
    assert c.stop_all() == {1: 0, 2: 0, 3: 0}
    assert "strata is serving" in c.log_tails()


def test_metadata_helpers_on_one_node(cluster_factory):
    """Proves the metadata helpers parse what a real broker returns: with one node (id 1)
    brokers == {1}, every partition's leader, replicas and ISR are node 1, the controller is
    node 1, and waiting for a full ISR returns at once."""
    c = cluster_factory(size=1, controller=False, start=False)
    c.start(wait_registered=False)
    c.wait_brokers({1}, timeout_s=10)
    parts = c.create_topic("meta", 2, replication_factor=1)
    assert sorted(parts) == [0, 1]
    assert all(p.leader == 1 and p.replicas == [1] and p.isrs == [1] for p in parts.values())
    assert c.leader("meta", 1) == 1
    assert c.controller_id(timeout_s=10) == 1
    with pytest.raises(TimeoutError):
        c.leader("meta", 0, timeout_s=1, not_on=1)
