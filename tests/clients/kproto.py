"""A tiny hand-rolled Kafka wire codec for tests that must send exactly the bytes they choose.

Only what the tests need: request framing, ApiVersions v0, Produce v3 (with record batch v2
and CRC-32C), Metadata v1 framing, and a parser for record batches in a segment file.
"""

from __future__ import annotations

import socket
import struct

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_API_VERSIONS = 18

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_UNSUPPORTED_VERSION = 35


class ProtocolError(Exception):
    pass


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def kstring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def request(api_key: int, api_version: int, correlation_id: int, body: bytes,
            client_id: str = "strata-tests") -> bytes:
    """A framed request with header v1 (non-flexible); flexible versions are not needed here."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + kstring(client_id)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ProtocolError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_response(sock: socket.socket) -> tuple[int, bytes]:
    """Returns (correlation_id, body) of one response frame (response header v0)."""
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    if size < 4 or size > 64 * 1024 * 1024:
        raise ProtocolError(f"absurd response size {size}")
    frame = recv_exact(sock, size)
    (corr,) = struct.unpack(">i", frame[:4])
    return corr, frame[4:]


def connect(bootstrap: str, timeout_s: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock.settimeout(timeout_s)
    return sock


def call(bootstrap: str, req, timeout_s: float = 10.0):
    """One request/response round trip of any API at any version, encoded and decoded by
    kafka-python's generated message classes (`req` is e.g. `ListOffsetsRequest[4](...)`),
    for tests that need a field a client library does not expose."""
    from kafka.protocol.api_header import ResponseClassRegistry  # noqa: F401 (registers)
    req.with_header(correlation_id=42, client_id="strata-tests")
    response_cls = type(req).__name__.rsplit("Request", 1)[0] + "Response"
    module = __import__(type(req).__module__, fromlist=[response_cls])
    resp = getattr(module, response_cls)
    with connect(bootstrap, timeout_s) as sock:
        sock.sendall(req.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        frame = recv_exact(sock, size)
    return resp.decode(frame, version=req.API_VERSION, header=True)


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    (error_code, count) = struct.unpack(">hi", body[:6])
    apis = {}
    pos = 6
    for _ in range(max(count, 0)):
        key, lo, hi = struct.unpack(">hhh", body[pos:pos + 6])
        apis[key] = (lo, hi)
        pos += 6
    return error_code, apis


def api_versions(bootstrap: str, timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    """One ApiVersions v0 round trip on a fresh connection; raises unless error_code is 0."""
    with connect(bootstrap, timeout_s) as sock:
        sock.sendall(request(API_API_VERSIONS, 0, 7, b""))
        corr, body = recv_response(sock)
    if corr != 7:
        raise ProtocolError(f"correlation id {corr} != 7")
    error_code, apis = parse_api_versions_v0(body)
    if error_code != ERR_NONE:
        raise ProtocolError(f"ApiVersions error {error_code}")
    return apis


def _read_string(body: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = struct.unpack(">h", body[pos:pos + 2])
    pos += 2
    if n < 0:
        return None, pos
    return body[pos:pos + n].decode(), pos + n


def _read_int32s(body: bytes, pos: int) -> tuple[list[int], int]:
    (n,) = struct.unpack(">i", body[pos:pos + 4])
    pos += 4
    values = list(struct.unpack(f">{max(n, 0)}i", body[pos:pos + 4 * max(n, 0)]))
    return values, pos + 4 * max(n, 0)


def metadata_v1(address: str, topic: str, timeout_s: float = 5.0) -> dict:
    """This one broker's own view of `topic` (Metadata v1 on a fresh connection, so no client
    routes the request elsewhere): {"controller": id, "brokers": [ids], "error": code,
    "partitions": {index: (error, leader, replicas, isr)}}."""
    body = struct.pack(">i", 1) + kstring(topic)
    with connect(address, timeout_s) as sock:
        sock.sendall(request(API_METADATA, 1, 11, body))
        corr, resp = recv_response(sock)
    if corr != 11:
        raise ProtocolError(f"correlation id {corr} != 11")
    pos = 0
    (n_brokers,) = struct.unpack(">i", resp[pos:pos + 4])
    pos += 4
    brokers = []
    for _ in range(n_brokers):
        (node_id,) = struct.unpack(">i", resp[pos:pos + 4])
        _host, pos = _read_string(resp, pos + 4)
        pos += 4  # port
        _rack, pos = _read_string(resp, pos)
        brokers.append(node_id)
    (controller,) = struct.unpack(">i", resp[pos:pos + 4])
    pos += 4
    (n_topics,) = struct.unpack(">i", resp[pos:pos + 4])
    pos += 4
    view = {"controller": controller, "brokers": brokers, "error": None, "partitions": {}}
    for _ in range(n_topics):
        (error,) = struct.unpack(">h", resp[pos:pos + 2])
        name, pos = _read_string(resp, pos + 2)
        pos += 1  # is_internal
        (n_parts,) = struct.unpack(">i", resp[pos:pos + 4])
        pos += 4
        parts = {}
        for _ in range(n_parts):
            p_error, index, leader = struct.unpack(">hii", resp[pos:pos + 10])
            replicas, pos = _read_int32s(resp, pos + 10)
            isr, pos = _read_int32s(resp, pos)
            parts[index] = (p_error, leader, replicas, isr)
        if name == topic:
            view["error"] = error
            view["partitions"] = parts
    return view


# ---- record batch v2 -------------------------------------------------------------------------

def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def uvarint(n: int) -> bytes:
    """An unsigned varint: the lengths and counts of flexible versions (compact strings,
    arrays, tagged fields)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(b: bytes, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos`."""
    n, shift = 0, 0
    while True:
        byte = b[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n, pos


def compact_string(s: str) -> bytes:
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def _nullable(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def record_batch(records: list[tuple[bytes | None, bytes | None]], timestamp_ms: int = 1_700_000_000_000,
                 corrupt_crc: bool = False, timestamp_deltas: list[int] | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 attributes: int = 0) -> bytes:
    """An uncompressed v2 batch of (key, value) records with a correct (or deliberately wrong)
    CRC; record i is stamped `timestamp_ms + timestamp_deltas[i]` (all `timestamp_ms` by default).
    Producer fields and attributes (0x10 transactional, 0x20 control) as given."""
    deltas = timestamp_deltas or [0] * len(records)
    body = bytearray()
    for i, (key, value) in enumerate(records):
        rec = b"\x00" + varint(deltas[i]) + varint(i) + _nullable(key) + _nullable(value) + varint(0)
        body += varint(len(rec)) + rec
    after_crc = struct.pack(
        ">hiqqqhii", attributes, len(records) - 1, timestamp_ms, timestamp_ms + max(deltas),
        producer_id, producer_epoch, base_sequence, len(records)
    ) + bytes(body)
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    tail = struct.pack(">ibI", 0, 2, crc) + after_crc  # partitionLeaderEpoch, magic, crc
    return struct.pack(">qi", 0, len(tail)) + tail


def produce_v3_body(topic: str, partition: int, batch: bytes, acks: int = -1, timeout_ms: int = 10_000) -> bytes:
    return (
        kstring(None) + struct.pack(">hii", acks, timeout_ms, 1) + kstring(topic)
        + struct.pack(">ii", 1, partition) + struct.pack(">i", len(batch)) + batch
    )


def parse_produce_v3(body: bytes) -> list[tuple[str, int, int, int]]:
    """Returns [(topic, partition, error_code, base_offset)]."""
    out = []
    pos = 0
    (ntopics,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(ntopics):
        (nlen,) = struct.unpack_from(">h", body, pos)
        pos += 2
        name = body[pos:pos + nlen].decode()
        pos += nlen
        (nparts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(nparts):
            part, err, base, _log_append = struct.unpack_from(">ihqq", body, pos)
            pos += 22
            out.append((name, part, err, base))
    return out


def produce_raw(bootstrap: str, topic: str, partition: int, batch: bytes, timeout_s: float = 10.0):
    with connect(bootstrap, timeout_s) as sock:
        sock.sendall(request(API_PRODUCE, 3, 99, produce_v3_body(topic, partition, batch)))
        corr, body = recv_response(sock)
    assert corr == 99, corr
    return parse_produce_v3(body)


def fetch_v4_body(topic: str, partition: int, offset: int, max_bytes: int, partition_max_bytes: int,
                  max_wait_ms: int = 0, min_bytes: int = 0) -> bytes:
    """A consumer's Fetch v4 for one partition (read_uncommitted)."""
    return (
        struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
        + struct.pack(">i", 1) + kstring(topic)
        + struct.pack(">iiqi", 1, partition, offset, partition_max_bytes)
    )


def parse_fetch_v4(body: bytes) -> list[tuple[str, int, int, int, bytes]]:
    """Returns [(topic, partition, error_code, high_watermark, record bytes)]."""
    out = []
    pos = 4  # throttle_time_ms
    (ntopics,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(ntopics):
        name, pos = _read_string(body, pos)
        (nparts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(nparts):
            part, err, hw, _lso = struct.unpack_from(">ihqq", body, pos)
            pos += 22
            (naborted,) = struct.unpack_from(">i", body, pos)
            pos += 4 + 16 * max(naborted, 0)
            (nrecords,) = struct.unpack_from(">i", body, pos)
            pos += 4
            records = body[pos:pos + max(nrecords, 0)]
            pos += max(nrecords, 0)
            out.append((name, part, err, hw, records))
    return out


# ---- segment files ---------------------------------------------------------------------------

BATCH_HEADER_LEN = 61  # baseOffset .. recordCount


def scan_batches(data: bytes) -> list[tuple[int, int, int]]:
    """Valid v2 batches from the start of a .log segment: [(file_pos, total_len, base_offset)].

    Stops at the first position that does not hold a complete batch with magic 2 and a good
    CRC-32C: that is the logical end of a (possibly preallocated) segment.
    """
    out = []
    pos = 0
    while pos + 12 <= len(data):
        base_offset, batch_len = struct.unpack_from(">qi", data, pos)
        total = 12 + batch_len
        if batch_len < BATCH_HEADER_LEN - 12 or pos + total > len(data):
            break
        magic = data[pos + 16]
        (crc,) = struct.unpack_from(">I", data, pos + 17)
        if magic != 2 or crc32c(data[pos + 21:pos + total]) != crc:
            break
        out.append((pos, total, base_offset))
        pos += total
    return out


API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36


def sasl_plain_login(sock, user: str, password: str) -> None:
    """Authenticates a raw connection (plain or TLS) with SaslHandshake v1 + SaslAuthenticate
    v1 (PLAIN); fails the caller's test if either step answers an error."""
    sock.sendall(request(API_SASL_HANDSHAKE, 1, 1, kstring("PLAIN")))
    _, body = recv_response(sock)
    assert struct.unpack(">h", body[:2])[0] == 0, body
    token = b"\0" + user.encode() + b"\0" + password.encode()
    sock.sendall(request(API_SASL_AUTHENTICATE, 1, 2, struct.pack(">i", len(token)) + token))
    _, body = recv_response(sock)
    assert struct.unpack(">h", body[:2])[0] == 0, body
