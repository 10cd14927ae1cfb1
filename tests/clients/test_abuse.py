"""A smaller run of perf/abuse.py: while a good client produces and consumes one record a
second, slowloris connections claiming 100 MiB requests, idle connections and fetches asking
for 2 GB run against the broker; the good client sees no failure, slowloris connections are
closed by the broker (request_timeout_ms, lowered here to 2 s), idle ones stay open (below
connections_max_idle_ms), the fetches never get more than fetch_max_bytes plus a batch, the
broker's memory stays bounded and it answers afterwards. No timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))

import abuse  # noqa: E402

MIB = 1024 * 1024


def test_abuse_leaves_good_client_and_memory_alone(broker_factory, monkeypatch):
    """The functional properties of the abuse run, at a tenth of its size."""
    monkeypatch.setenv("STRATA_REQUEST_TIMEOUT_MS", "2000")
    broker = broker_factory()
    abuse.raise_open_files_limit()
    r = abuse.run(broker.bootstrap, broker.proc.pid, slowloris=20, idle=200, fetchers=2,
                  fetch_depth=2, fill_mb=20, duration_s=12.0, log=lambda *_: None)
    assert r["good_failures"] == [], r
    assert r["good_records_read"] == r["good_records_acked"] > 0, r
    assert r["broker_alive"], r
    assert r["slowloris_closed_by_broker"] > 0, r
    assert r["idle_still_open_at_end"] == r["idle_opened"] == 200, r
    assert r["fetch_responses"] > 0 and not r["fetch_errors"], r
    assert r["fetch_largest_response_bytes"] <= 57_671_680 + MIB, r
    # 20 claims of 100 MiB would be 2 GB if allocated up front.
    assert r["peak_above_rest_mib"] < 1024, r
