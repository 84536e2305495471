"""The stored test vectors, the codec and docs/protocol.md agree."""

from __future__ import annotations

import json
import pathlib

from poise.firmware_bridge import messages as m
from poise.firmware_bridge import vectors
from poise.firmware_bridge.codec import cobs_encode, crc16

ROOT = pathlib.Path(__file__).resolve().parents[1]
JSON_PATH = ROOT / "tests" / "vectors" / "protocol_vectors.json"
DOC_PATH = ROOT / "docs" / "protocol.md"


def stored() -> dict:
    return json.loads(JSON_PATH.read_text())


def test_stored_vectors_match_the_codec():
    assert stored() == json.loads(json.dumps(vectors.build_vectors()))


def test_every_message_type_has_a_vector():
    assert {v["type"] for v in stored()["vectors"]} == set(m.MESSAGE_TYPES)


def test_vector_frames_decode_to_their_fields():
    for v in stored()["vectors"]:
        frames = m.MessageDecoder().feed(bytes.fromhex(v["frame_hex"]))
        assert len(frames) == 1, v["name"]
        (frame,) = frames
        assert frame.header.seq == v["seq"] and frame.header.timestamp_us == v["timestamp_us"]
        assert frame.message.pack().hex() == v["payload_hex"]
        cls = m.MESSAGE_TYPES[v["type"]]
        fields = {k: tuple(x) if isinstance(x, list) else x for k, x in v["fields"].items()}
        assert frame.message == cls(**fields), v["name"]


def test_codec_vectors():
    for c in stored()["codec"]:
        raw = bytes.fromhex(c["raw_hex"])
        if "cobs_hex" in c:
            assert cobs_encode(raw).hex() == c["cobs_hex"]
        else:
            assert crc16(raw) == c["crc16"]


def test_protocol_doc_matches_the_json():
    doc = DOC_PATH.read_text()
    section = vectors.doc_section(stored())
    assert section in doc, ("docs/protocol.md is out of date: run "
                            "python -m poise.firmware_bridge.vectors")
    for v in stored()["vectors"]:
        assert v["frame_hex"] in doc
