"""Reads one replica's copy of a partition through the Kafka protocol: the fallback for the
replica comparison when `strata log dump` is not available (STRATA_CLUSTER_REPLICA_READ=fetch).

A Fetch v4 sent to a broker with replica_id = -2 is Kafka's "debugging consumer": the broker
serves it from its local replica even when it is a follower, and (being no real replica id) it
does not move any follower's LEO or the ISR. As a consumer, it reads up to that replica's high
watermark (Kafka's FetchIsolation for any negative replica id), which a follower learns one
fetch after the leader: the caller says where to stop (the final HW, taken from the leader) and
retries a short read. Only uncompressed
record batches v2 are decoded (the workload sends compression.type=none).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
import kproto  # noqa: E402

API_FETCH = 1
DEBUGGING_REPLICA_ID = -2
MAX_BYTES = 4 * 1024 * 1024


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint (Kafka record fields); returns (value, next position)."""
    shift = raw = 0
    while True:
        if pos >= len(data):
            raise kproto.ProtocolError("truncated varint")
        b = data[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise kproto.ProtocolError("varint too long")


def decode_batches(data: bytes) -> list[tuple[int, int, str | None]]:
    """[(offset, leader_epoch, value as str)] of every data record; a partial last batch (the
    fetch size cut it) is ignored."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base_offset, batch_len, epoch, magic = struct.unpack(">qiib", data[pos:pos + 17])
        end = pos + 12 + batch_len
        if end > len(data):
            break
        if magic != 2:
            raise kproto.ProtocolError(f"batch at {base_offset}: magic {magic}")
        (attributes,) = struct.unpack(">h", data[pos + 21:pos + 23])
        (count,) = struct.unpack(">i", data[pos + 57:pos + 61])
        if attributes & 0x07:
            raise kproto.ProtocolError(f"batch at {base_offset} is compressed; only none is decoded")
        if attributes & 0x20:  # control batch (transaction markers): no data records
            pos = end
            continue
        rpos = pos + 61
        for _ in range(count):
            length, rpos = read_varint(data, rpos)
            body_end = rpos + length
            rpos += 1  # attributes
            _, rpos = read_varint(data, rpos)  # timestamp delta
            offset_delta, rpos = read_varint(data, rpos)
            key_len, rpos = read_varint(data, rpos)
            rpos += max(key_len, 0)
            value_len, rpos = read_varint(data, rpos)
            value = data[rpos:rpos + value_len].decode() if value_len >= 0 else None
            out.append((base_offset + offset_delta, epoch, value))
            rpos = body_end
        pos = end
    return out


def fetch_body(topic: str, partition: int, offset: int) -> bytes:
    return (struct.pack(">iiiib", DEBUGGING_REPLICA_ID, 100, 1, MAX_BYTES, 0)
            + struct.pack(">i", 1) + kproto.kstring(topic)
            + struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, MAX_BYTES))


def parse_fetch_v4(body: bytes) -> tuple[int, int, bytes]:
    """(error_code, high_watermark, records) of the single partition asked for."""
    pos = 4  # throttle_time_ms
    (topics,) = struct.unpack(">i", body[pos:pos + 4])
    pos += 4
    if topics != 1:
        raise kproto.ProtocolError(f"fetch response with {topics} topics")
    (name_len,) = struct.unpack(">h", body[pos:pos + 2])
    pos += 2 + name_len
    (parts,) = struct.unpack(">i", body[pos:pos + 4])
    pos += 4
    if parts != 1:
        raise kproto.ProtocolError(f"fetch response with {parts} partitions")
    _, error_code, hw, _lso = struct.unpack(">ihqq", body[pos:pos + 22])
    pos += 22
    (aborted,) = struct.unpack(">i", body[pos:pos + 4])
    pos += 4 + max(aborted, 0) * 16
    (rec_len,) = struct.unpack(">i", body[pos:pos + 4])
    pos += 4
    return error_code, hw, body[pos:pos + max(rec_len, 0)]


def read_replica(address: str, topic: str, partition: int, end_offset: int,
                 timeout_s: float = 10.0) -> list[tuple[int, int, str | None]]:
    """This broker's copy of topic-partition from offset 0 up to end_offset (exclusive)."""
    out: list[tuple[int, int, str | None]] = []
    offset = 0
    with kproto.connect(address, timeout_s) as sock:
        corr = 0
        while offset < end_offset:
            corr += 1
            sock.sendall(kproto.request(API_FETCH, 4, corr, fetch_body(topic, partition, offset)))
            got_corr, body = kproto.recv_response(sock)
            if got_corr != corr:
                raise kproto.ProtocolError(f"correlation id {got_corr} != {corr}")
            error_code, _hw, records = parse_fetch_v4(body)
            if error_code != 0:
                raise kproto.ProtocolError(f"{address} {topic}-{partition} offset {offset}: error {error_code}")
            batch = [r for r in decode_batches(records) if r[0] >= offset]
            if not batch:
                break  # this replica has nothing more: the caller sees it as incomplete
            out += [r for r in batch if r[0] < end_offset]
            offset = batch[-1][0] + 1
    return out
