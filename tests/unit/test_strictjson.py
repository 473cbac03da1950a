"""The strict decoder's cost is linear in the payload: no payload under the size limit may cost a worker
more than a small fraction of a second (the audit's 64 KiB of escaped quotes took 25 s, holding the GIL,
and stalled every worker that recovered it)."""

from __future__ import annotations

import contextlib
import re
import time

import pytest

from producer.protocol import decode_ticket, peek_id
from producer.strictjson import MAX_DEPTH, MAX_PAYLOAD_BYTES, BadTicket, loads_strict

N = MAX_PAYLOAD_BYTES
HOSTILE = {
    "escaped quotes, unterminated": ('"' + '\\"' * (N // 2 - 1)).encode(),
    "escaped quotes in a ticket": ('{"id":"x","text":"' + '\\"' * (N // 2 - 20)).encode(),
    "bare quotes": b'"' * N,
    "backslashes": ('"' + "\\\\" * (N // 2 - 1) + '"').encode(),
    "deep lists": b"[" * (N // 2) + b"]" * (N // 2),
    "deep objects, unterminated": (b'{"a":' * (N // 5))[:N],
    "16,000 strings": ("[" + ",".join(['"a"'] * (N // 4 - 1)) + "]").encode()[:N],
    "16,000 escaped surrogate pairs": ('["' + "\\ud83d\\ude00" * (N // 12 - 1) + '"]').encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_no_payload_under_the_limit_is_slow_to_decide(name: str) -> None:
    raw = HOSTILE[name]
    assert len(raw) <= N
    start = time.perf_counter()
    for decode in (decode_ticket, peek_id):  # a worker decodes it, then names its dead letter
        with contextlib.suppress(BadTicket):
            decode(raw)
    # linear: about a millisecond here; the quadratic pass took 25 s. A bound 100x above any machine.
    assert time.perf_counter() - start < 2.0, name


def test_depth_is_counted_on_the_parsed_payload() -> None:
    ok = b'{"id": "a", "text": "b", "x": ' + b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1) + b"}"
    assert loads_strict(ok)["id"] == "a"
    deep = ok.replace(b"[", b"[[", 1).replace(b"]", b"]]", 1)
    with pytest.raises(BadTicket, match=f"nested too deeply: more than {MAX_DEPTH} levels"):
        loads_strict(deep)
    brackets_in_strings = b'{"id": "a", "text": "' + b"[{" * 1000 + b'"}'
    assert loads_strict(brackets_in_strings)["text"].startswith("[{")


def test_lone_surrogates_are_found_behind_any_escape_and_pairs_pass() -> None:
    with pytest.raises(BadTicket, match=re.escape("lone surrogate U+D800 in field x[0]")):
        loads_strict(b'{"id": "a", "text": "b", "x": ["\\ud800"]}')
    with pytest.raises(BadTicket, match=re.escape("lone surrogate U+DFFF in text")):
        loads_strict(b'{"id": "a", "text": "\\uDFFF"}')
    assert loads_strict(b'{"id": "a", "text": "\\ud83d\\ude00"}')["text"] == "\U0001f600"
    assert loads_strict(b'{"id": "a", "text": "\\\\ud800"}')["text"] == "\\ud800"  # an escaped backslash


HUGE = "1" + "0" * 400  # a JSON number (json.loads reads it as an int); float() of it raises OverflowError


def test_numbers_read_outside_the_strict_decoder_never_raise() -> None:
    """A 401-digit enqueued_at at the queue's tail crashed a worker's depth gauge (exit 70) and froze the
    dashboard's overview: every reader of such numbers goes through finite_number."""
    from producer.strictjson import finite_number
    from worker.records import enqueued_at

    assert enqueued_at(f'{{"id": "a", "text": "b", "enqueued_at": {HUGE}}}'.encode()) is None
    assert enqueued_at(f'{{"enqueued_at": -{HUGE}}}'.encode()) is None
    assert enqueued_at(b'{"enqueued_at": 1e308}') == 1e308 and enqueued_at(b'{"enqueued_at": 5}') == 5.0
    for junk in (int(HUGE), -int(HUGE), float("nan"), float("inf"), True, "7", None, [1]):
        assert finite_number(junk) is None
    assert finite_number(7) == 7.0 and finite_number(-0.5) == -0.5


def test_the_dashboard_and_corrections_read_huge_numbers_as_absent() -> None:
    from producer.dashboard.overview import _is_number
    from producer.learning import Correction

    assert not _is_number(int(HUGE)) and _is_number(3)
    raw = f'{{"label": "billing", "text": "t", "at": {HUGE}}}'
    assert Correction.from_json("T-1", raw).at == 0.0
