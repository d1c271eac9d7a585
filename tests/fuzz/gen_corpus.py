#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# Copyright (c) 2026 The threadwire authors
"""Seed corpus of the TCP and route wire-format fuzzers, and known answers
for tests/unit/test_tcp_proto.c and tests/unit/test_route_proto.c.

The messages are built here from the formats in
src/transports/tcp/tw_tcp_proto.h and src/routing/tw_route_proto.h, not
with the C packers, so the seeds and the unit tests' constants are an
independent reading of the formats. The SipHash-2-4 below is written from
the paper, the CRC32C from its polynomial; both reproduce published check
values (checked at start).

  tests/fuzz/gen_corpus.py            rewrite tests/fuzz/corpus/{tcp_hs,tcp_frame,tcp_addr,route_frame}/
  tests/fuzz/gen_corpus.py --vectors  print the C tables the unit tests hold
"""
import os
import random
import struct
import sys

M64 = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def siphash24(key, msg):
    k0, k1 = struct.unpack("<QQ", key)
    v = [0x736F6D6570736575 ^ k0, 0x646F72616E646F6D ^ k1,
         0x6C7967656E657261 ^ k0, 0x7465646279746573 ^ k1]

    def rnd():
        v[0] = (v[0] + v[1]) & M64; v[1] = _rotl(v[1], 13); v[1] ^= v[0]
        v[0] = _rotl(v[0], 32)
        v[2] = (v[2] + v[3]) & M64; v[3] = _rotl(v[3], 16); v[3] ^= v[2]
        v[0] = (v[0] + v[3]) & M64; v[3] = _rotl(v[3], 21); v[3] ^= v[0]
        v[2] = (v[2] + v[1]) & M64; v[1] = _rotl(v[1], 17); v[1] ^= v[2]
        v[2] = _rotl(v[2], 32)

    tail = len(msg) % 8
    blocks = [struct.unpack_from("<Q", msg, i)[0] for i in range(0, len(msg) - tail, 8)]
    last = int.from_bytes(msg[len(msg) - tail:], "little") | ((len(msg) & 0xFF) << 56)
    for m in blocks + [last]:
        v[3] ^= m
        rnd()
        rnd()
        v[0] ^= m
    v[2] ^= 0xFF
    for _ in range(4):
        rnd()
    return v[0] ^ v[1] ^ v[2] ^ v[3]


KEY = bytes(range(16))
# Spot values from the reference implementation's vectors.h (key 00..0f,
# message 00..n-1): n = 0, 1, 8, 15, 63.
assert siphash24(KEY, b"") == 0x726FDB47DD0E0E31
assert siphash24(KEY, bytes(range(1))) == 0x74F839C593DC67FD
assert siphash24(KEY, bytes(range(8))) == 0x93F5F5799A932462
assert siphash24(KEY, bytes(range(15))) == 0xA129CA6149BE45E5
assert siphash24(KEY, bytes(range(63))) == 0x958A324CEB064572

MAGIC, VERSION = 0x43545754, 2
HELLO, WELCOME, PROVE = 1, 2, 3
AM, FIN, PING, RTS, CTS, DATA, DONE = 1, 2, 3, 4, 5, 6, 7


def proof(key, role, their_nonce, my_nonce, acceptor_rank, connector_rank):
    m = role.encode() + their_nonce + my_nonce + struct.pack("<II", acceptor_rank, connector_rank)
    return siphash24(key, m)


def hs(typ, rank, size, nonce, prf=0):
    # magic u32 | version u16 | type u8 | reserved u8 | rank u32 | size u32 |
    # nonce 16 | proof u64 | reserved 8
    return struct.pack("<IHBBII16sQ8x", MAGIC, VERSION, typ, 0, rank, size, nonce, prf)


def frame(typ, am_id, hdr_len, length, version=VERSION, flags=0):
    return struct.pack("<BBBBIQ", version, typ, am_id, flags, hdr_len, length)


NONCE_C = bytes(range(0x10, 0x20))
NONCE_A = bytes(range(0xA0, 0xB0))
# One handshake between acceptor rank 3 and connector rank 5 of a 2^3 job.
HS_A_RANK, HS_C_RANK, HS_SIZE = 3, 5, 8
PROOF_A = proof(KEY, "A", NONCE_C, NONCE_A, HS_A_RANK, HS_C_RANK)
PROOF_C = proof(KEY, "C", NONCE_A, NONCE_C, HS_A_RANK, HS_C_RANK)


def hs_seeds():
    hello = hs(HELLO, HS_C_RANK, HS_SIZE, NONCE_C)
    welcome = hs(WELCOME, HS_A_RANK, HS_SIZE, NONCE_A, PROOF_A)
    prove = hs(PROVE, HS_C_RANK, HS_SIZE, NONCE_C, PROOF_C)
    rnd = random.Random(20260101)
    return {
        "hello": hello,
        "welcome": welcome,
        "prove": prove,
        "hello_rank0_size1": hs(HELLO, 0, 1, bytes(16)),
        "welcome_max_size": hs(WELCOME, 0xFFFFFFFE, 0xFFFFFFFF, b"\xff" * 16, M64),
        "prove_rank_eq_size": hs(PROVE, 8, 8, NONCE_C, PROOF_C),
        "hello_with_proof": hs(HELLO, 1, 2, NONCE_C, 1),
        "hello_truncated": hello[:47],
        "welcome_truncated": welcome[:16],
        "empty": b"",
        "hello_trailing": hello + b"\x00" * 16,
        "wrong_magic": b"TWTD" + hello[4:],
        "wrong_version": hello[:4] + struct.pack("<H", VERSION - 1) + hello[6:],
        "reserved_byte": hello[:7] + b"\x01" + hello[8:],
        "reserved_tail": hello[:47] + b"\x80",
        "random_48": bytes(rnd.getrandbits(8) for _ in range(48)),
        "random_100": bytes(rnd.getrandbits(8) for _ in range(100)),
    }


def frame_seeds():
    am = frame(AM, 7, 24, 4096)
    rnd = random.Random(20260102)
    return {
        "am": am,
        "am_empty": frame(AM, 0, 0, 0),
        "am_max_id": frame(AM, 255, 0xFFFFFFFF, 1 << 20),
        "fin": frame(FIN, 0, 0, 0),
        "fin_with_len": frame(FIN, 0, 0, 1),
        "fin_with_hdr": frame(FIN, 0, 1, 0),
        "fin_with_id": frame(FIN, 9, 0, 0),
        "ping": frame(PING, 0, 0, 0),
        "ping_with_len": frame(PING, 0, 0, 1 << 63),
        "len_2p63": frame(AM, 1, 0, 1 << 63),
        "len_2p63_minus1": frame(AM, 1, 0, (1 << 63) - 1),
        "len_size_max": frame(AM, 1, 0, M64),
        "hdr_u32_max": frame(AM, 1, 0xFFFFFFFF, 0),
        "bad_version": frame(AM, 1, 0, 0, version=0),
        "bad_type": frame(3, 1, 0, 0),
        "bad_flags": frame(AM, 1, 0, 0, flags=0x80),
        "truncated": am[:15],
        "empty": b"",
        "am_trailing": am + b"\xee" * 24,
        "random_16": bytes(rnd.getrandbits(8) for _ in range(16)),
        "random_40": bytes(rnd.getrandbits(8) for _ in range(40)),
        # The rendezvous (version 2): header bytes lead with a u64 cookie.
        "rts": frame(RTS, 7, 8 + 24, 64 << 20) + struct.pack("<Q", 1) + b"\x11" * 24,
        "rts_no_hdr": frame(RTS, 0, 8, 1 << 30) + struct.pack("<Q", M64),
        "rts_short": frame(RTS, 7, 7, 1 << 20),
        "rts_hdr_u32_max": frame(RTS, 7, 0xFFFFFFFF, 1 << 20),
        "cts": frame(CTS, 0, 8, 64 << 20) + struct.pack("<Q", 1),
        "cts_release": frame(CTS, 0, 8, 0) + struct.pack("<Q", 2),
        "cts_with_id": frame(CTS, 7, 8, 1),
        "cts_long_hdr": frame(CTS, 0, 9, 1),
        "data": frame(DATA, 0, 8, 32) + struct.pack("<Q", 1) + b"\x22" * 32,
        "data_no_cookie": frame(DATA, 0, 0, 32),
        "done": frame(DONE, 0, 8, 0) + struct.pack("<Q", 1),
        "done_with_len": frame(DONE, 0, 8, 1),
        "old_version": frame(AM, 7, 24, 4096, version=1),
        "bad_type_8": frame(8, 0, 0, 0),
    }


ADDR_MAGIC, ADDR_VERSION, ADDR_THREADS = 0x41545754, 1, 0x01


def addr_entry(family, ip, ports, reserved=b"\x00\x00\x00"):
    # family u8 | reserved u8[3] | address[16] (network order) | ports u16 each
    return bytes([family]) + reserved + ip.ljust(16, b"\x00") + struct.pack("<%dH" % len(ports), *ports)


def addr(lanes, entries, flags=ADDR_THREADS, timeout_ms=10000, naddrs=None, version=ADDR_VERSION,
         magic=ADDR_MAGIC):
    # magic u32 | version u8 | lanes u8 | naddrs u8 | flags u8 | timeout_ms u32
    n = len(entries) if naddrs is None else naddrs
    return struct.pack("<IBBBBI", magic, version, lanes, n, flags, timeout_ms) + b"".join(entries)


LOOPBACK4 = bytes([127, 0, 0, 1])
LOOPBACK6 = bytes(15) + b"\x01"


def addr_v4():
    # One lane, 127.0.0.1 port 0x1234, progress threads, 10 s: the unit test's known bytes.
    return addr(1, [addr_entry(4, LOOPBACK4, [0x1234])])


def addr_seeds():
    v4 = addr_v4()
    v6 = addr(2, [addr_entry(6, LOOPBACK6, [40000, 40001])], flags=0, timeout_ms=0)
    mixed = addr(3, [addr_entry(4, bytes([10, 0, 0, 7]), [5000, 5001, 5002]),
                     addr_entry(6, bytes(range(0x20, 0x30)), [6000, 6001, 6002])])
    big = addr(16, [addr_entry(4 if a % 2 == 0 else 6, bytes([10, 0, a, 1]), range(1000 + 16 * a, 1016 + 16 * a))
                    for a in range(8)], timeout_ms=0xFFFFFFFF)
    rnd = random.Random(20260103)
    return {
        "v4": v4,
        "v6_two_lanes": v6,
        "mixed_three_lanes": mixed,
        "max": big,
        "empty": b"",
        "header_only": v4[:12],
        "truncated_header": v4[:11],
        "truncated_entry": v4[:-1],
        "trailing": v4 + b"\x00",
        "old_magic": addr(1, [addr_entry(4, LOOPBACK4, [0x1234])], magic=MAGIC),
        "bad_version": addr(1, [addr_entry(4, LOOPBACK4, [0x1234])], version=2),
        "bad_family": addr(1, [addr_entry(5, LOOPBACK4, [0x1234])]),
        "family_zero": addr(1, [addr_entry(0, LOOPBACK4, [0x1234])]),
        "lanes_zero": addr(0, [addr_entry(4, LOOPBACK4, [])]),
        "lanes_17": addr(17, [addr_entry(4, LOOPBACK4, range(1, 18))]),
        "naddrs_zero": addr(1, [], naddrs=0),
        "naddrs_9": addr(1, [addr_entry(4, LOOPBACK4, [1000 + a]) for a in range(9)]),
        "naddrs_lies_more": addr(1, [addr_entry(4, LOOPBACK4, [0x1234])], naddrs=2),
        "naddrs_lies_less": addr(1, [addr_entry(4, LOOPBACK4, [1]), addr_entry(4, LOOPBACK4, [2])],
                                 naddrs=1),
        "lanes_lie": addr(2, [addr_entry(4, LOOPBACK4, [0x1234])]),
        "port_zero": addr(2, [addr_entry(4, LOOPBACK4, [0x1234, 0])]),
        "reserved_set": addr(1, [addr_entry(4, LOOPBACK4, [0x1234], reserved=b"\x00\x01\x00")]),
        "v4_padding_set": addr(1, [addr_entry(4, LOOPBACK4 + b"\x01", [0x1234])]),
        "unknown_flag": addr(1, [addr_entry(4, LOOPBACK4, [0x1234])], flags=0x02),
        "random_34": bytes(rnd.getrandbits(8) for _ in range(34)),
        "random_prefix": v4[:12] + bytes(rnd.getrandbits(8) for _ in range(22)),
    }


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720)

ROUTE_VERSION, ROUTE_DATA, ROUTE_DOWN = 1, 1, 2
R_FIRST, R_LAST, R_SEQ = 1, 2, 4
DOWN_LEFT, DOWN_FAILED = 0, 1
ROUTE_SIZE = 16  # the job size the route fuzzer passes for these seeds (input byte 0)


def route_hdr(typ, am_id, hops, hdr_len, flags, src, dst, msg_len, offset, seq,
              version=ROUTE_VERSION, reserved=0, crc=None):
    # version u8 | type u8 | am_id u8 | hops u8 | hdr_len u16 | flags u8 | reserved u8 |
    # src i32 | dst i32 | msg_len u32 | offset u32 | crc u32 | seq u32
    def pack(c):
        return struct.pack("<BBBBHBBiiIIII", version, typ, am_id, hops, hdr_len, flags, reserved,
                           src, dst, msg_len, offset, c, seq)
    return pack(crc32c(pack(0)) if crc is None else crc)


def route_first():
    # The first of a 10000-byte message from rank 3 to rank 12 in 3 fragments
    # (4000, 4000, 2000), numbered from 7, one hop on, 24 upper header bytes:
    # the unit test's known bytes.
    return route_hdr(ROUTE_DATA, 33, 1, 24, R_FIRST | R_SEQ, 3, 12, 10000, 0, 7)


def route_input(hdr, uhdr=b"", payload=b"", size=ROUTE_SIZE, seal=False):
    # The fuzzer's input: byte 0 the job size - 1 (bit 7: the harness seals
    # the header), bytes 1-2 the transport header length, then the header,
    # the upper header and the payload.
    head = hdr + uhdr
    return bytes([(size - 1) | (0x80 if seal else 0)]) + struct.pack("<H", len(head)) + head + payload


def route_seeds():
    first = route_first()
    uhdr = bytes(range(24))
    rnd = random.Random(20260104)
    D = ROUTE_DATA
    return {
        "single": route_input(route_hdr(D, 7, 0, 8, R_FIRST | R_LAST | R_SEQ, 1, 9, 40, 0, 0),
                              uhdr[:8], b"\x5a" * 40),
        "single_unordered": route_input(route_hdr(D, 7, 2, 0, R_FIRST | R_LAST, 9, 1, 16, 0, 0),
                                        b"", b"\x11" * 16),
        "empty": route_input(route_hdr(D, 0, 0, 0, R_FIRST | R_LAST | R_SEQ, 0, 15, 0, 0, 1)),
        "first": route_input(route_hdr(D, 33, 1, 24, R_FIRST | R_SEQ, 3, 12, 100, 0, 7), uhdr,
                             b"\x01" * 40),
        "middle": route_input(route_hdr(D, 33, 1, 0, R_SEQ, 3, 12, 100, 40, 8), b"", b"\x02" * 40),
        "last": route_input(route_hdr(D, 33, 2, 0, R_LAST | R_SEQ, 3, 12, 100, 80, 9), b"",
                            b"\x03" * 20),
        "last_empty": route_input(route_hdr(D, 33, 2, 0, R_LAST, 3, 12, 100, 100, 0)),
        "down_left": route_input(route_hdr(ROUTE_DOWN, DOWN_LEFT, 0, 0, 0, 0, 5, 0, 0, 0)),
        "down_failed": route_input(route_hdr(ROUTE_DOWN, DOWN_FAILED, 1, 0, 0, 2, 15, 0, 0, 0)),
        "first_fragment_header": route_input(first, uhdr),
        # Wrong in one field each, sealed: the field checks behind the checksum.
        "bad_crc": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0, crc=1)),
        "bad_crc_sealed": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0, crc=1),
                                      seal=True),
        "bad_version": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0, version=2)),
        "reserved": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0, reserved=1)),
        "rank_out": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 16, 0, 0, 0)),
        "hops_3": route_input(route_hdr(D, 7, 3, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0)),
        "down_with_payload": route_input(route_hdr(ROUTE_DOWN, 1, 0, 0, 0, 0, 5, 0, 0, 0),
                                         b"", b"\x00"),
        "down_bad_how": route_input(route_hdr(ROUTE_DOWN, 2, 0, 0, 0, 0, 5, 0, 0, 0)),
        "bad_type": route_input(route_hdr(3, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 0)),
        "hdr_len_lies": route_input(route_hdr(D, 7, 0, 9, R_FIRST | R_LAST, 1, 9, 0, 0, 0), uhdr[:8]),
        "unknown_flag": route_input(route_hdr(D, 7, 0, 0, 0x8 | R_FIRST | R_LAST, 1, 9, 0, 0, 0)),
        "seq_without_flag": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 1, 9, 0, 0, 3)),
        "past_message": route_input(route_hdr(D, 7, 0, 0, R_SEQ, 1, 9, 10, 8, 0), b"", b"\x00" * 3),
        "msg_len_max": route_input(route_hdr(D, 7, 0, 0, R_FIRST, 1, 9, 0xFFFFFFFF, 0, 0)),
        "first_not_at_0": route_input(route_hdr(D, 7, 0, 0, R_FIRST, 1, 9, 10, 4, 0)),
        "middle_with_hdr": route_input(route_hdr(D, 7, 0, 4, 0, 1, 9, 10, 4, 0), uhdr[:4]),
        "last_short": route_input(route_hdr(D, 7, 0, 0, R_LAST, 1, 9, 10, 4, 0), b"", b"\x00" * 5),
        "size_1": route_input(route_hdr(D, 7, 0, 0, R_FIRST | R_LAST, 0, 0, 0, 0, 0), size=1),
        "truncated": route_input(first[:31]),
        "random_sealed": route_input(bytes(rnd.getrandbits(8) for _ in range(32)), seal=True),
        "random_64": bytes(rnd.getrandbits(8) for _ in range(64)),
    }


def write(dirname, seeds):
    os.makedirs(dirname, exist_ok=True)
    for f in os.listdir(dirname):
        os.unlink(os.path.join(dirname, f))
    for name, data in seeds.items():
        with open(os.path.join(dirname, name), "wb") as f:
            f.write(data)


def print_vectors():
    print("/* SipHash-2-4, key 00..0f, message 00..n-1 (gen_corpus.py --vectors). */")
    print("static const uint64_t sip_vectors[64] = {")
    for n in range(64):
        print("    0x%016xull," % siphash24(KEY, bytes(range(n))))
    print("};")
    print("/* proof_a, proof_c of the handshake in gen_corpus.py. */")
    print("#define PROOF_A 0x%016xull" % PROOF_A)
    print("#define PROOF_C 0x%016xull" % PROOF_C)
    print("/* hello as bytes: */")
    print(", ".join("0x%02x" % b for b in hs_seeds()["hello"]))
    print("/* the one-lane IPv4 address blob (corpus/tcp_addr/v4) as bytes: */")
    print(", ".join("0x%02x" % b for b in addr_v4()))
    print("/* route's first fragment (test_route_proto.c first_bytes): */")
    print(", ".join("0x%02x" % b for b in route_first()))


if __name__ == "__main__":
    if sys.argv[1:] == ["--vectors"]:
        print_vectors()
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        write(os.path.join(here, "corpus", "tcp_hs"), hs_seeds())
        write(os.path.join(here, "corpus", "tcp_frame"), frame_seeds())
        write(os.path.join(here, "corpus", "tcp_addr"), addr_seeds())
        write(os.path.join(here, "corpus", "route_frame"), route_seeds())
