#!/usr/bin/env python3
"""Writes the seed corpora of the data harnesses (fuzz/corpus/record_reader,
fuzz/corpus/idx_reader); committed, rerun after changing an input format.
TFRecord frames and Examples come from tests/data/tfrecord_peer.py, the
independent writer."""
import gzip
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "data"))
import tfrecord_peer as peer  # noqa: E402


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


records = b"".join(peer.frame(peer.record_bytes(i)) for i in range(4))
examples = b"".join(peer.frame(peer.encode_example(peer.example(i))) for i in range(3))
write("record_reader", "records", records)
write("record_reader", "examples", examples)
write("record_reader", "empty-record", peer.frame(b""))
write("record_reader", "truncated", examples[:-3])
damaged = bytearray(examples)
damaged[20] ^= 1
write("record_reader", "data-crc", bytes(damaged))

def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)

images = idx([3, 4, 5], range(60))
write("idx_reader", "images-plain", bytes([2]) + images)
write("idx_reader", "images-gzip", bytes([2]) + gzip.compress(images, mtime=0))
write("idx_reader", "labels", bytes([0]) + idx([7], [1, 2, 3, 4, 5, 6, 7]))
write("idx_reader", "truncated-gzip", bytes([2]) + gzip.compress(images, mtime=0)[:-5])
