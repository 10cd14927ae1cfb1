"""Unit tests of checker.py on synthetic histories, no broker: a clean history passes, and each
kind of violation the checker claims to catch (lost ack, duplicate, reorder, never-sent value,
hole, changed observation, diverged or short replica) fails with that check's name."""

from __future__ import annotations

import pytest

from checker import History, Op, check_history, check_replicas

pytestmark = pytest.mark.selftest


def history(idempotent: bool, n: int = 6, partitions: int = 2) -> tuple[History, dict, dict]:
    """Producer 0 sends p0-0..p0-(n-1) round-robin; all acked at consecutive offsets."""
    h = History(idempotent=idempotent)
    log: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    for seq in range(n):
        p = seq % partitions
        op = Op(0, 1, seq, p, f"p0-{seq}", outcome="ok", offset=len(log[p]))
        h.add(op)
        log[p].append((op.offset, op.value))
    return h, log, {p: len(v) for p, v in log.items()}


def failed_checks(report) -> set[str]:
    return {v.split("]")[0].lstrip("[") for v in report.violations}


@pytest.mark.parametrize("idempotent", [False, True])
def test_clean_history_passes(idempotent):
    """A log holding exactly the acked values at their offsets passes, with counts filled in."""
    h, log, highs = history(idempotent)
    h.observed = [(0, 0, "p0-0"), (1, 1, "p0-3")]
    r = check_history(h, log, highs)
    assert r.ok, r.explain()
    assert r.stats["records_checked"] == 6 and r.stats["ops_ok"] == 6 and r.stats["observations"] == 2


@pytest.mark.parametrize("idempotent", [False, True])
def test_lost_acked_write_fails(idempotent):
    """Truncating the last acked record of partition 0 (HW lowered too) is an acked_lost failure."""
    h, log, highs = history(idempotent)
    log[0].pop()
    highs[0] -= 1
    assert "acked_lost" in failed_checks(check_history(h, log, highs))


def test_acked_offset_holding_another_value_fails():
    """An acked value present, but not at the offset it was acknowledged with, is a failure."""
    h, log, highs = history(False)
    (o0, v0), (o1, v1) = log[0][0], log[0][1]
    log[0][0], log[0][1] = (o0, v1), (o1, v0)
    assert "acked_lost" in failed_checks(check_history(h, log, highs))


def test_duplicate_fails_with_idempotence_only():
    """A retried value written twice fails with idempotence on, and is only counted without."""
    for idempotent in (True, False):
        h, log, highs = history(idempotent)
        log[0].append((len(log[0]), "p0-0"))
        highs[0] += 1
        r = check_history(h, log, highs)
        if idempotent:
            assert "duplicate" in failed_checks(r)
        else:
            assert r.ok, r.explain()
            assert r.stats["duplicated_values"] == 1


def test_reorder_fails_with_idempotence_only():
    """Two unacked (failed/unknown) values of one producer in one partition, swapped in the log,
    fail the order check with idempotence on and pass without."""
    for idempotent in (True, False):
        h, log, highs = history(idempotent)
        for seq in (6, 8):  # both go to partition 0
            h.add(Op(0, 1, seq, 0, f"p0-{seq}", outcome="failed", error="_MSG_TIMED_OUT"))
        log[0] += [(highs[0], "p0-8"), (highs[0] + 1, "p0-6")]
        highs[0] += 2
        r = check_history(h, log, highs)
        assert ("order" in failed_checks(r)) == idempotent, r.explain()
        assert r.stats["indeterminate_present"] == 2


def test_reorder_across_sessions_is_allowed():
    """A new producer session (after a fatal error) is a new ordering scope."""
    h, log, highs = history(True)
    h.add(Op(0, 2, 7, 0, "p0-7", outcome="ok", offset=highs[0]))
    h.add(Op(0, 1, 9, 0, "p0-9", outcome="failed"))
    log[0] += [(highs[0], "p0-7"), (highs[0] + 1, "p0-9")]
    highs[0] += 2
    assert check_history(h, log, highs).ok


def test_never_sent_value_and_wrong_partition_fail():
    h, log, highs = history(True)
    log[1].append((highs[1], "p9-0"))
    highs[1] += 1
    r = check_history(h, log, highs)
    assert "never_sent" in failed_checks(r)
    h, log, highs = history(False)
    log[0].append((highs[0], "p0-1"))  # p0-1 was sent to partition 1
    highs[0] += 1
    assert "wrong_partition" in failed_checks(check_history(h, log, highs))


def test_failed_value_present_is_not_a_violation():
    """A failed (indeterminate) value that turns up committed is allowed and counted."""
    h, log, highs = history(False)
    h.add(Op(1, 1, 0, 0, "p1-0", outcome="failed", error="NOT_ENOUGH_REPLICAS"))
    log[0].append((highs[0], "p1-0"))
    highs[0] += 1
    r = check_history(h, log, highs)
    assert r.ok, r.explain()
    assert r.stats["indeterminate_present"] == 1 and r.stats["ops_failed"] == 1


def test_hole_fails():
    h, log, highs = history(False)
    log[0][1] = (log[0][1][0] + 1, log[0][1][1])
    assert "contiguous" in failed_checks(check_history(h, log, highs))


def test_observation_of_a_later_lost_record_fails():
    """The consumer saw p9 at partition 0 offset 3 during the run, but the final log ends at
    offset 3: a record below some HW disappeared."""
    h, log, highs = history(False)
    h.add(Op(9, 1, 0, 0, "p9-0", outcome="unknown"))
    h.observed = [(0, 3, "p9-0")]
    assert "observed_lost" in failed_checks(check_history(h, log, highs))
    h.observed = [(0, 0, "p0-0"), (0, 0, "p0-2")]
    assert "observed_changed" in failed_checks(check_history(h, log, highs))


def replicas_of(log: dict) -> dict:
    return {p: {n: [(o, 1, v) for o, v in recs] for n in (1, 2, 3)} for p, recs in log.items()}


def test_replicas_agree_passes_and_tail_above_hw_is_allowed():
    h, log, highs = history(True)
    reps = replicas_of(log)
    reps[0][3].append((highs[0], 2, "p0-99"))  # uncommitted tail on one replica
    r = check_replicas(reps, highs)
    assert r.ok, r.explain()
    assert r.stats["replica_records_above_hw"] == 1
    assert r.stats["replica_records_checked"] == 3 * sum(highs.values())


def test_replica_divergence_and_short_replica_fail():
    h, log, highs = history(True)
    reps = replicas_of(log)
    reps[1][2][0] = (0, 1, "p0-x")
    assert "replica_diverged" in failed_checks(check_replicas(reps, highs))
    reps = replicas_of(log)
    reps[1][3][1] = (1, 2, reps[1][3][1][2])  # same value, different leader epoch
    assert "replica_diverged" in failed_checks(check_replicas(reps, highs))
    reps = replicas_of(log)
    reps[0][2].pop()
    assert "replica_incomplete" in failed_checks(check_replicas(reps, highs))


def test_dump_partition_parses_the_agreed_json(tmp_path):
    """`strata log dump --json` lines (base64 values, null value) become (offset, epoch, value)."""
    import base64
    import json
    from checker import dump_partition
    fake = tmp_path / "strata"
    lines = [{"offset": 0, "leader_epoch": 1, "key": None, "value": base64.b64encode(b"p0-0").decode()},
             {"offset": 1, "leader_epoch": 2, "key": base64.b64encode(b"k").decode(), "value": None}]
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1 $2 $3\" = \"log dump --dir\" ] && [ \"$5\" = --json ] || exit 2\n"
                    f"cat <<'END'\n{chr(10).join(json.dumps(x) for x in lines)}\n\nEND\n")
    fake.chmod(0o755)
    assert dump_partition(fake, tmp_path / "t-0") == [(0, 1, "p0-0"), (1, 2, None)]


def test_fatal_producer_error_fails():
    h, log, highs = history(True)
    h.fatal_errors.append("producer 0 session 1: OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert "producer_fatal" in failed_checks(check_history(h, log, highs))


# ---- check_copy: the transactional copy's anomalies --------------------------------------------

def copy_log(txns: list[tuple[int, list[int], str]], partition: int = 0):
    """An output partition from (producer id, input indexes, "commit"|"abort"|"open") in order:
    its raw records (data then the marker) and what read_committed returns of it."""
    from checker import CONTROL_ABORT, CONTROL_COMMIT, RawRecord, input_value
    raw, committed, o = [], [], 0
    for pid, indexes, outcome in txns:
        for i in indexes:
            v = input_value(partition, i)
            raw.append(RawRecord(o, pid, True, None, v))
            if outcome == "commit":
                committed.append((o, v))
            o += 1
        if outcome != "open":
            raw.append(RawRecord(o, pid, True, CONTROL_COMMIT if outcome == "commit" else CONTROL_ABORT, None))
            o += 1
    return raw, committed


def copy_violations(input_n: int, raw, committed) -> set[str]:
    from checker import check_copy
    r = check_copy({0: input_n}, {0: committed}, {0: raw})
    return {v.split("]")[0].lstrip("[") for v in r.violations}


def test_copy_clean_with_aborts_passes():
    """Aborted copies followed by committed ones, across producer ids (a restarted copier),
    are exactly-once."""
    raw, committed = copy_log([(1, [0, 1], "commit"), (1, [2, 3], "abort"), (2, [2, 3], "abort"),
                               (2, [2, 3], "commit")])
    from checker import check_copy
    r = check_copy({0: 4}, {0: committed}, {0: raw})
    assert r.ok, r.explain()
    assert r.stats["transactions_commit"] == 2 and r.stats["transactions_abort"] == 2


def test_copy_anomalies_are_named():
    """Each anomaly fails with its Jepsen name: an aborted copy visible, a committed transaction
    half visible, a value visible twice, a value never visible, values out of order."""
    raw, committed = copy_log([(1, [0, 1], "abort"), (1, [0, 1], "commit")])
    assert copy_violations(2, raw, committed + [(0, "p0-00000000")]) >= {"aborted read", "duplicate"}
    assert copy_violations(2, raw, committed[:1]) == {"torn transaction", "lost write"}
    raw, committed = copy_log([(1, [0, 1], "commit"), (1, [0], "commit")])
    assert copy_violations(2, raw, committed) == {"duplicate"}
    raw, committed = copy_log([(1, [1, 0], "commit")])
    assert copy_violations(2, raw, committed) == {"order violation"}
    raw, committed = copy_log([(1, [0], "commit"), (2, [1], "open")])
    assert copy_violations(2, raw, committed + [(2, "p0-00000001")]) == {"uncommitted read"}
    assert copy_violations(3, raw, committed + [(2, "p0-00000001")]) == {"uncommitted read", "lost write"}


def test_raw_batches_parse_data_and_markers():
    """parse_raw_batches reads a transactional data batch and a COMMIT control batch as stored."""
    import struct
    import kproto
    from checker import CONTROL_COMMIT, parse_raw_batches
    data = kproto.record_batch([(None, b"p0-00000000"), (None, b"p0-00000001")], producer_id=7,
                               producer_epoch=0, base_sequence=0, attributes=0x10)
    marker = kproto.record_batch([(struct.pack(">hh", 0, CONTROL_COMMIT), struct.pack(">hi", 0, 0))],
                                 producer_id=7, producer_epoch=0, attributes=0x30)
    marker = struct.pack(">q", 2) + marker[8:]
    records, nxt = parse_raw_batches(data + marker + marker[:20])
    assert nxt == 3
    assert [(r.offset, r.producer_id, r.control, r.value) for r in records] == [
        (0, 7, None, "p0-00000000"), (1, 7, None, "p0-00000001"), (2, 7, CONTROL_COMMIT, None)]
