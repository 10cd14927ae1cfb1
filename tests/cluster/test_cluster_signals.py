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
        assert time.monotonic() - began < 5, "the broker took long to exit"
        assert "stopping during start-up" in node.log_path.read_text(errors="replace")
