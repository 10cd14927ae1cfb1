"""The end of every fault test: heal, read everything back, run the checker, compare replicas.

verify_cluster() waits for a full ISR on every partition, reads the topic from offset 0 to the
HW (checks 1-6 of checker.py), reads every replica of every partition (check 7) -- through
`strata log dump` after a clean stop of every node (default), or through a debugging Fetch from
each running broker (STRATA_CLUSTER_REPLICA_READ=fetch) -- writes the run summary and fails the
test with the violations if there are any.
"""

from __future__ import annotations

import time

from checker import (History, check_history, check_replicas, dump_partition, read_topic,
                     replica_read_mode, summarize, write_summary)
from harness import Cluster, strata_bin
import replica_fetch

FULL_ISR_TIMEOUT_S = 60


def read_replicas_fetch(cluster: Cluster, topic: str, replicas: dict[int, list[int]],
                        highs: dict[int, int]) -> dict:
    out: dict[int, dict[int, list]] = {}
    for p, nodes in replicas.items():
        out[p] = {}
        for n in nodes:
            # A follower that is in the ISR may still be one fetch behind the leader's LEO.
            deadline = time.monotonic() + 10
            while True:
                recs = replica_fetch.read_replica(cluster.nodes[n].address, topic, p, highs[p])
                if len(recs) >= highs[p] or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            out[p][n] = recs
    return out


def read_replicas_dump(cluster: Cluster, topic: str, replicas: dict[int, list[int]]) -> dict:
    return {p: {n: dump_partition(strata_bin(), cluster.nodes[n].data_dir / f"{topic}-{p}") for n in nodes}
            for p, nodes in replicas.items()}


def verify_cluster(cluster: Cluster, history: History, topic: str, partitions: int, test_id: str,
                   **extra) -> dict:
    parts = cluster.wait_topic(topic, partitions, full_isr=True, timeout_s=FULL_ISR_TIMEOUT_S)
    replicas = {p: sorted(parts[p].replicas) for p in range(partitions)}
    log, highs = read_topic(cluster.bootstrap, topic, partitions)
    report = check_history(history, log, highs)

    mode = replica_read_mode()
    if mode == "fetch":
        replica_logs = read_replicas_fetch(cluster, topic, replicas, highs)
    exit_codes = cluster.stop_all()
    bad_exits = {n: c for n, c in exit_codes.items() if c not in (0, None)}
    if bad_exits:
        report.fail("clean_stop", f"nodes exited with {bad_exits} on SIGTERM")
    if mode == "dump":
        replica_logs = read_replicas_dump(cluster, topic, replicas)
    check_replicas(replica_logs, highs, report)

    summary = summarize(history, report, cluster.faults, topic=topic, partitions=partitions,
                        high_watermarks=highs, replicas=replicas, replica_read=mode, **extra)
    write_summary(test_id, summary)
    assert report.ok, f"{len(report.violations)} violations:\n{report.explain()}"
    return summary
