"""Self-tests of the hand-rolled wire/segment code the broker tests rely on (no broker needed)."""

from __future__ import annotations

import struct

import kproto


def segment(n: int, padding: int = 4096) -> bytes:
    """n one-record batches at base offsets 0..n-1 followed by preallocated zeros."""
    out = bytearray()
    for i in range(n):
        batch = bytearray(kproto.record_batch([(b"k", f"v{i}".encode())]))
        struct.pack_into(">q", batch, 0, i)  # baseOffset is outside the CRC
        out += batch
    return bytes(out) + b"\x00" * padding


def test_crc32c_known_vector():
    """Proves our CRC-32C is Castagnoli (the check value of "123456789" is 0xE3069283)."""
    assert kproto.crc32c(b"123456789") == 0xE3069283


def test_scan_batches_finds_logical_end_and_stops_at_damage():
    """Proves scan_batches stops at preallocated zeros, a cut batch, a flipped byte and a
    zeroed batch — the same rule the torn-tail test expects the broker's recovery to apply."""
    seg = segment(5)
    batches = kproto.scan_batches(seg)
    assert [b[2] for b in batches] == [0, 1, 2, 3, 4]
    pos, total, _ = batches[-1]
    assert kproto.scan_batches(seg[:pos + total // 2]) == batches[:-1]
    flipped = bytearray(seg)
    flipped[pos + total - 3] ^= 0x40
    assert kproto.scan_batches(bytes(flipped)) == batches[:-1]
    zeroed = bytearray(seg)
    zeroed[pos + 12:pos + total] = b"\x00" * (total - 12)
    assert kproto.scan_batches(bytes(zeroed)) == batches[:-1]
