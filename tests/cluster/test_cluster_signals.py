"""SIGTERM at any point of a broker's life ends it, as Kafka's does: here during its start,
while it waits for the controller quorum to form (which lasts as long as the other voters are
down). Before the fix the broker read signals only once started, so a SIGTERM sent while it
waited was ignored (for ever, with the other voters down)."""

from __future__ import annotations

import signal
import time

import pytest

from harness import require_cluster_support

pytestmark = [pytest.mark.cluster]


def test_sigterm_while_waiting_for_the_quorum_ends_the_broker(cluster_factory):
    """Proves a node started alone in a 3-voter cluster (no quorum can form, so its start
    never ends) exits with 0 within seconds of a SIGTERM, and that SIGINT does the same."""
    require_cluster_support()
    c = cluster_factory(start=False)
    node = c.nodes[1]
    for signal_name in ("SIGTERM", "SIGINT"):
        node.start(c.voters, wait=False)
        # Logged every 5 s while the start waits for the quorum.
        node.wait_log("waiting for the controller quorum to form", timeout_s=30)
        assert node.alive()
        began = time.monotonic()
        if signal_name == "SIGTERM":
            code = node.stop()  # raises if the signal was ignored for STOP_TIMEOUT_S
        else:
            node.proc.send_signal(signal.SIGINT)
            code = node.proc.wait(timeout=15)
        assert code == 0, node.log_tail()
        # The bug this guards against is a start that never ends; 12 s (of the stop's 15)
        # tells that apart without timing a loaded machine to the second.
        assert time.monotonic() - began < 12, "the broker took long to exit"
        assert "stopping during start-up" in node.log_path.read_text(errors="replace")


def test_sigterm_hands_leaderships_over_before_the_broker_stops(cluster_factory):
    """Proves Kafka's controlled shutdown: with a session timeout of 60 s, a leader stopped
    with SIGTERM has given its leaderships to the other in-sync replicas by the time it exits,
    so right after, the metadata names new leaders, it is out of every ISR, and acks=all
    produce to each partition succeeds at once. Before, the stopped broker stayed leader (and
    produce to its partitions failed) until the session timeout fenced it. Its restart brings
    it back into every ISR."""
    require_cluster_support()
    from confluent_kafka import Producer

    c = cluster_factory(env={"STRATA_BROKER_SESSION_TIMEOUT_MS": "60000"})
    c.create_topic("handed", 3, replication_factor=3)
    # Not the active controller: its stop would also wait for a controller election.
    controller = c.controller_id()
    leaders = {p: c.leader("handed", p) for p in range(3)}
    victim = next(n for n in leaders.values() if n != controller)
    node = c.nodes[victim]
    assert node.stop() == 0
    stopped = time.monotonic()

    def handed_over():
        parts = c.partitions("handed")
        return all(p.leader >= 0 and p.leader != victim and victim not in p.isrs
                   for p in parts.values())
    # Without the hand-over, the session timeout (60 s) would fence it: 20 s tells the two
    # apart with room for three brokers and the metadata reads sharing two cores.
    c.poll_until("leaderships handed over", handed_over, 20)
    assert time.monotonic() - stopped < 20, "took as long as a session timeout"
    assert "controlled shutdown: fenced" in node.log_path.read_text(errors="replace")

    delivered: list[object] = []
    p = Producer({"bootstrap.servers": c.live_bootstrap(), "acks": "all",
                  "message.timeout.ms": 10000})
    for partition in range(3):
        p.produce("handed", value=f"v{partition}".encode(), partition=partition,
                  on_delivery=lambda err, msg: delivered.append(err))
    assert p.flush(15) == 0
    assert delivered == [None, None, None], delivered

    c.restart(victim)
    c.wait_topic("handed", 3, full_isr=True, timeout_s=30)
