#!/usr/bin/env python3
"""An independent TFRecord reader/writer and tf.train.Example codec.

Written from the formats' public descriptions with the standard library
only (its own CRC-32C, its own protobuf wire encoding), so that
roundtrip_test.cc can check cohort's files against something that shares no
code with cohort.

  tfrecord_peer.py write-records PATH N     records i = record_bytes(i)
  tfrecord_peer.py check-records PATH N     verify framing, CRCs, contents
  tfrecord_peer.py write-examples PATH N    tf.train.Example i = example(i)
  tfrecord_peer.py check-examples PATH N    parse and compare with example(i)

Exit status 0 when the check passes, 1 with a message otherwise.
"""
import struct
import sys

# CRC-32C, reflected polynomial 0x82F63B78, bit by bit into a table.
_TABLE = []
for _b in range(256):
    _c = _b
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(crc32c(length))) + data + struct.pack("<I", masked(crc32c(data)))


def read_frames(path):
    with open(path, "rb") as f:
        blob = f.read()
    pos, out = 0, []
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise ValueError("offset %d: truncated header" % pos)
        length_bytes = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked(crc32c(length_bytes)):
            raise ValueError("offset %d: length CRC mismatch" % pos)
        end = pos + 12 + length
        if end + 4 > len(blob):
            raise ValueError("offset %d: truncated record" % pos)
        data = blob[pos + 12:end]
        (data_crc,) = struct.unpack("<I", blob[end:end + 4])
        if data_crc != masked(crc32c(data)):
            raise ValueError("offset %d: data CRC mismatch" % pos)
        out.append(data)
        pos = end + 4
    return out


def record_bytes(i):
    return bytes((i * 31 + j * 7) % 251 for j in range(i * 37 % 300))


# Protocol buffers wire format: varints, (field << 3 | wire type) keys.
def varint(v):
    v &= (1 << 64) - 1  # negative int64 as two's complement: ten bytes
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, payload):  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(i):
    """Feature name -> (kind, values) of example i."""
    return {
        "id": ("int64", [i, -i, 1 << 40]),
        "name": ("bytes", [b"rec-%d" % i, b""]),
        "weights": ("float", [i / 2.0, 0.25, -1.5]),
    }


def encode_example(features):
    entries = b""
    for name in sorted(features):
        kind, values = features[name]
        if kind == "bytes":
            lst = b"".join(field(1, v) for v in values)
            feature = field(1, lst)
        elif kind == "float":
            feature = field(2, field(1, b"".join(struct.pack("<f", v) for v in values)))
        else:
            feature = field(3, field(1, b"".join(varint(v) for v in values)))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def read_varint(buf, pos):
    """(value, position after it) of the varint at buf[pos]."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def parse(buf):
    """Field number -> list of (wire type, value) of one message."""
    fields, pos = {}, 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            value = buf[pos:pos + n]
            pos += n
        elif wire == 5:
            value = buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            value = buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError("wire type %d" % wire)
        fields.setdefault(number, []).append((wire, value))
    return fields


def signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode_example(buf):
    features = {}
    for _, entries in parse(buf).get(1, []):
        for _, entry in parse(entries).get(1, []):
            e = parse(entry)
            name = e[1][0][1].decode()
            feature = parse(e.get(2, [(2, b"")])[0][1])
            if 1 in feature:
                values = [v for _, v in parse(feature[1][0][1]).get(1, [])]
                features[name] = ("bytes", [bytes(v) for v in values])
            elif 2 in feature:
                values = []
                for wire, v in parse(feature[2][0][1]).get(1, []):
                    chunks = [v[k:k + 4] for k in range(0, len(v), 4)] if wire == 2 else [v]
                    values += [struct.unpack("<f", c)[0] for c in chunks]
                features[name] = ("float", values)
            elif 3 in feature:
                values = []
                for wire, v in parse(feature[3][0][1]).get(1, []):
                    if wire == 0:
                        values.append(signed(v))
                    else:  # packed
                        p = 0
                        while p < len(v):
                            result, p = read_varint(v, p)
                            values.append(signed(result))
                features[name] = ("int64", values)
            else:
                features[name] = ("bytes", [])
    return features


def rounded(features):
    """Floats as float32 would hold them, for comparison."""
    out = {}
    for name, (kind, values) in features.items():
        if kind == "float":
            values = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]
        out[name] = (kind, values)
    return out


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    command, path, n = argv[1], argv[2], int(argv[3])
    try:
        if command == "write-records":
            with open(path, "wb") as f:
                for i in range(n):
                    f.write(frame(record_bytes(i)))
        elif command == "write-examples":
            with open(path, "wb") as f:
                for i in range(n):
                    f.write(frame(encode_example(example(i))))
        elif command == "check-records":
            records = read_frames(path)
            if len(records) != n:
                raise ValueError("%d records, expected %d" % (len(records), n))
            for i, r in enumerate(records):
                if r != record_bytes(i):
                    raise ValueError("record %d differs" % i)
        elif command == "check-examples":
            records = read_frames(path)
            if len(records) != n:
                raise ValueError("%d records, expected %d" % (len(records), n))
            for i, r in enumerate(records):
                got, want = decode_example(r), rounded(example(i))
                if got != want:
                    raise ValueError("example %d: %r, expected %r" % (i, got, want))
        else:
            print("unknown command " + command, file=sys.stderr)
            return 2
    except (ValueError, IndexError, KeyError) as e:
        print("tfrecord_peer: %s: %s" % (path, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
