"""Dead letters stay small whatever the payload, their reasons label metrics by a fixed set of kinds, and
events name the payloads that died, so a waiter is not told another payload's death (audit findings 2, 7
and 8)."""

from __future__ import annotations

import json
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producer.protocol import (
    DEAD_REASON_KINDS,
    LETTER_TEXT_BYTES,
    MAX_LETTER_BYTES,
    MAX_PAYLOAD_BYTES,
    BadTicket,
    DeadLetter,
    Event,
    decode_ticket,
    payload_digest,
    reason_kind,
)
from worker.metrics import Metrics
from worker.stage import decode_all


def test_a_payload_of_control_bytes_makes_a_bounded_letter_that_is_still_whole() -> None:
    payload = bytes([1]) * MAX_PAYLOAD_BYTES  # valid UTF-8, escaped as \u0001: six bytes each
    _, bad = decode_all([payload], "w")
    encoded = bad[0].letter.to_json().encode()
    assert len(encoded) <= MAX_LETTER_BYTES  # was 393,301 bytes
    letter = json.loads(encoded)
    assert letter["payload_utf8"] is True and "payload" not in letter and "payload_bytes" not in letter
    back = DeadLetter.from_json(encoded)
    assert back.payload == payload and back.whole


def test_a_valid_ticket_heavy_with_escapes_stays_whole_and_replayable() -> None:
    # valid JSON: a field of quotes and backslashes, each escaped again in the letter (twice the bytes)
    raw = json.dumps({"id": "T-1", "text": "hi", "x": '"\\' * 15_000}).encode()
    assert MAX_PAYLOAD_BYTES >= len(raw) > LETTER_TEXT_BYTES // 2
    decode_ticket(raw)
    encoded = DeadLetter("engine error: boom", raw, id="T-1").to_json().encode()
    assert len(encoded) <= MAX_LETTER_BYTES
    back = DeadLetter.from_json(encoded)
    assert back.payload == raw and back.whole and payload_digest(back.payload) == payload_digest(raw)


def test_a_plain_valid_payload_is_still_kept_as_text() -> None:
    raw = b'{"id": "T-9", "text": "line one\\nline \\"two\\""}'
    letter = json.loads(DeadLetter("missing field: text", raw).to_json())
    assert letter["payload"] == raw.decode() and "payload_b64" not in letter
    full = b'{"id": "T-9", "text": "' + b"a" * (MAX_PAYLOAD_BYTES - 25) + b'"}'
    assert len(full) == MAX_PAYLOAD_BYTES
    assert json.loads(DeadLetter("engine error: boom", full).to_json())["payload"] == full.decode()


def test_an_oversized_payload_keeps_its_size_through_a_round_trip() -> None:
    big = bytes([2]) * (MAX_PAYLOAD_BYTES * 3)
    encoded = DeadLetter("payload too large", big).to_json()
    assert len(encoded.encode()) <= MAX_LETTER_BYTES
    back = DeadLetter.from_json(encoded)
    assert back.payload == big[:MAX_PAYLOAD_BYTES] and back.payload_bytes == len(big) and not back.whole
    assert json.loads(back.to_json())["payload_bytes"] == len(big)  # `ticketq-producer dead` keeps it


@settings(max_examples=60, deadline=None)
@given(
    payload=st.one_of(
        st.binary(max_size=MAX_PAYLOAD_BYTES * 2),
        st.sampled_from([b"\x00", b"\x1f", b'"', b"\\", "\u2028".encode(), b"\xff"]).flatmap(
            lambda unit: st.integers(1, MAX_PAYLOAD_BYTES * 2 // len(unit)).map(lambda n: unit * n)
        ),
    ),
    reason=st.text(max_size=5000),
    worker=st.text(max_size=2000),
    ticket_id=st.none() | st.text(max_size=2000),
)
def test_no_letter_passes_the_bound(payload: bytes, reason: str, worker: str, ticket_id: str | None) -> None:
    encoded = DeadLetter(reason, payload, worker=worker, id=ticket_id, attempts=3).to_json().encode()
    assert len(encoded) <= MAX_LETTER_BYTES
    back = DeadLetter.from_json(encoded)
    assert back.payload == payload[:MAX_PAYLOAD_BYTES]
    assert back.whole == (len(payload) <= MAX_PAYLOAD_BYTES)


# -- finding 7: reason kinds ----------------------------------------------------------------------------


HOSTILE = [
    b"\xff",
    b"\xef\xbb\xbf{}",
    b"nope",
    b"[1]",
    b'{"id": "a", "text": "t", "v": 2}',
    b'{"text": "t"}',
    b'{"id": 5, "text": "t"}',
    b'{"id": " ", "text": "t"}',
    b'{"id": "' + b"a" * 300 + b'", "text": "t"}',
    b'{"id": "a"}',
    b'{"id": "a", "text": 5}',
    b'{"id": "a", "text": "' + b"a" * 20_000 + b'"}',
    b'{"id": "a", "text": "   "}',
    b'{"id": "a", "text": "t\\u0001"}',
    b'{"id": "a\\u202e", "text": "t"}',
    b'{"id": "a", "text": "t", "zq": "\\ud800"}',
    b'{"id": "a", "text": "t", "n": NaN}',
    b'{"id": "a", "text": "t", "n": 1e999}',
    b'{"id": "a", "text": "t", "n": 123456789012345678901234567890}',
    b'{"id": "a", "id": "b", "text": "t"}',
    b"[" * 100 + b"]" * 100,
    b"x" * (MAX_PAYLOAD_BYTES + 1),
    b'{"id": "a", "text": "t", "enqueued_at": "soon"}',
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_every_decoder_reason_has_a_known_kind(raw: bytes) -> None:
    with pytest.raises(BadTicket) as err:
        decode_ticket(raw)
    assert reason_kind(err.value.reason) in DEAD_REASON_KINDS, err.value.reason


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("lone surrogate U+D800 in field yfiepgmol", "lone surrogate"),
        ("control character U+0001 in text", "control character"),
        ("format character U+202E in id (right-to-left override)", "format character"),
        ("not JSON: Expecting value: line 1 column 1 (char 0)", "not JSON"),
        ("not strict JSON: NaN is not a JSON number", "not strict JSON"),
        ("not a JSON object: got list", "not a JSON object"),
        ("duplicate id", "duplicate id"),
        ("duplicate key: 'id'", "duplicate key"),
        ("poison: killed 3 workers", "poison"),
        ("engine error: RuntimeError: boom", "engine error"),
        ("unwritable result: NaN in scores", "unwritable result"),
        ("payload too large: 10485760 bytes > 65536", "payload too large"),
        ("byte-order mark before the JSON: send UTF-8 without one", "byte-order mark before the JSON"),
        ("not JSONish", "other"),
        ("poisoned", "other"),
        ("", "other"),
        ("something new: 42", "other"),
    ],
)
def test_reason_kinds(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


def test_the_dead_letter_counter_has_one_series_per_kind_not_per_payload() -> None:
    m = Metrics()
    rng = random.Random(7)
    payloads = []
    for i in range(300):
        name = "".join(rng.choices(string.ascii_lowercase, k=9))
        payloads.append(f'{{"id":"x{i}","text":"hi","{name}":"\\ud800"}}'.encode())
    _, bad = decode_all(payloads, "w")
    m.observe_drain(0.01, [], [b.letter.reason for b in bad], 0, [])
    m.observe_drain(0.01, [], ["control character U+0001 in text", "a brand new reason 12"], 0, [])
    series = {
        s.labels["reason"]: s.value
        for mf in m.registry.collect()
        if mf.name == "ticketq_dead_letters"
        for s in mf.samples
        if s.name.endswith("_total")
    }
    assert series == {"lone surrogate": 300.0, "control character": 1.0, "other": 1.0}


# -- finding 8: events name the dead payloads -----------------------------------------------------------


def test_an_event_names_the_digests_of_the_payloads_that_died() -> None:
    a, b = b'{"id": "T-1", "text": "   "}', b'{"id": "T-1", "text": ""}'
    letters = [
        DeadLetter("empty field: text", a, id="T-1"),
        DeadLetter("x", b, id="T-1"),
        DeadLetter("y", b"?"),
    ]
    event = Event.after(["T-2"], letters)
    assert event.ids == ["T-2"] and set(event.dead) == {"T-1"}
    assert event.dead_digests == {"T-1": [payload_digest(a), payload_digest(b)]}
    back = Event.from_json(event.to_json())
    assert back == event
    assert back.died("T-1", payload_digest(a)) and back.died("T-1") and not back.died("T-1", "0" * 40)
    assert not back.died("T-2")


def test_an_event_from_an_older_worker_counts_by_id() -> None:
    old = Event.from_json(b'{"ids": [], "dead": {"T-1": "empty field: text"}}')
    assert old.dead_digests == {} and old.died("T-1", "0" * 40)
    assert json.loads(Event(ids=["a"]).to_json()) == {"ids": ["a"], "dead": {}}  # unchanged when none died
    junk = Event.from_json(
        b'{"ids": [], "dead": {"T-1": "r"}, "dead_digests": {"T-1": "abc", "T-2": [1, "d"]}}'
    )
    assert junk.dead_digests == {"T-2": ["d"]} and junk.died("T-1", "abc")
