"""Exactly-once under SIGKILL with Kafka's own consume-transform-produce loop (issue 13).

An input topic is filled with unique values ("p<partition>-<index>", in index order per
partition) and copied by Kafka's TransactionalMessageCopier, one per input partition, with random
aborts (copier_workload.py). Meanwhile the test kills copiers with SIGKILL several times (one
alone, all at once) and restarts them, and kills the broker with SIGKILL once and restarts it on
the same data dir (the coordinator reloads `__transaction_state`, the partitions recover their
producer state and aborted-transaction index; the copiers ride through on their retries).

Then tests/cluster/checker.py's check_copy reads the output with read_committed and, raw
(read_uncommitted, control batches included), proves: every input record visible exactly once,
in input order per partition, nothing of an aborted or unfinished transaction visible, every
committed transaction wholly visible (Jepsen's lost write, duplicate, aborted read, torn
transaction); and the group's committed offsets are the input's ends.

Size: STRATA_TEST_COPIER_RECORDS (default 300000, ~1 min here, 2-3 min on a loaded CI; the issue's full run is
STRATA_TEST_COPIER_RECORDS=1000000), STRATA_TEST_COPIER_PARTITIONS (default 3),
STRATA_TEST_COPIER_TXN_SIZE (default 500), STRATA_TEST_COPIER_FAULTS (another fault schedule,
see FAULTS). The run's numbers are printed (pytest -s).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from common import create_topic
from copier_workload import BROKER_ENV, INPUT, OUTPUT, CopyRun, fill_input, require_kafka_tools

RECORDS = int(os.environ.get("STRATA_TEST_COPIER_RECORDS", "300000"))
PARTITIONS = int(os.environ.get("STRATA_TEST_COPIER_PARTITIONS", "3"))
# In order, each at a copy progress (fraction of the input committed): one copier, all copiers
# at once, the broker, then copiers again while the broker's reloaded state is in use.
FAULTS = [(0.05, "one copier"), (0.2, "all copiers"), (0.4, "broker"), (0.6, "one copier"),
          (0.8, "all copiers")]
# Another schedule, for stress runs by hand: "0.1:broker,0.15:all copiers,0.2:broker,...".
if os.environ.get("STRATA_TEST_COPIER_FAULTS"):
    FAULTS = [(float(at), what) for at, what in
              (f.split(":", 1) for f in os.environ["STRATA_TEST_COPIER_FAULTS"].split(","))]
DEADLINE_S = 240 + RECORDS / 1000  # healthy: ~1.5-3k records/s over 3 copiers on 2 cores

pytestmark = pytest.mark.timeout(int(DEADLINE_S + 300))


def test_copier_exactly_once_under_sigkill(broker_factory, tmp_path, monkeypatch):
    """Proves exactly-once of a consume-transform-produce loop while the copiers and the broker
    are killed with SIGKILL: see the module docstring for the workload and the checks."""
    require_kafka_tools()
    for k, v in BROKER_ENV.items():
        monkeypatch.setenv(k, v)
    b = broker_factory(start=False)
    if not b.persistent:
        pytest.skip(f"{b.kind} runs in memory here: the broker restart needs strata")
    b.start()
    bs = b.bootstrap
    create_topic(bs, INPUT, PARTITIONS)
    create_topic(bs, OUTPUT, PARTITIONS)
    started = time.monotonic()
    counts = fill_input(bs, RECORDS, PARTITIONS)
    fill_s = time.monotonic() - started

    def inject(what: str) -> str:
        assert what == "broker", what
        b.kill9()
        b.start()
        return "kill -9 broker"

    run = CopyRun(bs, counts, tmp_path, DEADLINE_S, FAULTS, inject).run()
    report, summary = run.check(bs, lambda _p: bs)
    print(json.dumps({"fill_s": round(fill_s, 1), **summary}, indent=2, sort_keys=True))
    assert report.ok, report.explain()
