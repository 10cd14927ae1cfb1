"""Free TCP ports for test listeners, shared by the client and cluster harnesses and by
tests/kafka/reference_kafka.py (tests and perf scripts)."""

from __future__ import annotations

import socket

# Every port free_port() has handed out in this test session. The kernel picks a bound
# port 0 at random, so two calls may return the same port (measured: 18 of 20,000 runs of six
# calls, the ports of one cluster); two listeners of one test would then collide. A session
# uses a few hundred of the ~28,000 ephemeral ports.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now and not handed out before in this session."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def free_ports(n: int) -> list[int]:
    """`n` distinct free ports (free_port() never repeats one)."""
    return [free_port() for _ in range(n)]
