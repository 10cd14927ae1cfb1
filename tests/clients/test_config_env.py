"""Broker settings from STRATA_* environment variables, as `strata serve` reads them at start."""

from __future__ import annotations

import re

from harness import strata_bin

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_unknown_strata_variable_warns(broker_factory, monkeypatch):
    """Proves a misspelt STRATA_* setting does not pass unnoticed: the broker still starts (the
    variable may belong to another program) but logs a WARN naming it, while the variables the
    strata tools themselves use (STRATA_BIN, STRATA_BOOTSTRAP, STRATA_TEST_*) and real settings
    log no warning."""
    monkeypatch.setenv("STRATA_LOG_RETENTON_MS", "1000")
    monkeypatch.setenv("STRATA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("STRATA_BIN", str(strata_bin()))  # the harness starts this binary
    monkeypatch.setenv("STRATA_TEST_SOMETHING", "1")
    monkeypatch.setenv("STRATA_NUM_PARTITIONS", "2")
    b = broker_factory()
    b.stop()
    log = ANSI.sub("", b.log_path.read_text(errors="replace"))
    warnings = [x for x in log.splitlines() if re.search(r"^\S+\s+WARN\b", x)]
    assert len(warnings) == 1, "exactly one warning, for the misspelt setting:\n" + "\n".join(warnings)
    assert "STRATA_LOG_RETENTON_MS" in warnings[0]
