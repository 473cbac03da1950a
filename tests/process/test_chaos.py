"""A small chaos run in the suite: real workers SIGKILLed and SIGTERMed mid-batch, one worker's
connections killed from the server, Redis restarted and, for a second, full; still nothing lost and
nothing in flight.

The large run, and how to repeat it, is in docs/chaos.md (``python -m tools.chaos``).
"""

from __future__ import annotations

import pytest
from support import need_binary

from tools.chaos.cli import render
from tools.chaos.run import Config, run, unsettled

pytestmark = [pytest.mark.redis, pytest.mark.process]


@pytest.fixture(scope="module")
def redis_server_binary() -> None:
    need_binary("redis-server")  # the chaos run starts (and restarts) a server of its own


@pytest.mark.timeout(90)
def test_a_small_chaos_run_loses_nothing(redis_server_binary: None) -> None:
    cfg = Config(
        tickets=400, workers=3, producers=2, kills=5, client_kills=1, redis_restarts=1, redis_full=1,
        duration_s=7.0, seed=11, delay_ms=20, heartbeat_s=1.0, canaries=10, startup_s=30, settle_s=40,
    )  # fmt: skip
    summary = run(cfg, say=lambda _: None)
    report = render(summary)
    v, c = summary.verdict, summary.chaos
    assert summary.ok, report
    assert v.lost == 0 and v.wrong == 0 and v.stray == 0, report
    assert v.left_in_flight == 0 and v.left_in_input == 0, report
    assert v.ok == v.planned, report  # every payload where it belongs, none poisoned by the kills
    assert c.sigkill + c.sigterm == 5 and c.client_kills == 1, report
    assert c.redis_restarts == 1 and c.redis_full == 1, report
    assert c.connections_killed >= 1 and c.workers_started == 3 + 5, report
    assert summary.canaries_served and not summary.unexpected_exits, report


# -- issue 19: a whole-path property test -------------------------------------------------------------------
# Hypothesis makes the payloads; the real service (fake classifier) on the real Redis takes them, while
# workers are SIGKILLed and replaced among them. TICKETQ_PROPERTY_PAYLOADS=200000 runs a longer one.

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import cast  # noqa: E402

import redis  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support import wait_for  # noqa: E402

from producer.protocol import MAX_PAYLOAD_BYTES, DeadLetter, Keys, Result  # noqa: E402
from tools.chaos.fleet import Fleet  # noqa: E402

PAYLOADS = int(os.environ.get("TICKETQ_PROPERTY_PAYLOADS", "10000"))
PER_EXAMPLE = 100
_ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None)  # surrogates too
_scalar = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(_ANY_CHAR, max_size=12)
)  # floats: NaN and Infinity, which json.dumps writes as bare words
_value = st.recursive(
    _scalar,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(_ANY_CHAR, max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_ticketish = st.fixed_dictionaries(
    {"id": st.text(_ANY_CHAR, min_size=1, max_size=8), "text": st.text(_ANY_CHAR, min_size=1, max_size=40)},
    optional={"x": _value, "v": st.sampled_from([1, 2, "1"])},
)


def _json(obj: object, ascii_only: bool) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


_hostile = st.one_of(
    st.binary(max_size=120),
    st.builds(_json, _value, st.booleans()),
    st.builds(_json, _ticketish, st.booleans()),  # ensure_ascii: lone surrogates as \\ud800 escapes
    st.integers(30, 5000).map(lambda d: b'{"id": "deep", "text": "x", "d": ' + b"[" * d + b"]" * d + b"}"),
    st.integers(20, 6000).map(lambda n: b'{"id": "big", "text": "x", "n": ' + b"7" * n + b"}"),
    st.sampled_from([b"NaN", b"-Infinity", b"1e999", b"1E400", b"-0", b"9" * 30]).map(
        lambda v: b'{"id": "num", "text": "x", "n": ' + v + b"}"
    ),
    st.builds(
        lambda k: b'{"id": "dup", "%s": 1, "%s": 2, "text": "x"}' % (k, k), st.sampled_from([b"a", b"id"])
    ),
    st.builds(lambda b: b"\xef\xbb\xbf" + b, st.builds(_json, _ticketish, st.booleans())),
    st.sampled_from(["\u202e", "\u0085", "\u2028", "\u200f", "\x9b"]).map(
        lambda c: _json({"id": f"bidi{c}", "text": "x"}, False)
    ),
)


def _spaces(n: int) -> bytes:
    out = b""
    while True:
        n, digit = divmod(n, 3)
        out += b" \t\n"[digit : digit + 1]
        if not n:
            return out + b"\r"


@pytest.mark.timeout(300)
def test_any_payload_ends_in_exactly_one_place_and_no_worker_exits(
    redis_url: str, prefix: str, fleets: Callable[..., Fleet]
) -> None:
    keys = Keys(prefix)
    r = redis.Redis.from_url(redis_url)
    # --max-dead 0 keeps every dead letter: the default bound (10,000) would trim some in a longer run,
    # and the accounting below must see each payload's end
    flags = ("--drain", "64", "--batch-size", "16", "--heartbeat-s", "1", "--max-dead", "0")
    fleet = fleets(redis_url, *flags, prefix=prefix)
    for _ in range(2):
        fleet.spawn()
    pushed: dict[str, bytes] = {}  # digest -> payload
    copies: dict[str, int] = {}  # digest -> how many times those exact bytes were pushed
    good: set[str] = set()  # ids of valid tickets, which must all be labelled
    serial = 0
    began = time.monotonic()

    @settings(
        max_examples=max(1, PAYLOADS // PER_EXAMPLE),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(st.tuples(st.booleans(), _hostile), min_size=PER_EXAMPLE, max_size=PER_EXAMPLE))
    def feed(batch: list[tuple[bool, bytes]]) -> None:
        nonlocal serial
        out = []
        for valid, raw in batch:
            serial += 1
            if valid:  # good tickets mixed in
                raw = _json({"id": f"ok-{serial}", "text": f"billing: refund #{serial}"}, False)
                good.add(f"ok-{serial}")
            digest = hashlib.sha1(raw).hexdigest()
            if digest in pushed:  # drawn before: made distinct with trailing JSON white space
                raw += _spaces(serial)
                digest = hashlib.sha1(raw).hexdigest()
            if digest not in pushed and len(raw) <= MAX_PAYLOAD_BYTES:
                pushed[digest] = raw
                # some pushed again, the same bytes, as a producer's retry does: three copies held by a
                # killed worker once counted three attempts (max-attempts) and lost one to an empty letter
                copies[digest] = 3 if serial % 13 == 0 else 2 if serial % 7 == 0 else 1
                out += [raw] * copies[digest]
        if out:
            r.lpush(keys.tickets, *out)
        if serial % 2000 < PER_EXAMPLE:  # now and then a worker dies mid-drain and a new one takes over
            victim = fleet.serving()[0]
            fleet.signal(victim, signal.SIGKILL)
            victim.kill()
            fleet.spawn()

    feed()
    # one atomic count (tools.chaos.run.unsettled): read key by key, a recovery moving a killed worker's
    # claim back to the input between two reads looked like "all handled" on a loaded machine
    wait_for(lambda: unsettled(r, keys) == 0, 120, "every payload handled")
    took = time.monotonic() - began
    assert not fleet.reap(), [w.tail() for w in fleet.workers if w.unexpected_exit]
    assert all(w.alive for w in fleet.serving())  # no worker exits that was not killed
    fleet.stop_all()
    assert not [w.id for w in fleet.workers if w.unexpected_exit]

    def strict(raw: bytes) -> dict[str, object]:
        obj = json.loads(raw.decode("utf-8"), parse_constant=lambda c: pytest.fail(f"{c} stored"))
        assert isinstance(obj, dict)
        return obj

    ends: dict[str, list[str]] = {d: [] for d in pushed}
    results = {k.decode(): strict(v) for k, v in cast(dict[bytes, bytes], r.hgetall(keys.results)).items()}
    for tid, result in results.items():
        ends[str(result["digest"])].append(f"result {tid}")
    for raw in cast(list[bytes], r.lrange(keys.dead, 0, -1)):
        letter = strict(raw)
        assert letter["reason"], letter
        ends[hashlib.sha1(DeadLetter.from_json(raw).payload).hexdigest()].append(str(letter["reason"]))

    def settled(digest: str, end: list[str]) -> bool:
        """Each push of a payload ends once: all its copies in one result (a copy again is a redelivery),
        or each in a dead letter with its reason; or, rarely, a result and the other copy poisoned by
        the kills."""
        answered = [e for e in end if e.startswith("result ")]
        letters = [e for e in end if not e.startswith("result ")]
        if answered:
            return (
                len(answered) == 1
                and len(letters) < copies[digest]
                and all(e.startswith("poison") for e in letters)
            )
        return len(letters) == copies[digest]

    wrong = {pushed[d][:80]: e for d, e in ends.items() if not settled(d, e)}
    assert not wrong, wrong  # each payload exactly once: a result or a dead letter with its reason
    assert sum(c > 1 for c in copies.values()) > len(pushed) // 10  # copies were pushed
    assert good <= set(results)  # every valid ticket labelled
    assert all(Result.from_json(json.dumps(results[i])).label == "billing" for i in good)
    rate = len(pushed) / took
    pushes = sum(copies.values())
    print(
        f"\nproperty test: {len(pushed)} payloads ({pushes} pushes) in {took:.1f} s ({rate:.0f} payloads/s)"
    )
    assert len(pushed) >= PAYLOADS * 0.9  # duplicates drawn twice are pushed once
    r.close()
