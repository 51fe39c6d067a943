#!/usr/bin/env python3
"""An independent writer and reader of TensorBoard event files.

Shares no code with cohort: the TFRecord framing, CRC-32C and protobuf
varints are tests/data/tfrecord_peer.py's (the standard library only); the
fixture's Event messages are encoded by hand here from TensorFlow's
published field numbers (tensorflow/core/util/event.proto,
tensorflow/core/framework/summary.proto, tensor.proto); the reader parses
with python3-protobuf's runtime, its message classes built from a
descriptor written in this file.

  tfevents_peer.py make-fixture PATH   write the third-party fixture
  tfevents_peer.py check-fixture PATH  PATH holds exactly the fixture's bytes
  tfevents_peer.py read DIR...         every event file of each run DIR, CRCs
                                       checked; one line per scalar:
                                       "<dir name>\t<tag>\t<step>\t<value>"

Exit status 0 on success, 1 with a message otherwise.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
from tfrecord_peer import field, frame, read_frames, varint  # noqa: E402


def key(number, wire):
    return varint(number << 3 | wire)


def double_field(number, v):
    return key(number, 1) + struct.pack("<d", v)


def float_field(number, v):
    return key(number, 5) + struct.pack("<f", v)


def int_field(number, v):
    return key(number, 0) + varint(v)


def event(wall_time, step, what):
    """tensorflow.Event: wall_time = 1, step = 2, then the `what` bytes."""
    return double_field(1, wall_time) + (int_field(2, step) if step else b"") + what


def summary(*values):
    """Event.summary = 5 holding tensorflow.Summary's value = 1 entries."""
    return field(5, b"".join(field(1, v) for v in values))


def simple_value(tag, v):
    """Summary.Value: tag = 1, simple_value = 2."""
    return field(1, tag.encode()) + float_field(2, v)


def fixture_records():
    """The fixture's Event records, and what a reader must find in them."""
    scalars_plugin = field(9, field(1, field(1, b"scalars")))  # metadata.plugin_data.plugin_name
    records = [
        event(1700000000.5, 0, field(3, b"brain.Event:2")),
        event(1700000001.0, 0, summary(simple_value("epoch_loss", 0.75))),
        event(1700000002.0, 1, summary(simple_value("epoch_loss", 0.5), simple_value("epoch_accuracy", 0.875))),
        # TF 2's tf.summary.scalar: a 0-d DT_FLOAT (1) tensor, float_val = 5
        # packed, an empty tensor_shape = 2.
        event(1700000003.0, 2,
              summary(field(1, b"epoch_loss") + scalars_plugin +
                      field(8, int_field(1, 1) + field(2, b"") + field(5, struct.pack("<f", 0.25))))),
        # A DT_DOUBLE (2) tensor in tensor_content = 4.
        event(1700000004.0, 3, summary(field(1, b"epoch_mae") + field(8, int_field(1, 2) + field(4, struct.pack("<d", 0.1))))),
        # Not scalars: an image value (Summary.Value.image = 4), a
        # SessionLog event (Event.session_log = 7, status START = 1), a
        # graph (Event.graph_def = 4).
        event(1700000005.0, 3, summary(field(1, b"digits") + field(4, int_field(1, 28) + int_field(2, 28)))),
        event(1700000006.0, 0, field(7, int_field(1, 1))),
        event(1700000007.0, 0, field(4, b"\x0a\x03abc")),
        # A large step (a multi-byte varint) and a negative value.
        event(1700000008.0, 1 << 40, summary(simple_value("batch_loss", -2.5))),
    ]
    return records


def fixture_bytes():
    blob = b"".join(frame(r) for r in fixture_records())
    # A writer killed mid-record: the first 20 bytes of one more frame.
    return blob + frame(event(1700000009.0, 5, summary(simple_value("epoch_loss", 0.125))))[:20]


def event_classes():
    """Event, built by python3-protobuf from this descriptor (field numbers as above)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="tfevents_peer.proto", package="peer", syntax="proto3")

    def message(name, fields):
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            m.field.add(name=fname, number=number, type=ftype, label=label, type_name=type_name)

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None), ("step", 2, F.TYPE_INT64, opt, None),
                      ("file_version", 3, F.TYPE_STRING, opt, None),
                      ("summary", 5, F.TYPE_MESSAGE, opt, ".peer.Summary")])
    message("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".peer.Value")])
    message("Value", [("tag", 1, F.TYPE_STRING, opt, None), ("simple_value", 2, F.TYPE_FLOAT, opt, None)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    event = pool.FindMessageTypeByName("peer.Event")
    if hasattr(message_factory, "GetMessageClass"):  # python3-protobuf >= 4.22
        return message_factory.GetMessageClass(event)
    return message_factory.MessageFactory(pool).GetPrototype(event)


def read_runs(dirs):
    Event = event_classes()
    for d in dirs:
        run = os.path.basename(os.path.normpath(d))
        names = sorted(n for n in os.listdir(d) if ".tfevents." in n)
        if not names:
            raise ValueError("%s: no event files" % d)
        for name in names:
            records = read_frames(os.path.join(d, name))  # checks every CRC, refuses a partial frame
            first = Event.FromString(records[0])
            if first.file_version != "brain.Event:2":
                raise ValueError("%s: first record is not file_version brain.Event:2" % name)
            for r in records[1:]:
                e = Event.FromString(r)
                for v in e.summary.value:
                    print("%s\t%s\t%d\t%r" % (run, v.tag, e.step, v.simple_value))


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    command = argv[1]
    try:
        if command == "make-fixture":
            with open(argv[2], "wb") as out:
                out.write(fixture_bytes())
        elif command == "check-fixture":
            with open(argv[2], "rb") as f:
                if f.read() != fixture_bytes():
                    raise ValueError("%s differs from what make-fixture writes: run make-fixture again" % argv[2])
        elif command == "read":
            read_runs(argv[2:])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (ValueError, OSError) as e:
        print("tfevents_peer.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
