#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/ (committed; rerun after changing a
harness's input format, then commit what changed).

Each seed is a small, valid or nearly valid input that reaches deep into its
harness: the fuzzer mutates from there. Inputs that once crashed a harness are
added by hand as crash-<what> and must stay."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"cohort-store/2"
OP = dict(set=2, get=3, add=4, compare_set=5, wait=6, check=7, remove=8)


def frame(body):
    return struct.pack("<I", len(body)) + body


def b(data):
    return struct.pack("<I", len(data)) + data


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# store_handshake: byte 0 is the chunk size, then what a stranger sends.
greeting = frame(MAGIC + b"c" * 32 + b"p" * 32)
write("store_handshake", "greeting-wrong-proof", b"\x00" + greeting)
write("store_handshake", "greeting-in-3-byte-chunks", b"\x03" + greeting)
write("store_handshake", "greeting-then-request", b"\x00" + greeting + frame(struct.pack("<QB", 1, OP["set"]) + b(b"k") + b(b"v")))
write("store_handshake", "first-protocol-auth", b"\x00" + frame(struct.pack("<QB", 0, 1) + b(b"m" * 32)))
write("store_handshake", "request-before-handshake", b"\x00" + frame(struct.pack("<QB", 1, OP["get"]) + b(b"k") + struct.pack("<q", 0)))
write("store_handshake", "http", b"\x00GET / HTTP/1.1\r\nHost: x\r\n\r\n")
write("store_handshake", "oversized-frame", b"\x00" + struct.pack("<I", 1 << 20) + b"x" * 8)
write("store_handshake", "short-greeting", b"\x01" + frame(MAGIC + b"c" * 5))


# store_requests: records (kind, u16 length, bytes); kind & 0x80 = client 2.
def rec(kind, data):
    return struct.pack("<BH", kind, len(data)) + data


def req(rid, op, fields=b""):
    return rec(0, struct.pack("<QB", rid, OP[op]) + fields)


def req2(rid, op, fields=b""):
    return rec(0x80, struct.pack("<QB", rid, OP[op]) + fields)


def i64(v):
    return struct.pack("<q", v)


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(b(k) for k in ks)


write("store_requests", "every-op",
      req(1, "set", b(b"k") + b(b"v")) + req(2, "get", b(b"k") + i64(0)) + req(3, "add", b(b"n") + i64(5)) +
      req(4, "compare_set", b(b"k") + b(b"v") + b(b"w")) + req(5, "wait", keys(b"k", b"n") + i64(0)) +
      req(6, "check", keys(b"k", b"x")) + req(7, "remove", b(b"k")))
write("store_requests", "parked-get-woken-by-other-client",
      req(1, "get", b(b"addr/1") + i64(60000)) + req2(2, "set", b(b"addr/1") + b(b"10.0.0.1:1234")))
write("store_requests", "parked-wait-times-out",
      req(1, "wait", keys(b"a", b"b") + i64(100)) + req2(2, "set", b(b"a") + b(b"1")) + rec(2, b"\x00" * 200))
write("store_requests", "add-to-text", req(1, "set", b(b"n") + b(b"abc")) + req(2, "add", b(b"n") + i64(1)))
write("store_requests", "add-overflow", req(1, "add", b(b"n") + i64(2**63 - 1)) + req(2, "add", b(b"n") + i64(1)))
write("store_requests", "hang-up-while-parked",
      req(1, "get", b(b"never") + i64(60000)) + rec(3, b"") + req(2, "set", b(b"never") + b(b"now")))
write("store_requests", "raw-unsealed-request", rec(1, frame(struct.pack("<QB", 1, OP["set"]) + b(b"k") + b(b"v"))))
write("store_requests", "truncated-fields", req(1, "set", struct.pack("<I", 1000) + b"short"))

# host_list: byte 0 even = -H, odd = hostfile.
write("host_list", "dash-h", b"\x00node1:2,node2:2,user@node3,node1:1")
write("host_list", "dash-h-bad-slots", b"\x00a:x,b:0")
write("host_list", "hostfile", b"\x01# the cluster\nnode1 slots=4\nnode2\nuser@node3 slots=2 max_slots=8  # trailing\n\n")
write("host_list", "hostfile-errors", b"\x01node1 slots=2 slots=3\nslots=2\n-bad\nnode2 cpus=4\n")

# remote_payload: what a remote rank reads on stdin.
def payload(records):
    out = b"cohortrun-remote 1\n"
    for name, value in records:
        out += name + b" " + str(len(value)).encode() + b"\n" + value + b"\n"
    return out + b"end\n"


write("remote_payload", "full", payload([(b"rank", b"3"), (b"local_size", b"2"), (b"host", b"node2"),
                                         (b"grace_s", b"3"), (b"start_timeout_s", b"60"), (b"cwd", b"/work"),
                                         (b"arg", b"./train"), (b"arg", b"--lr 0.1\n'quoted'"),
                                         (b"env", b"COHORT_SECRET=" + b"ab" * 32), (b"env", b"EMPTY=")]))
write("remote_payload", "no-program", payload([(b"rank", b"0")]))
write("remote_payload", "bad-length", b"cohortrun-remote 1\narg 99999999999999999999\nx\nend\n")
