"""kcat (Debian's kcat 1.7.1 on librdkafka 2.0.2, an older librdkafka than confluent-kafka's)."""

from __future__ import annotations

import json
import random
import shutil
import string
import subprocess

import pytest

from common import BIG_VALUE_LEN, Sent, create_topic, read_and_verify

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PARTITIONS = 3
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)")


def kcat_produce(bootstrap: str, topic: str, partition: int, codec: str, stdin: bytes = b"",
                 extra: list[str] = (), files: list[str] = ()) -> None:
    cmd = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-X", "acks=all",
           "-X", "message.max.bytes=1048588", "-z", codec, *extra, *files]
    r = subprocess.run(cmd, input=stdin, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}: {r.stderr.decode(errors='replace')}"
    assert b"Delivery failed" not in r.stderr and b"ERROR" not in r.stderr, r.stderr.decode(errors="replace")


def test_kcat_produce_and_consume_all_codecs(broker, tmp_path):
    """Proves kcat (librdkafka 2.0.2) produce with acks=all, every codec, keys, NULL keys,
    tombstones, empty values, headers and a ~1 MiB value, and kcat's own consume (-J, from
    beginning) plus confluent-kafka's read return exactly that, in order, offsets 0..n-1."""
    topic = "kcat-roundtrip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent: list[Sent] = []

    def expect(key, value, headers, p):
        sent.append(Sent(len(sent), key, value, headers, p))

    for codec in CODECS:
        for p in range(PARTITIONS):
            # Keyed lines, every record carrying the same two headers (kcat -H applies to all).
            lines = [f"key-{codec}-{p}-{i}\tvalue {codec} p{p} #{i}" for i in range(5)]
            kcat_produce(broker.bootstrap, topic, p, codec, ("\n".join(lines) + "\n").encode(),
                         ["-K", "\t", "-H", "h1=x", "-H", "h2=with=equals"])
            for line in lines:
                k, v = line.split("\t")
                expect(k.encode(), v.encode(), [("h1", b"x"), ("h2", b"with=equals")], p)
            # -Z: an empty key is sent as NULL key, an empty value as NULL value (tombstone).
            kcat_produce(broker.bootstrap, topic, p, codec, f"\tnull key {codec}\ntomb-{codec}\t\n".encode(),
                         ["-K", "\t", "-Z"])
            expect(None, f"null key {codec}".encode(), [], p)
            expect(f"tomb-{codec}".encode(), None, [], p)
            # Without -Z an empty value stays empty (not NULL).
            kcat_produce(broker.bootstrap, topic, p, codec, f"empty-{codec}\t\n".encode(), ["-K", "\t"])
            expect(f"empty-{codec}".encode(), b"", [], p)

    big = "".join(random.choice(string.ascii_letters) for _ in range(BIG_VALUE_LEN)).encode()
    big_file = tmp_path / "big.bin"
    big_file.write_bytes(big)
    kcat_produce(broker.bootstrap, topic, 1, "none", b"", ["-k", "big"], [str(big_file)])
    expect(b"big", big, [], 1)

    read_and_verify(broker.bootstrap, topic, sent, PARTITIONS)

    # kcat's own consumer, per partition, from the beginning, exiting at the end.
    for p in range(PARTITIONS):
        want = [s for s in sent if s.partition == p]
        r = subprocess.run(
            ["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", str(p), "-o", "beginning",
             "-e", "-J", "-c", str(len(want)), "-X", "fetch.message.max.bytes=4194304"],
            capture_output=True, timeout=TIMEOUT_S)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        got = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
        assert [g["offset"] for g in got] == list(range(len(want))), f"partition {p}: offsets"
        for s, g in zip(want, got):
            assert g["key"] == (None if s.key is None else s.key.decode()), f"p{p}@{g['offset']} key"
            assert g["payload"] == (None if s.value is None else s.value.decode()), f"p{p}@{g['offset']} value"
            flat = [x for k, v in s.headers for x in (k, v.decode())]
            assert (g.get("headers") or []) == flat, f"p{p}@{g['offset']} headers {g.get('headers')}"
