"""pytest fixtures: clusters and namespaces that are always torn down, even when a test fails.

`cluster_factory(size=3, network="loopback"|"netns", controller=True, roles=None)` builds and starts a
Cluster under the test's tmp_path; the finalizer kills every node and removes the namespaces.
`network_or_fail(nodes)` builds a netns.Network: failure to do so fails the test unless
STRATA_SKIP_NETNS=1, in which case it skips (loudly, with the reason).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "clients"))

from harness import Cluster  # noqa: E402
import netns  # noqa: E402
from tmp_cleanup import free_tmp_path_of_passed_test, remember_report  # noqa: E402,F401


@pytest.fixture
def network_or_fail():
    made: list[netns.Network] = []

    def make(nodes: list[int], tool: str | None = None) -> netns.Network:
        try:
            net = netns.Network(nodes, tool)
            made.append(net)
            return net.setup()
        except netns.NetnsUnavailable as e:
            if netns.skip_allowed():
                pytest.skip(f"STRATA_SKIP_NETNS=1 and network namespaces are unavailable: {e}")
            pytest.fail(f"network namespaces unavailable (set STRATA_SKIP_NETNS=1 to skip): {e}")

    yield make
    for net in made:
        net.teardown()


@pytest.fixture
def cluster_factory(tmp_path, network_or_fail, request):
    made: list[Cluster] = []

    def make(size: int = 3, network: str = "loopback", controller: bool = True, start: bool = True,
             env: dict[str, str] | None = None, roles: dict[int, str] | None = None) -> Cluster:
        net = network_or_fail(list(range(1, size + 1))) if network == "netns" else None
        c = Cluster(tmp_path / f"cluster{len(made)}", size=size, network=network, net=net,
                    controller=controller, env=env, roles=roles)
        made.append(c)
        request.node.strata_clusters = made  # for the failure report below
        return c.start() if start else c

    yield make
    for c in made:
        c.close()
    # network_or_fail's finalizer (it was requested first, so it runs after this) removes netns.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of every node's log so a red test explains itself."""
    outcome = yield
    report = outcome.get_result()
    remember_report(item, report)
    if report.when in ("setup", "call") and report.failed:
        for i, c in enumerate(getattr(item, "strata_clusters", [])):
            report.sections.append((f"cluster {i} node logs", c.log_tails(60)))


def pytest_terminal_summary(terminalreporter):
    """One line per checked run of this session (from last-run.json): faults injected,
    operations, records and replica records checked, violations — so a CI log records what
    the fault tests actually exercised, not just that they passed."""
    import json

    from checker import SESSION_ID, SUMMARY_PATH

    try:
        data = json.loads(SUMMARY_PATH.read_text())
    except (OSError, ValueError):
        return
    if data.get("session") != SESSION_ID or not data.get("runs"):
        return
    tr = terminalreporter
    tr.section("cluster checker runs")
    totals = {"faults": 0, "ops": 0, "records": 0, "replica_records": 0}
    for test_id, s in sorted(data["runs"].items()):
        faults = s.get("faults_injected", 0)
        ops = s.get("operations", 0)
        records = s.get("records_checked", 0)
        replica_records = s.get("replica_records_checked", 0)
        totals["faults"] += faults
        totals["ops"] += ops
        totals["records"] += records
        totals["replica_records"] += replica_records
        tr.write_line(f"{'PASS' if s.get('passed') else 'FAIL'} {test_id}: faults {faults}, "
                      f"operations {ops}, records checked {records}, replica records {replica_records}, "
                      f"violations {len(s.get('violations', []))}")
    tr.write_line(f"total: {len(data['runs'])} checked runs, faults {totals['faults']}, operations "
                  f"{totals['ops']}, records checked {totals['records']}, replica records "
                  f"{totals['replica_records']}")
