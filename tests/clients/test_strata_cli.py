"""The `strata` client-side CLI (topic create / produce / consume) against the broker under test."""

from __future__ import annotations

import json
import subprocess

from confluent_kafka.admin import AdminClient

from common import read_all
from harness import strata_bin

TIMEOUT_S = 60


def strata(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(strata_bin()), *args], input=stdin, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, f"strata {' '.join(args)} exited {r.returncode}:\n{r.stderr.decode(errors='replace')}"
    return r


def test_cli_create_produce_consume(broker):
    """Proves `strata topic create`, `strata produce` (stdin lines) and `strata consume --format
    json` interoperate with the broker and with librdkafka: the topic has the asked partitions,
    librdkafka reads exactly the produced lines with contiguous offsets, and the CLI consumer
    prints one JSON object per record carrying every line."""
    topic = "cli-topic"
    strata("topic", "create", topic, "--partitions", "3", "--bootstrap", broker.bootstrap)
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=10)
    assert len(md.topics[topic].partitions) == 3

    lines = [f"cli line {i}" for i in range(50)]
    strata("produce", "--topic", topic, "--bootstrap", broker.bootstrap, stdin=("\n".join(lines) + "\n").encode())

    consumed = read_all(broker.bootstrap, topic, 3)
    values = []
    for p, msgs in consumed.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs))), f"partition {p} offsets"
        values += [m.value().decode() for m in msgs]
    assert sorted(values) == sorted(lines)

    r = strata("consume", "--topic", topic, "--from", "earliest", "--format", "json", "--count", str(len(lines)),
               "--bootstrap", broker.bootstrap)
    objs = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    assert len(objs) == len(lines), f"printed {len(objs)} JSON records, expected {len(lines)}"
    seen = []
    for o in objs:
        assert isinstance(o, dict), o
        v = o.get("value")
        seen.append(v if v in lines else next((x for x in o.values() if x in lines), None))
    assert sorted(x for x in seen if x is not None) == sorted(lines), "consume output misses produced lines"
