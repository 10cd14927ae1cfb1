"""kafkajs 2.2.4 (Node) producer/admin; the log is read back with librdkafka (kafkajs has no
group-less consumer; its group consumer is tested in test_groups.py)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from common import Sent, create_topic, read_and_verify

JS_DIR = Path(__file__).resolve().parent / "js"
PARTITIONS = 3


def test_kafkajs_produce_then_read_back(broker, tmp_path):
    """Proves kafkajs produce (acks=all, none+gzip, keys/nulls/headers/1 MiB, single and batched
    sends) gets errorCode 0, contiguous offsets and matching watermarks (asserted in node), and
    that every acknowledged record reads back byte-exact at its offset (asserted here)."""
    if shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        if os.environ.get("CI"):
            pytest.fail("node or kafkajs missing in CI (npm ci in tests/clients/js)")
        pytest.skip("node or tests/clients/js/node_modules/kafkajs missing (run npm ci there)")
    topic = "kafkajs-roundtrip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    out = tmp_path / "kafkajs-sent.json"
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC=topic, PARTITIONS=str(PARTITIONS), OUT=str(out))
    r = subprocess.run(["node", "--test", "--test-reporter=spec", "produce.test.mjs"], cwd=JS_DIR, env=env,
                       capture_output=True, timeout=180)
    assert r.returncode == 0, f"node test failed:\n{r.stdout.decode()}\n{r.stderr.decode()}"

    def unb64(x):
        return None if x is None else base64.b64decode(x)

    sent = [Sent(s["index"], unb64(s["key"]), unb64(s["value"]), [(k, unb64(v)) for k, v in s["headers"]],
                 s["partition"], s["offset"]) for s in json.loads(out.read_text())]
    assert len(sent) > 40
    read_and_verify(broker.bootstrap, topic, sent, PARTITIONS)
