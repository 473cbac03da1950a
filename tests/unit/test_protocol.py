"""The wire contract: the strict decoder's reasons, and formats that round-trip."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producer.protocol import (
    MAX_EVENT_BYTES,
    MAX_ID_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_REASON_CHARS,
    MAX_TEXT_CHARS,
    BadTicket,
    DeadLetter,
    Event,
    Keys,
    Result,
    Ticket,
    decode_ticket,
    id_token,
    payload_digest,
    peek_id,
)
from producer.strictjson import MAX_DEPTH, Unwritable, clean


def test_good_ticket_keeps_extra_fields_and_strips_text() -> None:
    t = decode_ticket(b'{"id": "T-1", "text": "  charged twice\\n", "v": 1, "customer": "acme", "n": 3}')
    assert t == Ticket(id="T-1", text="charged twice", fields={"customer": "acme", "n": 3})


def test_ticket_to_json_round_trips() -> None:
    t = Ticket(id="é-1", text="ünïcode ok", fields={"k": [1, 2]})
    assert decode_ticket(t.to_json()) == t


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"not json", "not JSON"),
        (b"[" * 30_000 + b"]" * 30_000, "nested too deeply: more than 32 levels"),
        (b"[1, 2]", "not a JSON object: got list"),
        (b'"str"', "not a JSON object: got str"),
        (b'{"id": "a", "text": "b", "v": 2}', "unsupported version: 2"),
        (b'{"id": "a", "text": "b", "v": true}', "unsupported version: True"),
        (b'{"text": "b"}', "missing field: id"),
        (b'{"id": 7, "text": "b"}', "wrong type: id must be a string, got int"),
        (b'{"id": null, "text": "b"}', "wrong type: id must be a string, got null"),
        (b'{"id": "a\\u0007b", "text": "b"}', "control character U+0007 in id"),
        (b'{"id": "a\\nb", "text": "b"}', "control character U+000A in id"),
        (b'{"id": "  ", "text": "b"}', "empty field: id"),
        (json.dumps({"id": "x" * (MAX_ID_CHARS + 1), "text": "b"}).encode(), "id too long"),
        (b'{"id": "a"}', "missing field: text"),
        (b'{"id": "a", "text": ["b"]}', "wrong type: text must be a string, got list"),
        (b'{"id": "a", "text": " \\t\\n "}', "empty field: text"),
        (json.dumps({"id": "a", "text": "x" * (MAX_TEXT_CHARS + 1)}).encode(), "text too long"),
        (b'{"id": "a", "text": "bell \\u0007"}', "control character U+0007"),
        (b'{"id": "a", "text": "del \\u007f"}', "control character U+007F"),
        (b'{"id": "a", "text": "half \\ud800 pair"}', "lone surrogate U+D800"),
        (b'{"id": "a", "text": "\\u001c\\u001d edges \\u0085"}', "control character U+001C in text"),
        (b"null", "not a JSON object: got null"),
        (json.dumps({"id": "a", "text": "b", "v": "A" * 60_000}).encode(), "unsupported version: 'AAA"),
        (b"{" + b" " * MAX_PAYLOAD_BYTES + b"}", "payload too large"),
    ],
)
def test_every_bad_input_has_its_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(BadTicket) as info:
        decode_ticket(raw)
    assert info.value.reason.startswith(reason), info.value.reason


def test_a_reason_quotes_a_producers_value_bounded() -> None:
    with pytest.raises(BadTicket) as info:
        decode_ticket(json.dumps({"id": "a", "text": "b", "v": {"k": "A" * 60_000}}))
    assert len(info.value.reason) < 120 and info.value.reason.endswith("(this worker speaks v1)")


def test_fields_may_not_replace_the_protocols_keys() -> None:
    """A service passing a user's metadata as fields must not let it take another ticket's id or text."""
    for key in ("id", "text", "v", "enqueued_at"):
        with pytest.raises(ValueError, match=f"fields may not use the protocol's keys \\['{key}'\\]"):
            Ticket("T-1", "charged twice", fields={key: "T-victim"})
    assert decode_ticket(Ticket("T-1", "charged twice", fields={"ids": "x"}).to_json()).id == "T-1"


def test_tab_newline_and_carriage_return_are_allowed() -> None:
    assert decode_ticket(b'{"id": "a", "text": "a\\tb\\r\\nc"}').text == "a\tb\r\nc"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_decode_or_raise_bad_ticket(raw: bytes) -> None:
    try:
        assert isinstance(decode_ticket(raw), Ticket)
    except BadTicket as exc:
        assert exc.reason


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_ticketish = st.fixed_dictionaries(
    {},
    optional={"id": _json | st.text(max_size=10), "text": _json | st.text(max_size=60), "v": _json},
)
_extras = st.dictionaries(st.text(max_size=8), _json, max_size=3)
_ticketish = st.tuples(_ticketish, _extras).map(lambda pair: pair[1] | pair[0])


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _ticketish))
def test_arbitrary_json_decodes_or_raises_bad_ticket(obj: object) -> None:
    raw = json.dumps(obj).encode()
    try:
        ticket = decode_ticket(raw)
    except BadTicket as exc:
        assert exc.reason
        return
    assert isinstance(obj, dict)
    assert ticket.id == obj["id"] and ticket.text == str(obj["text"]).strip()
    assert "id" not in ticket.fields and "text" not in ticket.fields and "v" not in ticket.fields


def test_result_round_trips() -> None:
    r = Result(id="a", label="billing", scores={"billing": 0.9, "other": 0.1}, model="m", digest="d", at=5.0)
    assert Result.from_json(r.to_json()) == r


def test_dead_letter_keeps_utf8_as_text_and_other_bytes_as_base64() -> None:
    text = DeadLetter("r", "é".encode(), worker="w", at=1.0, id="x")
    assert json.loads(text.to_json())["payload"] == "é"
    assert DeadLetter.from_json(text.to_json()) == text
    binary = DeadLetter("r", b"\xff\x00", at=1.0)
    assert "payload_b64" in json.loads(binary.to_json())
    assert DeadLetter.from_json(binary.to_json()).payload == b"\xff\x00"


def test_dead_letter_of_an_oversized_payload_is_bounded() -> None:
    letter = json.loads(DeadLetter("too big", b"x" * (MAX_PAYLOAD_BYTES * 2)).to_json())
    assert letter["payload_bytes"] == MAX_PAYLOAD_BYTES * 2
    assert len(letter["payload"]) == MAX_PAYLOAD_BYTES


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"id": "a", "text": 5}', "a"),
        (b'{"id": 5}', None),
        (b'{"id": ""}', None),
        (b"[]", None),
        (b"\xff", None),
        (b"nope", None),
    ],
)
def test_peek_id_is_best_effort(raw: bytes, expected: str | None) -> None:
    assert peek_id(raw) == expected


def test_event_round_trips_and_tolerates_junk() -> None:
    e = Event(ids=["a", "b"], dead={"c": "duplicate id"})
    assert Event.from_json(e.to_json()) == e
    assert Event.from_json(b"junk") == Event()
    assert Event.from_json(b'{"ids": "a", "dead": []}') == Event()


def test_an_event_that_left_ids_out_round_trips_and_a_bad_list_reads_as_none() -> None:
    e = Event(ids=["a"], left_out=[id_token("b"), id_token("c")])
    assert Event.from_json(e.to_json()) == e
    assert id_token("b") == hashlib.sha1(b"b").hexdigest()[:12]  # as documented, for other languages
    for bad in ("true", '"3"', "3", "null", "{}"):
        assert Event.from_json('{"ids": ["a"], "left_out": ' + bad + "}") == Event(ids=["a"])
    assert Event.from_json('{"left_out": ["x", 5]}') == Event(left_out=["x"])


def test_an_ack_of_ordinary_tickets_leaves_nothing_out_of_its_event() -> None:
    ids = [f"T-{i:06d}" for i in range(500)]  # ACK_STEP of them
    letters = [DeadLetter("empty field: text", b"x" * 100, id=f"D-{i:06d}") for i in range(100)]
    event = Event.after(ids, letters)
    assert event.left_out == [] and event.ids == ids and len(event.dead) == 100


def test_an_event_of_long_ids_stays_within_its_bytes_and_keeps_the_short_entries() -> None:
    """Found by an audit: ids of 256 four-byte characters made one ack's event over half a megabyte,
    copied by Redis to every waiter. Now it stays within MAX_EVENT_BYTES; what is left out is counted, the
    largest first, so ordinary tickets acked beside such ids are still named."""
    long_ids = [f"{i:03d}" + "\U0001f600" * 253 for i in range(500)]
    letters = [
        DeadLetter("r" * MAX_REASON_CHARS, f"{i}".encode(), id=f"{i:03d}" + "\u00e9" * 253)
        for i in range(200)
    ]
    letters += [DeadLetter("empty field: text", b"short", id="D-1"), DeadLetter("again", b"other", id="D-1")]
    event = Event.after([*long_ids, "T-1", "T-2"], letters)
    raw = event.to_json().encode()
    assert len(raw) <= MAX_EVENT_BYTES
    assert Event.from_json(raw) == event
    assert {"T-1", "T-2"} <= set(event.ids) and event.dead["D-1"] == "empty field: text"
    assert len(event.dead_digests["D-1"]) == 2  # both of its payloads, under one id
    out = set(event.left_out)
    assert len(event.ids) + len(event.dead) + len(out) == 502 + 201 and out
    assert all(id_token(i) in out for i in long_ids if i not in event.ids)  # each named by its token
    assert not {id_token(i) for i in ("T-1", "T-2", "D-1")} & out


@given(
    st.lists(st.text(max_size=MAX_ID_CHARS), max_size=60),
    st.lists(st.tuples(st.text(max_size=MAX_ID_CHARS), st.text(max_size=MAX_REASON_CHARS)), max_size=60),
    st.integers(min_value=0, max_value=8 * 1024),
)
def test_any_event_stays_within_its_budget(
    written: list[str], dead: list[tuple[str, str]], budget: int
) -> None:
    letters = [DeadLetter(reason, tid.encode("utf-8", "surrogatepass"), id=tid) for tid, reason in dead]
    event = Event.after(written, letters, budget=budget)
    raw = event.to_json().encode()
    names = len(written) + len({clean(t) for t, _ in dead})
    assert len(raw) <= max(budget, len('{"ids": [], "dead": {}, "left_out": []}') + 16 * names)
    missing = Counter(map(clean, written)) - Counter(event.ids)  # written twice, kept once: one left out
    missing.update(d for d in {clean(t) for t, _ in dead} if d not in event.dead)
    assert {id_token(m) for m in missing} == set(event.left_out)


def test_keys_share_the_prefix_and_its_hash_tag() -> None:
    k = Keys("{tq}")
    names = [k.tickets, k.results, k.dead, k.workers, k.attempts, k.events, k.inflight("w"), k.heartbeat("w")]
    assert all(n.startswith("{tq}:") for n in names)
    assert len(set(names)) == len(names)


def test_digest_is_sha1_of_the_raw_bytes() -> None:
    assert payload_digest(b"abc") == "a9993e364706816aba3e25717850c26c9cd0d89d"


def test_digest_of_an_oversized_payload_hashes_a_bounded_prefix_and_the_size() -> None:
    """Audit finding 5: a payload over 64 KiB (refused anyway) is known by its first 64 KiB and its size,
    so hashing it (here and in claim.lua) costs the same whatever its size."""
    import hashlib

    limit = b"a" * 65536
    assert payload_digest(limit) == hashlib.sha1(limit).hexdigest()  # every valid payload: as before
    big = limit + b"b" * 1000
    assert payload_digest(big) == hashlib.sha1(limit + b"\n66536").hexdigest()
    assert payload_digest(big) == payload_digest(big[:-1] + b"c")  # same prefix and size: same digest
    assert payload_digest(big) != payload_digest(big + b"b")  # another size


# -- issue 19: the hostile-input family, each decided on purpose (README, wire protocol) ----------

DEEP = b'{"id": "a", "text": "b", "d": ' + b"[" * (MAX_DEPTH) + b"]" * (MAX_DEPTH) + b"}"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (rb'{"id":"\ud800","text":"hello"}', "lone surrogate U+D800 in id"),  # the outage's payload
        (rb'{"id":"a","text":"b","k":"\udfff"}', "lone surrogate U+DFFF in field k"),
        (rb'{"id":"a","text":"b","k\ud800":1}', "lone surrogate U+D800 in a key"),
        (rb'{"id":"a","text":"b","k":[1,{"x":["\ud83d"]}]}', "lone surrogate U+D83D in field k[1].x[0]"),
        (DEEP, "nested too deeply: more than 32 levels"),
        (b'{"id": "a", "text": "b", "s": "' + b"[" * 1000 + b'"}', None),  # brackets inside a string
        (b'{"id": "a", "text": "b", "n": ' + b"9" * 5000 + b"}", "number out of range: 9999"),
        (b'{"id": "a", "text": "b", "n": 9223372036854775808}', "number out of range"),
        (b'{"id": "a", "text": "b", "n": -9223372036854775808}', None),
        (b'{"id": "a", "text": "b", "n": NaN}', "not strict JSON: NaN is not a JSON number"),
        (b'{"id": "a", "text": "b", "n": -Infinity}', "not strict JSON: -Infinity"),
        (b'{"id": "a", "text": "b", "n": 1e999}', "number out of range: 1e999 overflows a 64-bit float"),
        (b'{"id": "a", "text": "b", "n": 1e-999}', None),  # underflows to 0.0: finite, kept
        ('{"id": "a\u0085", "text": "b"}'.encode(), "control character U+0085 in id"),
        ('{"id": "a", "text": "b\u009b[31m"}'.encode(), "control character U+009B in text"),
        ('{"id": "inv\u202eeciov", "text": "b"}'.encode(), "format character U+202E in id (bidi control)"),
        ('{"id": "a\u2066b", "text": "b"}'.encode(), "format character U+2066 in id (bidi control)"),
        ('{"id": "a\u2028b", "text": "b"}'.encode(), "format character U+2028 in id (line separator)"),
        ('{"id": "T-\u200d1", "text": "b"}'.encode(), "format character U+200D in id (invisible)"),
        (b'{"id": "..", "text": "b"}', "id '..' is not an id (a path segment: '.' and '..' are refused)"),
        (b'{"id": ".", "text": "b"}', "id '.' is not an id (a path segment: '.' and '..' are refused)"),
        (b'{"id": "...", "text": "b"}', None),
        ('{"id": "T-\u00ad1", "text": "b"}'.encode(), "format character U+00AD in id (invisible)"),
        ('{"id": "T-\U000e0041", "text": "b"}'.encode(), "format character U+E0041 in id (invisible)"),
        ('{"id": "T-1", "text": "a\u200db \u00ad"}'.encode(), None),  # kept in text: emoji need them
        ('{"id": "a", "text": "\u05e9\u05dc\u05d5\u05dd \u200f ok"}'.encode(), None),  # bidi text stays
        (b'\xef\xbb\xbf{"id": "a", "text": "b"}', "byte-order mark before the JSON"),
        (b'{"id": "a", "id": "b", "text": "c"}', "duplicate key: id"),
        (b'{"id": "a", "text": "b", "f": {"x": 1, "x": 2}}', "duplicate key: x"),
    ],
)
def test_hostile_inputs_are_refused_with_a_reason_or_kept_strictly(raw: bytes, reason: str | None) -> None:
    if reason is None:
        ticket = decode_ticket(raw)
        assert Result("a", "l", {"l": 1.0}, "m", "d", fields=ticket.fields).to_json()  # strict JSON
        return
    with pytest.raises(BadTicket) as info:
        decode_ticket(raw)
    assert info.value.reason.startswith(reason), info.value.reason
    DeadLetter(info.value.reason, raw, id=peek_id(raw)).to_json().encode("utf-8")  # always writable


def test_nesting_up_to_the_limit_is_accepted() -> None:
    ok = b'{"id": "a", "text": "b", "d": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert decode_ticket(ok).fields["d"]


def test_peek_id_never_returns_an_id_a_ticket_could_not_carry() -> None:
    assert peek_id(rb'{"id":"\ud800","text":"hello"}') is None
    assert peek_id('{"id":"a\u202e","text":"x"}'.encode()) is None
    assert peek_id(b'{"id":"a","id":"b"}') is None


def test_results_are_strict_json_or_unwritable() -> None:
    with pytest.raises(Unwritable, match="Out of range float"):
        Result("a", "l", {"l": float("nan")}, "m", "d").to_json()
    with pytest.raises(Unwritable, match="surrogates not allowed"):
        Result("a", "l", {"l": 1.0}, "m", "d", fields={"k": "\ud800"}).to_json()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=30))
def test_any_escaped_text_decodes_to_a_writable_ticket_or_a_reason(value: str) -> None:
    raw = json.dumps({"id": value or "x", "text": value or "x", value: value}).encode()  # \\u escapes
    try:
        ticket = decode_ticket(raw)
    except BadTicket as exc:
        DeadLetter(exc.reason, raw, id=peek_id(raw)).to_json().encode("utf-8")
        return
    Result(ticket.id, "l", {"l": 1.0}, "m", "d", fields=ticket.fields).to_json().encode("utf-8")


def test_result_answers_round_trip_and_are_absent_for_one_question() -> None:
    from producer.protocol import Result

    plain = Result(id="T-1", label="billing", scores={"billing": 0.9, "other": 0.1}, model="m", digest="d")
    assert "answers" not in json.loads(plain.to_json())
    answers = {"intent": {"label": "lost_card", "scores": {"lost_card": 0.8, "refund": 0.2}, "head": "3"}}
    asked = Result(id="T-1", label="billing", scores=plain.scores, model="m", digest="d", answers=answers)
    wire = json.loads(asked.to_json())
    assert wire["answers"] == answers and wire["label"] == "billing"
    assert Result.from_json(asked.to_json()).answers == answers
    odd = {**wire, "answers": {"intent": {"label": 3}, "ok": {"label": "x", "scores": {"x": 1.0}}}}
    assert Result.from_json(json.dumps(odd)).answers == {"ok": {"label": "x", "scores": {"x": 1.0}}}


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "1" * 400, "-1e999"])
def test_a_result_whose_numbers_are_not_finite_is_refused_as_a_whole_or_its_answer_left_out(bad: str) -> None:
    """A score, time or confidence of NaN or of 400 digits (JSON both) was read as a number: float() of it
    raised OverflowError in ``review``, the dashboard's pages (500 for everyone) and ``get``."""
    from producer.protocol import Result

    good = json.loads(
        Result(id="T-1", label="a", scores={"a": 0.9, "b": 0.1}, model="m", digest="d").to_json()
    )
    for key in ("scores", "at", "queued_s", "took_s", "confidence"):
        wire = json.dumps({**good, key: {"a": "@", "b": 0.1} if key == "scores" else "@"}).replace('"@"', bad)
        with pytest.raises(ValueError, match=f"not a result: .*{'score' if key == 'scores' else key}"):
            Result.from_json(wire)
    answers = {"q": {"label": "x", "scores": {"x": "@"}}, "ok": {"label": "x", "scores": {"x": 1.0}}}
    wire = json.dumps({**good, "answers": answers}).replace('"@"', bad)
    assert Result.from_json(wire).answers == {"ok": {"label": "x", "scores": {"x": 1.0}}}


def test_stage_writes_every_answer_on_the_result() -> None:
    from collections.abc import Callable, Sequence
    from typing import Any, ClassVar

    from worker.engine.types import Answer, BatchStats, Prediction
    from worker.review import Threshold
    from worker.stage import process

    class Asking:
        name = "fake"
        labels: ClassVar[list[str]] = ["a", "b"]

        def describe(self) -> dict[str, Any]:
            return {}

        def classify(
            self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
        ) -> tuple[list[Prediction], list[BatchStats]]:
            answer = Answer("x", {"x": 0.7, "y": 0.3}, head="h1")
            return [Prediction("a", {"a": 1.0, "b": 0.0}, {}, answers={"q": answer}) for _ in texts], []

    out = process([b'{"id": "1", "text": "hi"}'], Asking(), "w")
    (done,) = out.finished
    assert json.loads(done.result.to_json())["answers"] == {
        "q": {"label": "x", "scores": {"x": 0.7, "y": 0.3}, "confidence": 0.7, "head": "h1"}
    }
    assert done.result.questions_to_review() == []
    # below the question's own threshold: marked on the answer, not on the primary (sure at 1.0)
    strict = {"q": Threshold(0.8, "test")}
    (unsure,) = process([b'{"id": "1", "text": "hi"}'], Asking(), "w", question_review=strict).finished
    wire = json.loads(unsure.result.to_json())
    assert wire["answers"]["q"]["review"] is True and "review" not in wire
    assert Result.from_json(unsure.result.to_json()).questions_to_review() == ["q"]
    lenient = {"q": Threshold(0.7, "test")}  # at the threshold is not below it
    (sure,) = process([b'{"id": "1", "text": "hi"}'], Asking(), "w", question_review=lenient).finished
    assert "review" not in json.loads(sure.result.to_json())["answers"]["q"]


def test_a_dead_letter_with_an_absurd_time_still_reads() -> None:
    """P:dead is read by wait, the dead command and the dashboard: a letter whose "at" is a 400-digit
    integer (valid JSON; float() of it raises OverflowError, which their ValueError handlers miss) reads
    with no time instead of raising."""
    from producer.protocol import DeadLetter

    for at in ("1" + "0" * 400, "1e999", '"soon"', "null"):
        raw = '{"reason": "not JSON: x", "payload": "{", "id": "T-1", "at": ' + at + "}"
        letter = DeadLetter.from_json(raw)
        assert (letter.id, letter.reason, letter.at) == ("T-1", "not JSON: x", 0.0)
    assert DeadLetter.from_json('{"reason": "r", "payload": "p", "at": 12.5}').at == 12.5


def test_result_scores_keeps_each_answers_most_probable_labels_and_nothing_else_changes() -> None:
    """``--result-scores N``: a result of dozens of labels carries every label's score (~3 KiB for 77
    intents); with N, each answer keeps its N most probable, most probable first, its label always among
    them; its label, confidence, review mark and review margin are the same as with every score."""
    from collections.abc import Callable, Sequence
    from typing import Any, ClassVar

    from producer.protocol import review_margin
    from worker.contract import kept_scores
    from worker.engine.types import Answer, BatchStats, Prediction
    from worker.review import Threshold
    from worker.stage import process

    intents = {f"i{k}": (k + 1) / 210 for k in range(20)}  # i19 most probable, then i18, ...

    class Many:
        name = "fake"
        labels: ClassVar[list[str]] = list(intents)

        def describe(self) -> dict[str, Any]:
            return {}

        def classify(
            self, texts: Sequence[str], *, on_pass: Callable[[BatchStats], None] | None = None
        ) -> tuple[list[Prediction], list[BatchStats]]:
            answer = Answer("i19", dict(intents), head="h1")
            return [Prediction("i19", dict(intents), {}, answers={"q": answer}) for _ in texts], []

    raw = [b'{"id": "1", "text": "hi"}']
    review, asked = Threshold(0.5, "test"), {"q": Threshold(0.5, "test")}
    (whole,) = process(raw, Many(), "w", review=review, question_review=asked).finished
    (kept,) = process(raw, Many(), "w", review=review, question_review=asked, keep_scores=3).finished
    assert list(whole.result.scores) == list(intents)  # every label, in the engine's order
    assert list(kept.result.scores) == ["i19", "i18", "i17"]
    assert list(kept.result.answers["q"]["scores"]) == ["i19", "i18", "i17"]
    for field in ("label", "confidence", "review"):
        assert getattr(kept.result, field) == getattr(whole.result, field)
    assert {k: v for k, v in kept.result.answers["q"].items() if k != "scores"} == {
        k: v for k, v in whole.result.answers["q"].items() if k != "scores"
    }
    assert review_margin(kept.result.scores) == review_margin(whole.result.scores)
    assert len(kept.result.to_json()) < len(whole.result.to_json()) / 2
    # a label outside the top (a forced one) is kept in place of the last; fewer labels than N: all
    assert list(kept_scores(intents, "i0", 3)) == ["i19", "i18", "i0"]
    assert kept_scores({"a": 0.2, "b": 0.8}, "b", 5) == {"a": 0.2, "b": 0.8}


def test_result_scores_needs_two_the_review_margin_reads() -> None:
    from worker.settings import ConfigError, Settings

    assert Settings(result_scores=2).result_scores == 2
    with pytest.raises(ConfigError, match="result-scores"):
        Settings(result_scores=1)
