"""Test-only protobuf byte builders, written independently of the codec under test."""

from __future__ import annotations


def varint(n: int) -> bytes:
    """``n`` as a base-128 varint: a negative ``n`` in 64-bit two's complement (as protobuf
    writes int32/int64), a non-negative one as given, even past 64 bits (to build the
    over-long varints a decoder must reject)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    """A field's tag: ``(number << 3) | wire_type`` as a varint."""
    return varint((number << 3) | wire_type)
