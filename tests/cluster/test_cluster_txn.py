"""Exactly-once on a 3-node cluster while the transaction coordinator's broker, an output
partition's leader and the group coordinator's broker are killed with SIGKILL, and the
transaction coordinator is paused into a zombie (issue 13).

The workload is tests/clients/copier_workload.py's: Kafka's TransactionalMessageCopier, one per
input partition with random aborts, copies unique values to the output topic's same partition
(replication factor 3, min.insync.replicas 2). Faults, in order of copy progress: kill -9 of one
copier; kill -9 of the broker that leads the `__transaction_state` partition of copier 0's
transactional.id (its transaction coordinator: a new leader of that partition reloads the
coordinator state, completes or aborts what was in flight, and the copiers find it through
FindCoordinator); kill -9 of the leader of an output partition on another broker (a transaction
is then open on a partition whose leader changes: its data and markers must survive on the new
leader); kill -9 of the group coordinator's broker (the leader of the copiers' group's
`__consumer_offsets` partition, which holds their pending transactional offset commits until the
markers come); SIGSTOP of copier-0's coordinator until another broker took its partition over,
then SIGCONT (a zombie coordinator); kill -9 of all copiers. A killed broker is restarted once its partitions have new
leaders. Then checker.check_copy (Jepsen's aborted read, torn transaction, duplicate, lost write)
over the read_committed output and the raw log of each output partition's leader, and
checker.check_replicas over every node's copy of the output (read with Fetch as a replica).
"""

from __future__ import annotations

import os
import time

import pytest

from checker import Report, check_replicas, write_summary
from harness import Cluster
from test_cluster_groups import offsets_partition

import copier_workload  # tests/clients, on sys.path through harness
from copier_workload import BROKER_ENV, GROUP, INPUT, OUTPUT, CopyRun, fill_input, require_kafka_tools

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

RECORDS = int(os.environ.get("STRATA_TEST_COPIER_RECORDS", "150000"))
PARTITIONS = 3
TXN_STATE = "__transaction_state"
TXN_STATE_PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
FAULTS = [(0.05, "one copier"), (0.2, "coordinator"), (0.35, "output leader"), (0.5, "group coordinator"),
          (0.65, "pause coordinator"), (0.8, "all copiers")]
OFFSETS_TOPIC, OFFSETS_PARTITIONS = "__consumer_offsets", 3  # harness.CLUSTER_ENV
DEADLINE_S = 300 + RECORDS / 500


def kill_and_restart(cluster: Cluster, node: int, moving: list[tuple[str, int]]) -> None:
    """kill -9 `node`; once every (topic, partition) in `moving` has another live leader,
    start it again on the same dirs."""
    cluster.kill9(node)
    for topic, p in moving:
        cluster.leader(topic, p, not_on=node)
    cluster.restart(node)


@pytest.mark.timeout(int(DEADLINE_S + 300))
def test_copier_exactly_once_under_coordinator_and_leader_faults(cluster_factory, tmp_path, request):
    require_kafka_tools()
    cluster = cluster_factory(env={**BROKER_ENV, "STRATA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": str(TXN_STATE_PARTITIONS)})
    for topic in (INPUT, OUTPUT):
        cluster.create_topic(topic, PARTITIONS, config=TOPIC_CONFIG)
    counts = fill_input(cluster.bootstrap, RECORDS, PARTITIONS)
    # Kafka's coordinator partition for a transactional.id: abs(hashCode) % partitions, as
    # for a group id.
    coordinator_partition = offsets_partition("copier-0", TXN_STATE_PARTITIONS)

    def inject(what: str) -> str:
        if what == "coordinator":
            node = cluster.leader(TXN_STATE, coordinator_partition)
            kill_and_restart(cluster, node, [(TXN_STATE, coordinator_partition)])
            return f"kill -9 node {node} (coordinator of copier-0, {TXN_STATE}-{coordinator_partition})"
        if what == "pause coordinator":
            # A zombie coordinator: SIGSTOP past the broker session timeout, so another broker
            # takes over copier-0's coordinator partition, then SIGCONT. The paused one must
            # not write any marker or state afterwards that the new one's decisions contradict.
            node = cluster.leader(TXN_STATE, coordinator_partition)
            cluster.pause(node)
            try:
                new = cluster.leader(TXN_STATE, coordinator_partition, not_on=node)
                time.sleep(2)
            finally:
                cluster.resume(node)
            return f"SIGSTOP node {node} (coordinator of copier-0) until node {new} took over, SIGCONT"
        if what == "group coordinator":
            p = offsets_partition(GROUP, OFFSETS_PARTITIONS)
            node = cluster.leader(OFFSETS_TOPIC, p)
            kill_and_restart(cluster, node, [(OFFSETS_TOPIC, p)])
            return f"kill -9 node {node} (group coordinator of {GROUP}, {OFFSETS_TOPIC}-{p})"
        assert what == "output leader", what
        coordinator = cluster.leader(TXN_STATE, coordinator_partition)
        leaders = {p: cluster.leader(OUTPUT, p) for p in range(PARTITIONS)}
        p = next((p for p, n in leaders.items() if n != coordinator), 0)
        kill_and_restart(cluster, leaders[p], [(OUTPUT, p)])
        return f"kill -9 node {leaders[p]} (leader of {OUTPUT}-{p})"

    run = CopyRun(cluster.bootstrap, counts, tmp_path, DEADLINE_S, FAULTS, inject).run()
    parts = cluster.wait_topic(OUTPUT, PARTITIONS, full_isr=True, timeout_s=60)
    report, summary = run.check(cluster.bootstrap,
                                lambda p: cluster.nodes[parts[p].leader].address)
    # Every node's copy of the output, markers included, below the leader's high watermark
    # (read_committed_output's end, the LSO, equals it now that no transaction is open).
    highs = summary["highs"]
    replicas = {p: {n: [(r.offset, None, f"pid {r.producer_id} control {r.control} {r.value}")
                        for r in copier_workload.checker.read_raw_partition(
                            node.address, OUTPUT, p, highs[p], replica_id=-2)]
                    for n, node in cluster.nodes.items()}
                for p in range(PARTITIONS)}
    check_replicas(replicas, highs, report)
    write_summary(request.node.nodeid, {
        "faults_injected": len(run.done_faults), "operations": RECORDS,
        "records_checked": report.stats.get("committed_records", 0),
        "replica_records_checked": report.stats.get("replica_records_checked", 0),
        "violations": report.violations[:50], **summary, "passed": report.ok})
    assert report.ok, report.explain()
