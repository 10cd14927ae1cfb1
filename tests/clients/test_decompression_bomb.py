"""Decompression bombs in a real produce: a compressed batch whose records inflate past the
broker's bound (RECORDS_DECOMPRESSED_BYTES_MAX, 256 MiB) is refused while it inflates, with
INVALID_RECORD, and the broker's memory does not grow; honest compressed batches still work."""

from __future__ import annotations

import struct
import zlib

import pytest
import zstandard

import kproto
from common import create_topic, read_all

ERR_INVALID_RECORD = 87
CODEC_GZIP = 1
CODEC_ZSTD = 4
# Above the broker's 256 MiB bound; a few hundred KiB once compressed.
BOMB_BYTES = 512 << 20
CHUNK = 1 << 20
# What the broker may grow by while refusing bombs: far less than one bomb (or the bound).
GROWTH_MAX_BYTES = 64 << 20


def one_record_prefix(value_len: int) -> bytes:
    """Kafka's DefaultRecord up to its value: attributes, deltas, null key, value length;
    the value bytes and a zero header count follow."""
    body_len = 1 + 1 + 1 + 1 + len(kproto.varint(value_len)) + value_len + 1
    return (kproto.varint(body_len) + b"\x00" + kproto.varint(0) + kproto.varint(0)
            + kproto.varint(-1) + kproto.varint(value_len))


def compressed_batch(codec: int, compressed_records: bytes, ts: int = 1_700_000_000_000) -> bytes:
    """A v2 batch of one record whose records section is `compressed_records`, CRC correct."""
    after_crc = struct.pack(">hiqqqhii", codec, 0, ts, ts, -1, -1, -1, 1) + compressed_records
    tail = struct.pack(">ibI", 0, 2, kproto.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(tail)) + tail


def compress_zeros(codec: int, value_len: int) -> bytes:
    """One record of `value_len` zero bytes, compressed as a stream (never held whole)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31) if codec == CODEC_GZIP else \
        zstandard.ZstdCompressor(level=3).compressobj()
    out = [c.compress(one_record_prefix(value_len))]
    zeros = bytes(CHUNK)
    for _ in range(value_len // CHUNK):
        out.append(c.compress(zeros))
    out.append(c.compress(bytes(value_len % CHUNK) + b"\x00"))  # the rest, then 0 headers
    out.append(c.flush())
    return b"".join(out)


def compress_value(codec: int, value: bytes) -> bytes:
    raw = one_record_prefix(len(value)) + value + b"\x00"
    if codec == CODEC_GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(raw) + c.flush()
    return zstandard.ZstdCompressor().compress(raw)


def produce_v7(bootstrap: str, topic: str, batch: bytes) -> tuple[int, int]:
    """Produce v7 (zstd needs v7+); returns (error_code, base_offset) of partition 0."""
    with kproto.connect(bootstrap, 60) as sock:
        sock.sendall(kproto.request(kproto.API_PRODUCE, 7, 7, kproto.produce_v3_body(
            topic, 0, batch, acks=-1, timeout_ms=30_000)))
        corr, body = kproto.recv_response(sock)
    assert corr == 7, corr
    pos = 4  # one topic
    (nlen,) = struct.unpack_from(">h", body, pos)
    pos += 2 + nlen + 4  # name, one partition
    _part, err, base = struct.unpack_from(">ihq", body, pos)
    return err, base


def high_water_mark_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.timeout(300)
def test_zip_bombs_are_refused_while_inflating_and_memory_stays_flat(broker):
    """Proves a gzip and a zstd batch of a few hundred KiB that inflate to 512 MiB each get
    INVALID_RECORD (87) and are not stored, the broker's peak RSS grows by less than 64 MiB
    over the two, and honest gzip and zstd batches before and after are stored and read back."""
    if broker.proc is None:
        pytest.skip("needs the broker's process to read its memory")
    create_topic(broker.bootstrap, "bombs", 1)
    assert produce_v7(broker.bootstrap, "bombs", compressed_batch(
        CODEC_GZIP, compress_value(CODEC_GZIP, b"honest-gzip"))) == (0, 0)
    bombs = {codec: compressed_batch(codec, compress_zeros(codec, BOMB_BYTES))
             for codec in (CODEC_GZIP, CODEC_ZSTD)}
    for codec, batch in bombs.items():
        assert len(batch) < 1_000_000, (codec, len(batch))  # under max.message.bytes
    before = high_water_mark_kib(broker.proc.pid)
    for codec, batch in bombs.items():
        err, _ = produce_v7(broker.bootstrap, "bombs", batch)
        assert err == ERR_INVALID_RECORD, (codec, err)
    grown = (high_water_mark_kib(broker.proc.pid) - before) * 1024
    assert grown < GROWTH_MAX_BYTES, f"peak RSS grew by {grown >> 20} MiB refusing the bombs"
    assert produce_v7(broker.bootstrap, "bombs", compressed_batch(
        CODEC_ZSTD, compress_value(CODEC_ZSTD, b"honest-zstd"))) == (0, 1)
    stored = read_all(broker.bootstrap, "bombs", 1)
    assert [m.value() for m in stored[0]] == [b"honest-gzip", b"honest-zstd"]
    assert broker.alive()
