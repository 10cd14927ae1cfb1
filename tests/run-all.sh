#!/usr/bin/env bash
# Runs the whole test suite: cargo's tests (unit, property, and tests/*.rs integration, which
# include the rskafka client against the real binary), then the Python-driven client and
# broker-fault suite in tests/clients (confluent-kafka, kafka-python, kcat, kafkajs, Java,
# crash, power loss, torn tail, bad input), then the cluster suite in tests/cluster. Every part
# always runs; the exit code is non-zero if any failed. Expects .ci/run's setup (.venv,
# node_modules, Java jars, kcat, iproute2, iptables/nftables).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-.venv/bin/python}"
status=0

echo "=== cargo test --release --no-fail-fast ==="
cargo test --release --no-fail-fast || status=1

# The client tests drive the release binary cargo just built (STRATA_BIN overrides).
export STRATA_BIN="${STRATA_BIN:-$PWD/target/release/strata}"
echo "=== pytest tests/clients (broker: ${STRATA_TEST_BROKER:-strata}) ==="
"$python" -m pytest -v tests/clients "$@" || status=1

# The 3-node cluster suite: harness/checker/netns self-tests and the replication smoke test
# (RF 3, min ISR 2: leader-only produce, ISR shrink on a dead follower, NOT_ENOUGH_REPLICAS,
# nothing acknowledged with one replica left, recovery after restarts, every acked record
# read back). The fault tests under load (`-m faults`: kill -9, SIGSTOP, network partitions,
# controller failover, each with the Jepsen-style checker) do not pass yet — issue 5 is open —
# so they are run by `tests/cluster/run-faults.sh`, not here.
echo "=== pytest tests/cluster (not faults) ==="
"$python" -m pytest -v tests/cluster -m "not faults" "$@" || status=1

exit "$status"
