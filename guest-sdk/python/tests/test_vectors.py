"""Holds the Python codec (weir_guest/abi.py) to the shared ABI test vectors
in abi/vectors/, as abi/tests/vectors.rs holds the Rust one: every header
packs to the vector's bytes and unpacks to its fields, every valid case
decodes to the listed events or commands, every invalid one fails with the
named error at the named index, and the answer writer packs the
"every-kind" commands to their exact bytes.

Run: python3 -m unittest discover -s guest-sdk/python/tests
"""

import json
import pathlib
import sys
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from weir_guest import abi  # noqa: E402

VECTORS = HERE.parent.parent.parent / "abi" / "vectors"


def load(name):
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


def as_vector(item):
    """A decoded event or command as the vectors spell it (bytes as hex)."""
    out = {}
    for k, v in item.items():
        if k in ("payload", "attachment", "body", "key", "value", "info", "data") and not (
                isinstance(v, str)):
            out[k + "_hex"] = v.hex()
        else:
            out[k] = v
    return out


class Vectors(unittest.TestCase):
    def run_file(self, name, key, size, read, pack, decode, only=None):
        v = load(name)
        if only is not None:
            v["valid"] = [c for c in v["valid"] if c["name"] in only]
            v["invalid"] = [c for c in v["invalid"] if c["name"] in only]
        seen = []
        for group, valid in (("valid", True), ("invalid", False)):
            self.assertTrue(v[group], f"{name}: no {group} cases")
            for case in v[group]:
                with self.subTest(case=case["name"]):
                    raw = bytes.fromhex(case["headers_hex"])
                    if "headers" in case:
                        packed = b"".join(pack(h) for h in case["headers"])
                        self.assertEqual(packed.hex(), case["headers_hex"], "pack")
                        back = [read(raw, i * size) for i in range(len(case["headers"]))]
                        self.assertEqual(back, case["headers"], "unpack")
                    data = bytes.fromhex(case["data_hex"])
                    if valid:
                        got = [as_vector(x) for x in decode(raw, data)]
                        self.assertEqual(got, case[key])
                    else:
                        with self.assertRaises(abi.AbiError) as err:
                            decode(raw, data)
                        self.assertEqual(err.exception.variant, case["error"], str(err.exception))
                        self.assertEqual(err.exception.index, case["index"])
                        seen.append(case["error"])
        return seen

    def test_event_batches_match_the_vectors(self):
        self.run_file("events.json", "events", abi.EVENT_HEADER_BYTES,
                      abi.read_event_header, abi.pack_event_header, abi.decode_events)

    def test_command_answers_match_the_vectors(self):
        seen = self.run_file("commands.json", "commands", abi.COMMAND_HEADER_BYTES,
                             abi.read_command_header, abi.pack_command_header,
                             abi.decode_commands)
        for variant in ("HeadersNotWhole", "ReservedByteSet", "RangeOutOfBounds", "UnknownKind",
                        "TextNotUtf8", "ReasonNotUtf8", "EmptyTopic", "TopicNotUtf8"):
            self.assertIn(variant, seen, f"no command vector for {variant}")

    def test_io_event_batches_match_the_vectors(self):
        seen = self.run_file("io-events.json", "events", abi.EVENT_HEADER_BYTES,
                             abi.read_event_header, abi.pack_event_header, abi.decode_events)
        self.assertEqual(set(seen), {"IoEventMalformed"})

    def test_io_command_answers_match_the_vectors(self):
        seen = self.run_file("io-commands.json", "commands", abi.COMMAND_HEADER_BYTES,
                             abi.read_command_header, abi.pack_command_header,
                             abi.decode_commands)
        self.assertEqual(seen, ["MetaMalformed"] * 6)

    def test_realtime_kinds_match_the_vectors(self):
        # Every real-time kind of realtime-*.json: the realtime reads
        # (history 10, presence 11; history-read 15, presence-read 16), a
        # namespace guest's questions (12, 13) and a Pusher app guest's
        # (14-16), and their verdicts (17, 18).
        seen = self.run_file("realtime-events.json", "events", abi.EVENT_HEADER_BYTES,
                             abi.read_event_header, abi.pack_event_header, abi.decode_events)
        self.assertEqual(seen, ["IoEventMalformed"] * 2)
        seen = self.run_file("realtime-commands.json", "commands", abi.COMMAND_HEADER_BYTES,
                             abi.read_command_header, abi.pack_command_header,
                             abi.decode_commands)
        self.assertEqual(seen, ["ReservedByteSet", "ReservedByteSet", "TextNotUtf8"]
                         + ["MetaMalformed"] * 3)

    def test_the_writer_answers_verdicts_the_host_reads_as_the_vectors_say(self):
        for name in ("rt-verdicts", "pusher-verdicts"):
            want = next(c for c in load("realtime-commands.json")["valid"] if c["name"] == name)
            w = abi.CommandWriter()
            for c in want["commands"]:
                if c["kind"] == "rt-subscribe-verdict":
                    w.subscribe_verdict(c["conn"], c["call"], c["code"], c.get("authorise", False),
                                        c.get("payload", ""))
                else:
                    w.publish_verdict(c["conn"], c["call"], abi.PUBLISH_VERDICTS.index(c["verdict"]),
                                      c.get("code", 0), bytes.fromhex(c.get("data_hex", "")))
            commands, data = w.finish()
            # The writer lays the data out its own way (each verdict's call
            # id, then its payload): the host reads the same commands.
            got = [as_vector(x) for x in abi.decode_commands(commands, data)]
            self.assertEqual(got, want["commands"], name)

    def test_the_question_encoder_matches_the_vectors(self):
        for name in ("rt-kinds", "pusher-kinds"):
            want = next(c for c in load("realtime-events.json")["valid"] if c["name"] == name)
            parts = b""
            for e in want["events"]:
                rest = (abi.encode_subscribe_rest(e["signature"], e["auth"])
                        if e["kind"] == "pusher-subscribe" else bytes.fromhex(e.get("data_hex", "")))
                parts += abi.encode_rt_request(e["call"], e["channel"], e["client"], e["user"],
                                               bytes.fromhex(e["info_hex"]), rest)
            self.assertEqual(parts.hex(), want["data_hex"], name)

    def test_proxy_kinds_match_the_vectors(self):
        seen = self.run_file("proxy-events.json", "events", abi.EVENT_HEADER_BYTES,
                             abi.read_event_header, abi.pack_event_header, abi.decode_events)
        self.assertEqual(seen, ["ReservedByteSet", "TextNotUtf8"])
        seen = self.run_file("proxy-commands.json", "commands", abi.COMMAND_HEADER_BYTES,
                             abi.read_command_header, abi.pack_command_header,
                             abi.decode_commands)
        self.assertEqual(seen, ["ReservedByteSet", "TextNotUtf8"])

    def test_the_writer_packs_reads_and_forwards_as_the_vectors_say(self):
        case = next(c for c in load("realtime-commands.json")["valid"]
                    if c["name"] == "realtime-reads")
        w = abi.CommandWriter()
        w.history_read(1, 4, 20, True, "chat:room")
        w.presence_read(0, 5, "chat:room")
        commands, data = w.finish()
        self.assertEqual((commands.hex(), data.hex()), (case["headers_hex"], case["data_hex"]))
        case = load("proxy-commands.json")["valid"][0]
        self.assertEqual(case["name"], "proxy-forwards")
        w = abi.CommandWriter()
        w.forward(3, 0, "up")
        w.forward(3, 1, b"\xff")
        commands, data = w.finish()
        self.assertEqual((commands.hex(), data.hex()), (case["headers_hex"], case["data_hex"]))

    def test_the_read_answer_encoders_match_the_vectors(self):
        case = next(c for c in load("realtime-events.json")["valid"]
                    if c["name"] == "realtime-reads")
        data = bytes.fromhex(case["data_hex"])
        self.assertEqual(abi.encode_history(7, 12, "ep", [(11, '"a"'), (12, "{}")]), data[:51])
        self.assertEqual(abi.encode_presence(9, [("c1", "u1", '{"n":1}'), ("c2", "", "")]),
                         data[59:104])

    def test_the_writer_packs_the_io_kinds_as_the_vectors_say(self):
        case = load("io-commands.json")["valid"][0]
        self.assertEqual(case["name"], "io-kinds")
        w = abi.CommandWriter()
        w.http_request(3, 7, "POST", "http://h:1/x", [("content-type", "text/plain")], b"hi")
        w.set_timer(0, 8, 1500)
        w.cancel_timer(3, 8)
        w.kv_set("k", "v", 60000)
        w.kv_delete("k")
        commands, data = w.finish()
        self.assertEqual(commands.hex(), case["headers_hex"])
        self.assertEqual(data.hex(), case["data_hex"])

    def test_the_io_event_encoders_read_back(self):
        raw = abi.encode_http_response(5, [("content-type", "text/plain"), ("x", "a: b")], b"ok")
        self.assertEqual(abi.split_http_response(raw), (5, "content-type: text/plain\nx: a: b",
                                                        b"ok"))
        self.assertEqual(abi.header_lines("content-type: text/plain\nx: a: b"),
                         [("content-type", "text/plain"), ("x", "a: b")])
        self.assertEqual(abi.split_http_error(abi.encode_http_error(6, "déjà")), (6, "déjà"))
        self.assertEqual(abi.split_request_head("GET http://h/x\na: 1"),
                         ("GET", "http://h/x", [("a", "1")]))
        self.assertIsNone(abi.split_request_head("GET"))

    def test_the_writer_packs_every_kind_as_the_vectors_say(self):
        case = load("commands.json")["valid"][0]
        self.assertEqual(case["name"], "every-kind")
        w = abi.CommandWriter()
        w.send_text(1, "héllo")
        w.send_binary(0x0001_0203_0405_0607, b"\x00\xff")
        w.close(3, 4000, "done")
        w.publish("room", "hi all")
        w.publish("room", b"\x01\x02", 4)
        w.subscribe(4, "room")
        w.unsubscribe(4, "lobby")
        w.set_attachment(4, b"state")
        commands, data = w.finish()
        self.assertEqual(commands.hex(), case["headers_hex"])
        self.assertEqual(data.hex(), case["data_hex"])

    def test_conn_info_round_trips(self):
        raw = abi.encode_conn_info("/chat/lobby?x=1", [("room", "lobby")], b"\x07id")
        info = abi.parse_conn_info(raw)
        self.assertEqual((info.target, info.params, info.attachment),
                         ("/chat/lobby?x=1", [("room", "lobby")], b"\x07id"))
        self.assertIsNone(abi.parse_conn_info(raw[:6]))


if __name__ == "__main__":
    unittest.main()
