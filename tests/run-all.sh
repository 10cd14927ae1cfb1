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

# The cluster suite (tests/cluster): harness/checker/netns self-tests, the replication smoke
# test, and — with real `strata serve` processes under load from acks=all producers and a
# consumer — kill -9 of the leader (repeatedly), SIGSTOP of the leader, a network partition
# isolating the leader (netns + iptables/nft), kill -9 of the active controller, consumer-group
# coordinator failover, scale-out with partition reassignment and preferred election, and the
# dedicated-controller layout; each fault test ends in the Jepsen-style checker.
echo "=== pytest tests/cluster ==="
"$python" -m pytest -v tests/cluster "$@" || status=1

exit "$status"
