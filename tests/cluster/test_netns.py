"""Self-test of netns.py, no broker needed: namespaces come up, nodes reach each other and the
client, and isolate()/heal() toggle reachability exactly as documented."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from netns import Network, run

pytestmark = pytest.mark.selftest

PORT = 38080


def http_server(net: Network, node: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*net.exec_prefix(node), sys.executable, "-m", "http.server", str(PORT), "--bind", net.address(node)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while not client_reaches(net.address(node)):
        assert proc.poll() is None, "http.server exited"
        assert time.monotonic() < deadline, "http.server in the namespace never answered"
        time.sleep(0.1)
    return proc


def client_reaches(address: str, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, PORT), timeout=timeout_s) as s:
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.0 200")
    except OSError:
        return False


def node_reaches(net: Network, src: int, dst: int) -> bool:
    """A TCP request from inside namespace `src` to node `dst`'s http.server."""
    code = (f"import socket;s=socket.create_connection(('{net.address(dst)}',{PORT}),timeout=1);"
            "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n');assert s.recv(12).startswith(b'HTTP/1.0 200')")
    return run(*net.exec_prefix(src), sys.executable, "-c", code, check=False).returncode == 0


@pytest.mark.parametrize("tool", ["iptables", "nft"])
def test_isolate_and_heal_toggle_reachability(network_or_fail, tool):
    """Proves the partition primitive: with an http.server in node 2's namespace, the client
    and node 1 reach it; isolate(2) cuts both; isolate(2, allow_client=True) cuts node 1 but not
    the client; heal(2) restores both. With each firewall backend (iptables, nft). Teardown removes every namespace and the bridge."""
    net = network_or_fail([1, 2, 3], tool)
    server = http_server(net, 2)
    try:
        assert client_reaches(net.address(2)) and node_reaches(net, 1, 2) and node_reaches(net, 3, 2)

        net.isolate(2)
        assert not client_reaches(net.address(2)), "client still reaches a fully isolated node"
        assert not node_reaches(net, 1, 2), "peer still reaches a fully isolated node"

        net.isolate(2, allow_client=True)
        assert client_reaches(net.address(2)), "client cut off although allow_client=True"
        assert not node_reaches(net, 1, 2), "peer reaches a node isolated from its peers"
        assert not node_reaches(net, 3, 2), "peer reaches a node isolated from its peers"

        net.heal(2)
        assert client_reaches(net.address(2)) and node_reaches(net, 1, 2)
    finally:
        server.kill()
        server.wait()
    names = [net.namespace(n) for n in (1, 2, 3)]
    net.teardown()
    listed = run("ip", "netns", "list").stdout
    assert not any(n in listed for n in names), f"namespaces left behind: {listed}"
    assert run("ip", "link", "show", net.bridge, check=False).returncode != 0, "bridge left behind"
