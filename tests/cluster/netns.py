"""Network namespaces for partition tests: each broker in its own namespace, all on one bridge.

Layout (needs root, `ip`, and `iptables` or `nft`):

    root namespace (test client)            node namespaces
    bridge <tag>br 10.77.0.1/24  --veth--   <ns-prefix>n1: eth0 10.77.0.11/24
                                  --veth--   <ns-prefix>n2: eth0 10.77.0.12/24
                                  --veth--   <ns-prefix>n3: eth0 10.77.0.13/24

Node-to-node traffic is bridged (it never leaves the 10.77.0.0/24 segment); the test client in
the root namespace talks to every node from 10.77.0.1. A partition is a set of DROP rules in the
isolated node's own namespace, on its one interface: `isolate(n)` drops everything, and
`isolate(n, allow_client=True)` drops everything except traffic to and from 10.77.0.1, so a
client can still reach a leader that its peers cannot (the classic split-brain setup). DROP, not
REJECT: peers see silence and time out, as on a real partition. `heal(n)` removes the rules;
connections that survived resume, the rest are re-dialled by the brokers.

Failure to build the namespaces is an error (NetnsUnavailable), never a silent skip; callers
turn it into a skip only when STRATA_SKIP_NETNS=1.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

SUBNET = "10.77.0"
CLIENT_ADDRESS = f"{SUBNET}.1"
PREFIX = "stc"  # every interface and namespace this module makes starts with it


class NetnsUnavailable(RuntimeError):
    pass


def skip_allowed() -> bool:
    return os.environ.get("STRATA_SKIP_NETNS") == "1"


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def firewall_tool() -> str:
    """'iptables' or 'nft', whichever is installed (iptables preferred: simpler rule deletion)."""
    for tool in ("iptables", "nft"):
        if shutil.which(tool):
            return tool
    raise NetnsUnavailable("neither iptables nor nft is installed (apt-get install iptables nftables)")


def remove_stale() -> None:
    """Deletes namespaces and bridges a killed earlier run left behind (they hold 10.77.0.1)."""
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX):
            run("ip", "netns", "del", name, check=False)
    for line in run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            run("ip", "link", "del", name, check=False)


class Network:
    """A bridge in the root namespace and one namespace per node. Use as a context manager or
    call setup()/teardown(); teardown is idempotent and never raises."""

    def __init__(self, nodes: list[int], tool: str | None = None):
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        if not shutil.which("ip"):
            raise NetnsUnavailable("`ip` (iproute2) is not installed")
        self.tool = tool or os.environ.get("STRATA_NETNS_FIREWALL") or firewall_tool()
        if self.tool not in ("iptables", "nft") or not shutil.which(self.tool):
            raise NetnsUnavailable(f"firewall tool {self.tool!r} is not installed")
        self.tag = PREFIX + secrets.token_hex(2)  # 7 chars: names stay under IFNAMSIZ (15)
        self.bridge = f"{self.tag}br"
        self.nodes = list(nodes)
        self.isolated: set[int] = set()
        self.forward_rule = False

    def namespace(self, node: int) -> str:
        return f"{self.tag}n{node}"

    def address(self, node: int) -> str:
        assert 1 <= node <= 200, node
        return f"{SUBNET}.{10 + node}"

    def exec_prefix(self, node: int) -> list[str]:
        """Prefix a command with this to run it inside the node's namespace. `ip netns exec`
        execs the command, so the child's pid is the command's own (signals reach it)."""
        return ["ip", "netns", "exec", self.namespace(node)]

    def setup(self) -> "Network":
        remove_stale()
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{CLIENT_ADDRESS}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for n in self.nodes:
                ns, host_if = self.namespace(n), f"{self.tag}h{n}"
                run("ip", "netns", "add", ns)
                run("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
                run("ip", "link", "set", host_if, "master", self.bridge)
                run("ip", "link", "set", host_if, "up")
                run(*self.exec_prefix(n), "ip", "addr", "add", f"{self.address(n)}/24", "dev", "eth0")
                run(*self.exec_prefix(n), "ip", "link", "set", "eth0", "up")
                run(*self.exec_prefix(n), "ip", "link", "set", "lo", "up")
            # With br_netfilter loaded, bridged frames cross the root FORWARD chain; a host with
            # a DROP policy there (Docker sets one) would silently partition every node.
            if self.tool == "iptables":
                run("iptables", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
                self.forward_rule = True
        except Exception:
            self.teardown()
            raise
        return self

    def teardown(self) -> None:
        for n in self.nodes:
            run("ip", "netns", "del", self.namespace(n), check=False)  # takes its veth with it
        run("ip", "link", "del", self.bridge, check=False)
        if self.forward_rule:
            run("iptables", "-D", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT", check=False)
            self.forward_rule = False
        self.isolated.clear()

    def __enter__(self) -> "Network":
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()

    def isolate(self, node: int, allow_client: bool = False) -> None:
        """Drops every packet on the node's interface (except to/from the test client if
        allow_client). Idempotent per node: a second call replaces the rules."""
        self.heal(node)
        x = self.exec_prefix(node)
        if self.tool == "iptables":
            run(*x, "iptables", "-N", "STRATA_PART")
            if allow_client:
                run(*x, "iptables", "-A", "STRATA_PART", "-s", CLIENT_ADDRESS, "-j", "RETURN")
                run(*x, "iptables", "-A", "STRATA_PART", "-d", CLIENT_ADDRESS, "-j", "RETURN")
            run(*x, "iptables", "-A", "STRATA_PART", "-j", "DROP")
            run(*x, "iptables", "-I", "INPUT", "-i", "eth0", "-j", "STRATA_PART")
            run(*x, "iptables", "-I", "OUTPUT", "-o", "eth0", "-j", "STRATA_PART")
        else:
            keep_in = f'ip saddr {CLIENT_ADDRESS} accept; ' if allow_client else ""
            keep_out = f'ip daddr {CLIENT_ADDRESS} accept; ' if allow_client else ""
            ruleset = (
                "table inet strata_part {\n"
                f'  chain in {{ type filter hook input priority -10; iifname "eth0" {keep_in}iifname "eth0" drop; }}\n'
                f'  chain out {{ type filter hook output priority -10; oifname "eth0" {keep_out}oifname "eth0" drop; }}\n'
                "}\n")
            proc = subprocess.run([*x, "nft", "-f", "-"], input=ruleset, capture_output=True, text=True)
            if proc.returncode != 0:
                raise NetnsUnavailable(f"nft ruleset failed: {proc.stderr.strip()}\n{ruleset}")
        self.isolated.add(node)

    def heal(self, node: int) -> None:
        x = self.exec_prefix(node)
        if self.tool == "iptables":
            run(*x, "iptables", "-D", "INPUT", "-i", "eth0", "-j", "STRATA_PART", check=False)
            run(*x, "iptables", "-D", "OUTPUT", "-o", "eth0", "-j", "STRATA_PART", check=False)
            run(*x, "iptables", "-F", "STRATA_PART", check=False)
            run(*x, "iptables", "-X", "STRATA_PART", check=False)
        else:
            run(*x, "nft", "delete", "table", "inet", "strata_part", check=False)
        self.isolated.discard(node)

    def heal_all(self) -> None:
        for n in list(self.isolated):
            self.heal(n)
