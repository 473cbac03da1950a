"""Against a real Redis: readers of results, kept texts and corrections ask for about a mebibyte a command
whatever the records hold, and return what they returned before. A producer may attach ~64 KiB to a ticket,
so each result, kept text and correction may be that large: one HMGET of 1,000 results took 64 MB and
34 ms of the shared Redis, one HSCAN COUNT 500 of P:labels 32 MB and 27 ms (an audit, SLOWLOG)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from support import narrow_redis

from producer import client as client_module
from producer.client import LARGEST_CORRECTION_BYTES, READ_BYTES, Client
from producer.learning import Correction
from producer.protocol import Keys, Result

pytestmark = pytest.mark.redis

FIELD_CHARS = 64_000  # a ticket's extra fields at about the most a payload holds (64 KiB)


def replies(c: Client, monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """The bytes each call of ``c.redis.<name>`` (HSCAN or HMGET) returns from now on, in a list that grows
    as it reads: the ids and values of an HSCAN step, the values of an HMGET."""
    got: list[int] = []
    real: Callable[..., Any] = getattr(c.redis, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if name == "hscan":
            got.append(sum(len(k) + len(v) for k, v in out[1].items()))
        else:
            got.append(sum(len(v) for v in out if v is not None))
        return out

    monkeypatch.setattr(c.redis, name, counted)
    return got


def big_result(tid: str, label: str = "billing") -> str:
    fields = {"customer": "acme", "attachment": tid + "x" * FIELD_CHARS}
    return Result(tid, label, {label: 0.9, "other": 0.1}, "m", "d" * 40, fields=fields, at=1.0).to_json()


def test_corrections_are_read_about_a_mebibyte_a_step_and_all_of_them(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each correction keeps its ticket's text (16,384 characters, 64 KiB of UTF-8): HSCAN COUNT 500 made
    one step return 32 MB. Every record is still read, malformed ones still skipped, a question's too."""
    text = "\U0001f600" * 16_383  # four bytes each
    records = {
        f"T-{i}": Correction(f"T-{i}", "billing", f"{i}{text}", at=float(i), by="ci", was="technical")
        for i in range(120)
    }
    assert max(len(c.to_json().encode()) for c in records.values()) <= LARGEST_CORRECTION_BYTES
    r.hset(keys.labels, mapping={tid: c.to_json() for tid, c in records.items()})
    r.hset(keys.labels, "junk", "not a correction")
    intent = keys.asking("intent").labels
    r.hset(intent, mapping={tid: c.to_json() for tid, c in list(records.items())[:40]})
    c = Client(r, keys.prefix)
    got = replies(c, monkeypatch, "hscan")
    assert {x.id: x for x in c.correction_records()} == records
    assert len(got) > 1 and max(got) <= READ_BYTES, max(got)
    got.clear()
    assert sorted(x.id for x in c.correction_records("intent")) == sorted(list(records)[:40])
    assert max(got) <= READ_BYTES
    assert [x[0] for x in c.corrections()] == [x.id for x in c.correction_records()]


def test_kept_texts_walk_results_about_a_mebibyte_a_step_and_return_what_they_did(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kept_texts reads ids only, but HSCAN returns each result with its id (Redis 7.0 has no NOVALUES):
    200 a step of results of 64 KiB was 12.5 MB. Smaller steps walk the hash in the same order, so the
    texts returned, and their order, are those the steps of 200 gave."""
    r.hset(keys.results, mapping={f"K-{i}": big_result(f"K-{i}") for i in range(80)})
    for i in range(80):
        if i % 7:  # every seventh text expired
            r.set(keys.text(f"K-{i}"), f"kept text {i % 50}")
    c = Client(r, keys.prefix)
    calls: list[tuple[Any, ...]] = []

    def walked(limit: int, **kw: Any) -> list[tuple[str, str]]:
        def accept(text: str) -> bool:  # what it is asked, in order; some said no to (not counted)
            calls.append((limit, text))
            return not text.endswith("3")

        return c.kept_texts(limit, accept=accept, **kw)

    got = replies(c, monkeypatch, "hscan")
    bounded = [walked(n) for n in (1, 5, 30, 1000)] + [walked(40, skip={"K-1", "K-2"})]
    assert len(got) > 1 and max(got) <= READ_BYTES, max(got)
    seen_bounded = list(calls)
    calls.clear()
    monkeypatch.setattr(client_module, "_KEPT_SCAN", 200)  # what it was
    before = [walked(n) for n in (1, 5, 30, 1000)] + [walked(40, skip={"K-1", "K-2"})]
    assert max(got) > 4 * READ_BYTES  # the whole hash (5 MB) in one step, as before
    assert bounded == before and seen_bounded == calls
    assert len(bounded[3]) == 80 - 12 - 7 and [t for _, t in bounded[3][:30]] == [t for _, t in bounded[2]]


def test_get_many_reads_results_about_a_mebibyte_an_hmget_and_returns_what_it_did(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1,000 results of 64 KiB made one HMGET of 64 MB (34 ms of Redis). Their sizes are read first
    (pipelined HSTRLEN), then HMGETs of at most READ_BYTES each (a larger result alone); what it returns
    is the same: the results in the order asked, ids without one left out, an unreadable one named."""
    ids = [f"G-{i}" for i in range(60)]
    r.hset(keys.results, mapping={tid: big_result(tid) for tid in ids[:40]})
    r.hset(
        keys.results,
        mapping={tid: Result(tid, "billing", {"billing": 1.0}, "m", "d").to_json() for tid in ids[40:50]},
    )
    r.hset(keys.results, "G-7", "not json")
    huge = Result("G-3", "billing", {"billing": 1.0}, "m", "d", fields={"x": "y" * (READ_BYTES + 1000)})
    r.hset(keys.results, "G-3", huge.to_json())  # by hand: larger than a command's budget, read alone
    asked = ["G-missing", *reversed(ids), "G-5"]  # the order asked, an id twice, ids without results
    expected = {}
    for tid in asked:
        raw = r.hget(keys.results, tid)
        if raw is not None and tid != "G-7":
            expected[tid] = Result.from_json(raw)
    c = Client(r, keys.prefix)
    got = replies(c, monkeypatch, "hmget")
    unreadable: dict[str, str] = {}
    found = c.get_many(asked, unreadable=unreadable)
    assert list(found.items()) == list(expected.items()) and list(unreadable) == ["G-7"]
    assert len(got) > 1 and sorted(got)[-2] <= READ_BYTES < max(got)  # the huge one alone
    assert max(got) < len(huge.to_json()) + 100
    assert c.get("G-1") == expected["G-1"] and c.get("G-missing") is None
    got.clear()
    monkeypatch.setattr(client_module, "_GET_CHUNK", 7)  # several pipelines of sizes: the same answer
    assert list(c.get_many(asked).items()) == list(expected.items()) and max(got) < len(huge.to_json()) + 100


def test_get_many_without_hstrlen_in_the_acl_reads_a_few_results_an_hmget(
    redis_url: str, r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threat model's waiter line grants HMGET, not HSTRLEN: push_and_wait as that user must still work.
    Refused the sizes once, the client reads at most _GET_PLAIN ids an HMGET (READ_BYTES of the largest
    results a ticket can make) and does not ask again."""
    ids = [f"A-{i}" for i in range(30)]
    r.hset(keys.results, mapping={tid: big_result(tid) for tid in ids[::2]})
    with narrow_redis(r, redis_url, keys.prefix, "-hstrlen") as narrow:
        c = Client(narrow, keys.prefix)
        sizes: list[int] = []
        real = c._result_sizes

        def counted(wanted: Any) -> list[int]:
            sizes.append(len(wanted))
            return real(wanted)

        monkeypatch.setattr(c, "_result_sizes", counted)
        got = replies(c, monkeypatch, "hmget")
        expected = {tid: Result.from_json(big_result(tid)) for tid in ids[::2]}
        assert c.get_many(ids) == expected and c.get_many(ids) == expected
        assert sizes == [30] and len(got) == 2 * -(-30 // client_module._GET_PLAIN)  # 8 a call
        assert max(got) <= READ_BYTES
