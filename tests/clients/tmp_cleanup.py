"""Frees the disk a passed test used: its tmp_path (broker data directories, logs) is removed
once every fixture of the test has been torn down, so brokers are stopped first.

Why: pytest keeps every test's tmp_path until the session ends, and the suites write tens of
GB over a run (floods, benches, crash and power-loss images). On a CI machine with little free
space the disk filled part-way through the cluster suite and every later test failed for that
reason alone (the broker refuses produce below storage_min_free_bytes, then pytest itself could
not write). A failed test keeps its directory for the post-mortem; STRATA_KEEP_TMP=1 keeps all.

Both suites' conftests import `free_tmp_path_of_passed_test` (an autouse fixture) and call
`remember_report` from their pytest_runtest_makereport hook.
"""

from __future__ import annotations

import os
import shutil

import pytest


def remember_report(item, report) -> None:
    """Records each phase's report on the item, for the fixture's teardown to read."""
    setattr(item, f"strata_report_{report.when}", report)


def _passed(item) -> bool:
    setup = getattr(item, "strata_report_setup", None)
    call = getattr(item, "strata_report_call", None)
    if setup is None or setup.failed:
        return False
    # A skipped test has no call report; nothing it left is worth keeping.
    return call is None or not call.failed


@pytest.fixture(autouse=True)
def free_tmp_path_of_passed_test(request):
    # Autouse fixtures are set up before the test's own fixtures and so torn down after them:
    # the brokers and clusters under tmp_path are stopped by the time this runs.
    yield
    if os.environ.get("STRATA_KEEP_TMP") == "1" or not _passed(request.node):
        return
    tmp = request.node.funcargs.get("tmp_path")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
