"""Against a real Redis: readers of ``P:dead`` stay within their byte budgets whatever the letters hold,
letters of payloads heavy with escapes are still replayed byte for byte, and ``Client.wait`` takes a
``P:events`` dead entry only for the payload it waits for (audit findings 2 and 8)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import redis

from producer import dead as dead_module
from producer.client import DEAD_SCAN_BYTES, Client, Waited
from producer.protocol import (
    MAX_LETTER_BYTES,
    MAX_PAYLOAD_BYTES,
    UNREADABLE_LETTER,
    DeadLetter,
    Event,
    Keys,
    Result,
    id_token,
    payload_digest,
)
from worker.contract import Rejected

pytestmark = pytest.mark.redis


def bytes_read(c: Client, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bytes each LRANGE of ``c`` returns from now on, in a list that grows as it reads."""
    got: list[int] = []
    real = c.redis.lrange

    def counted(*args: Any) -> Any:
        out = real(*args)
        got.append(sum(len(x) for x in out))
        return out

    monkeypatch.setattr(c.redis, "lrange", counted)
    return got


def test_a_letter_kept_as_base64_text_is_replayed_byte_for_byte_with_its_attempts(
    r: redis.Redis, keys: Keys
) -> None:
    raw = json.dumps({"id": "T-1", "text": "hi", "x": '"\\' * 15_000}, separators=(",", ":")).encode()
    # UTF-8 and quotes: escaped over 64 KiB; with a byte more or less, every base64 tail ("==", "=", none)
    odd = json.dumps({"id": "T-2", "text": "hi", "y": '\u00e9"' * 14_000}, ensure_ascii=False).encode()
    assert len(raw) <= MAX_PAYLOAD_BYTES and len(odd) <= MAX_PAYLOAD_BYTES
    letters = [
        DeadLetter("poison: killed 3 workers", raw, id="T-1", attempts=3),
        DeadLetter("engine error: boom", odd, id="T-2"),
        DeadLetter("engine error: boom", odd + b"x"),
        DeadLetter("engine error: boom", odd[:-1]),
    ]
    encoded = [d.to_json() for d in letters]
    assert all(json.loads(e).get("payload_utf8") for e in encoded)
    r.lpush(keys.dead, *encoded)
    assert Client(r, keys.prefix).requeue_dead(poison=True) == ["T-1", "T-2", "", ""]
    assert r.lrange(keys.tickets, 0, -1) == [odd[:-1], odd + b"x", odd, raw]  # oldest pushed first
    assert r.hget(keys.attempts, payload_digest(raw)) == b"3"
    assert r.llen(keys.dead) == 0


def _lua_reads(r: redis.Redis, keys: Keys, run: Any) -> list[list[list[str]]]:
    """The commands each script call ran on ``keys.dead`` (MONITOR shows a script's commands)."""
    seen: list[dict[str, Any]] = []
    ready = threading.Event()
    sentinel = keys.dead + ":sentinel"

    def watch() -> None:
        with r.monitor() as m:
            ready.set()
            for cmd in m.listen():
                seen.append(cmd)
                if sentinel in cmd["command"]:
                    return

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    assert ready.wait(5)
    time.sleep(0.2)
    run()
    r.exists(sentinel)
    t.join(30)
    calls: list[list[list[str]]] = []
    for cmd in seen:
        words = cmd["command"].split(" ")
        if words[0].upper() == "EVALSHA" and keys.dead in cmd["command"]:
            calls.append([])
        elif cmd.get("client_type") == "lua" and calls and len(words) > 1 and words[1] == keys.dead:
            calls[-1].append(words)
    return calls


def test_requeue_dead_copies_at_most_its_byte_budget_and_one_letter_into_lua(
    r: redis.Redis, keys: Keys
) -> None:
    size = 300 * 1024  # letters as large as older workers wrote them (up to ~384 KiB)
    letters = [
        json.dumps({"v": 1, "reason": "not JSON", "payload": "\u0001" * (size // 6) + f"{n:04d}"})
        for n in range(20)
    ]
    r.lpush(keys.dead, *letters)
    by_pos = {-(n + 1): len(letters[n]) for n in range(20)}  # from the tail: the oldest is -1
    c = Client(r, keys.prefix)
    calls = _lua_reads(r, keys, lambda: c.requeue_dead(reason="nothing matches this"))
    assert len(calls) >= 20 * size // dead_module.REQUEUE_BYTES
    for commands in calls:
        read = 0
        for words in commands:
            op = words[0].strip('"').upper()
            assert op in ("LLEN", "LINDEX"), words  # never a range of letters at once
            if op == "LINDEX":
                read += by_pos[int(words[2].strip('"'))]
        assert read <= dead_module.REQUEUE_BYTES + size + 100
    assert r.llen(keys.dead) == 20 and r.llen(keys.tickets) == 0


def test_wait_reads_at_most_its_byte_budget_of_dead_letters_and_finds_a_recent_one(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = [bytes([1]) * (MAX_PAYLOAD_BYTES - 4) + b"%04d" % n for n in range(100)]
    r.lpush(keys.dead, *[DeadLetter("not JSON: no", p, worker="w").to_json() for p in junk])
    mine = b'{"id": "T-1", "text": "   "}'
    r.lpush(keys.dead, DeadLetter("empty field: text", mine, id="T-1").to_json())
    c = Client(r, keys.prefix)
    got = bytes_read(c, monkeypatch)
    w = c.wait(["T-1", "T-404"], timeout=0.2, digests={"T-1": payload_digest(mine)})
    assert w.dead == {"T-1": "empty field: text"} and w.pending == {"T-404"}
    assert 0 < sum(got) <= DEAD_SCAN_BYTES  # 100 letters of ~87 KiB: ~8.5 MiB, were ~38 MiB of 393 KB


def test_wait_reads_no_more_than_one_small_chunk_past_its_budget_of_older_larger_letters(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [
        json.dumps({"v": 1, "reason": "not JSON", "payload": "\u0001" * 50_000 + str(n)}) for n in range(40)
    ]
    r.lpush(keys.dead, *old)  # ~300 KB each, as a worker before the bound wrote them
    c = Client(r, keys.prefix)
    got = bytes_read(c, monkeypatch)
    c.wait(["T-404"], timeout=0.1)
    assert sum(got) <= DEAD_SCAN_BYTES + 16 * len(old[0])  # ~12 MB were read before


def test_the_dead_command_reads_any_number_of_large_letters_a_megabyte_a_command(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ticketq-producer dead --limit N`` prints N letters; read with one LRANGE, 10,000 letters of up to
    96 KiB would be nearly a GB in one command. After a first small chunk, each read asks for at most
    DEAD_READ_BYTES worth of letters as large as the largest seen (96 KiB at least, all a worker writes);
    after a larger one (an older worker's), one letter a read."""
    from producer.client import DEAD_READ_BYTES

    junk = [
        DeadLetter("not JSON: no", bytes([1]) * (MAX_PAYLOAD_BYTES - 4) + b"%04d" % n).to_json()
        for n in range(60)
    ]
    small = [DeadLetter("empty field: text", b"x", id=f"T-{n}").to_json() for n in range(5)]
    r.rpush(keys.dead, *junk, *small)
    c = Client(r, keys.prefix)
    got = bytes_read(c, monkeypatch)
    letters = c.dead(1000)
    assert [x.to_json() for x in letters] == [*junk, *small]
    assert len(got) > 5 and all(n <= DEAD_READ_BYTES for n in got[1:])  # ~875 KB a read after the first
    assert [x.to_json() for x in c.dead(3)] == junk[:3]
    huge = json.dumps(
        {"v": 1, "reason": "not JSON", "payload": "\u0001" * 400_000}
    )  # ~2.4 MB, an old worker's
    r.delete(keys.dead)
    r.rpush(keys.dead, *junk[:20], huge, *junk[20:])
    got.clear()
    assert len(c.dead(1000)) == 61
    assert got[1] >= len(huge)  # the second read met it ...
    assert all(n <= MAX_LETTER_BYTES for n in got[2:])  # ... and every read after it asked for one letter


def _wait_in_thread(c: Client, keys: Keys, digests: dict[str, str]) -> tuple[threading.Thread, list[Waited]]:
    box: list[Waited] = []
    t = threading.Thread(target=lambda: box.append(c.wait(list(digests), 10, digests=digests)), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while c.redis.pubsub_numsub(keys.events)[0][1] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return t, box


def test_wait_ignores_a_dead_event_for_another_payload_with_the_same_id(r: redis.Redis, keys: Keys) -> None:
    c = Client(r, keys.prefix)
    mine, theirs = b'{"id": "T-1", "text": "refund"}', b'{"id": "T-1", "text": "   "}'
    t, box = _wait_in_thread(c, keys, {"T-1": payload_digest(mine)})
    other = Event.after([], [DeadLetter("empty field: text", theirs, id="T-1")])
    r.publish(keys.events, other.to_json())  # someone else's T-1 died: not ours
    result = Result("T-1", "billing", {"billing": 1.0}, "m", payload_digest(mine))
    r.hset(keys.results, "T-1", result.to_json())
    r.publish(keys.events, Event(ids=["T-1"]).to_json())
    t.join(10)
    assert box and box[0].dead == {} and set(box[0].results) == {"T-1"} and box[0].complete


def test_wait_takes_a_dead_event_that_names_its_payload_and_one_from_an_older_worker(
    r: redis.Redis, keys: Keys
) -> None:
    c = Client(r, keys.prefix)
    one, two = b'{"id": "T-1", "text": "a\\u0001"}', b'{"id": "T-2", "text": "b\\u0001"}'
    t, box = _wait_in_thread(c, keys, {"T-1": payload_digest(one), "T-2": payload_digest(two)})
    r.publish(
        keys.events,
        Event.after([], [DeadLetter("control character U+0001 in text", one, id="T-1")]).to_json(),
    )
    r.publish(keys.events, json.dumps({"ids": [], "dead": {"T-2": "control character U+0001 in text"}}))
    t.join(10)
    assert box and box[0].complete
    assert box[0].dead == {
        "T-1": "control character U+0001 in text",
        "T-2": "control character U+0001 in text",
    }


def test_entries_of_p_dead_that_are_not_letters_break_no_reader(r: redis.Redis, keys: Keys) -> None:
    """Found by hand: a P:dead entry that is not JSON made ``Client.dead`` (the ``dead`` command) raise,
    one that is a JSON list made ``wait`` raise (AttributeError); each now reads as an "unreadable dead
    letter" (wait passes it over), and the letters around it read as before."""
    mine = b'{"id": "T-1", "text": "   "}'
    r.lpush(keys.dead, DeadLetter("empty field: text", mine, id="T-1").to_json())
    bad = ["not json", "[]", '"a string"', "[" * 5000 + "]" * 5000, '{"payload_b64": 5}']
    r.lpush(keys.dead, *bad)
    c = Client(r, keys.prefix)
    letters = c.dead(10)
    assert [x.reason for x in letters] == [UNREADABLE_LETTER] * len(bad) + ["empty field: text"]
    assert [x.payload for x in letters[: len(bad)]] == [b.encode() for b in reversed(bad)]
    assert [x.at for x in letters[: len(bad)]] == [0.0] * len(bad)  # no time is made up for them
    assert c.wait(["T-1"], timeout=0.2, digests={"T-1": payload_digest(mine)}).dead == {
        "T-1": "empty field: text"
    }


def test_wait_reads_its_ids_back_after_an_event_that_left_them_out(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = Client(r, keys.prefix)
    scans = bytes_read(c, monkeypatch)
    mine = b'{"id": "T-1", "text": "refund"}'
    t, box = _wait_in_thread(c, keys, {"T-1": payload_digest(mine)})
    began = time.monotonic()
    while not scans:  # past its first reading of the results (and of P:dead, which comes after)
        assert time.monotonic() - began < 5
        time.sleep(0.01)
    r.hset(
        keys.results, "T-1", Result("T-1", "billing", {"billing": 1.0}, "m", payload_digest(mine)).to_json()
    )
    cut = Event(ids=["someone-else"], left_out=[id_token("T-1")])  # T-1 was in that ack, left out
    r.publish(keys.events, cut.to_json())
    t.join(10)
    assert box and box[0].complete and set(box[0].results) == {"T-1"}
    assert time.monotonic() - began < 5  # read back at once, not at the 10 s timeout


def test_a_flood_of_events_that_left_other_ids_out_costs_a_waiter_nothing(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer's long ids keep every event cut: a waiter reads back only its own ids named there."""
    c = Client(r, keys.prefix)
    reads: list[int] = []
    real = c.redis.hmget

    def counted(*args: Any) -> Any:
        reads.append(1)
        return real(*args)

    monkeypatch.setattr(c.redis, "hmget", counted)
    box: list[Waited] = []
    t = threading.Thread(target=lambda: box.append(c.wait(["T-1"], 1.0)), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while r.pubsub_numsub(keys.events)[0][1] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    others = Event(left_out=[id_token(f"X-{i}") for i in range(500)]).to_json()
    while t.is_alive():
        r.publish(keys.events, others)
        time.sleep(0.005)
    assert box and box[0].pending == {"T-1"} and len(reads) == 1, reads  # its first read only


def test_a_dead_letter_left_out_of_an_event_is_found_at_once(
    r: redis.Redis, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review found 500 ordinary tickets dead in one ack (empty texts) left 243 out of the event, and a
    waiter found them only when its timeout ran out (or never, past DEAD_SCAN). Its token sends the waiter
    to P:dead at once."""
    c = Client(r, keys.prefix)
    scans = bytes_read(c, monkeypatch)
    mine = b'{"id": "T-1", "text": "   "}'
    box: list[Waited] = []
    t = threading.Thread(
        target=lambda: box.append(c.wait(["T-1"], 10, digests={"T-1": payload_digest(mine)})), daemon=True
    )
    t.start()
    began = time.monotonic()
    while not scans:  # the wait has looked in P:dead once already: the letter comes after
        assert time.monotonic() - began < 5
        time.sleep(0.01)
    r.lpush(keys.dead, DeadLetter("empty field: text", mine, id="T-1").to_json())
    r.publish(keys.events, Event(left_out=[id_token("T-1")]).to_json())
    t.join(10)
    assert box and box[0].dead == {"T-1": "empty field: text"} and box[0].complete
    assert time.monotonic() - began < 5  # not at the 10 s timeout


def test_a_wait_on_many_tickets_dead_in_one_ack_returns_at_once(r: redis.Redis, keys: Keys) -> None:
    """The review's case through the real ack: 500 ordinary tickets with empty texts, rejected together."""
    from worker.queue import RedisQueue

    raws = [json.dumps({"id": f"order-{i:06d}", "text": "   "}).encode() for i in range(500)]
    c = Client(r, keys.prefix)
    box: list[Waited] = []
    digests = {f"order-{i:06d}": payload_digest(raw) for i, raw in enumerate(raws)}
    t = threading.Thread(target=lambda: box.append(c.wait(list(digests), 20, digests=digests)), daemon=True)
    t.start()
    began = time.monotonic()
    while r.pubsub_numsub(keys.events)[0][1] < 1:
        assert time.monotonic() - began < 5
        time.sleep(0.01)
    time.sleep(0.3)  # past its first reads
    r.lpush(keys.tickets, *raws)
    q = RedisQueue(r, keys, "w1")
    got = q.claim(500, max_wait_s=0)
    reason = "empty field: text is empty or white space, a reason of ordinary length for a dead ticket"
    q.ack([], [Rejected(raw, DeadLetter(reason, raw, worker="w1", id=json.loads(raw)["id"])) for raw in got])
    t.join(20)
    assert box and box[0].complete and len(box[0].dead) == 500
    assert time.monotonic() - began < 10
