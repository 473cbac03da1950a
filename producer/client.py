"""A small client for services that feed ticketq: push tickets, wait for results, read queue stats.

Light on purpose: redis-py and the standard library only, so any service can depend on it. Every
ticket is validated with the same strict decoder the worker uses before it is pushed, so a producer
learns about a bad ticket from an exception, not from the dead-letter list.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import time
import unicodedata
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.client import PubSub

from producer import scripts
from producer.dead import replay
from producer.learning import (
    HEADS_KEPT,
    MAX_HEAD_BYTES,
    Correction,
    HeadVersion,
    closest_labels,
    label_problem,
    publish_problem,
    read_head,
)
from producer.protocol import (
    DEFAULT_PREFIX,
    MAX_HEARTBEAT_BYTES,
    MAX_LETTER_BYTES,
    MAX_TEXT_CHARS,
    VERSION,
    BadTicket,
    DeadLetter,
    Event,
    Keys,
    Result,
    Ticket,
    cluster_prefix,
    decode_ticket,
    id_token,
    payload_digest,
)

_PUSH_CHUNK = 1000  # payloads per LPUSH at most: one round trip per chunk, bounded request size
_PUSH_BYTES = 1024 * 1024  # ... and bytes per LPUSH at most (a 64 MB LPUSH held Redis for 230 ms)
_GET_CHUNK = 1000  # ids per pipeline of HSTRLENs (Client.get_many), and per HMGET of small results at most
#: About the most bytes one command of a reader asks Redis for: results, stored texts and corrections each
#: carry what producers attach (up to ~64 KiB), and one HMGET of 1,000 such results (64 MB) held the shared
#: Redis for 34-39 ms, one HSCAN COUNT 500 of P:labels (32 MB) for 27 ms; 1 MiB took at most 0.5 ms.
READ_BYTES = 1024 * 1024
#: The largest result a valid ticket makes: the worker re-encodes its fields, and json.dumps spells
#: ``1e15`` as ``1000000000000000.0``, so a 64 KiB payload of them makes a result of 262,039 bytes (64 KiB of
#: ordinary fields, one of ~64 KiB).
LARGEST_RESULT_BYTES = 256 * 1024
#: The largest correction (P:labels): a kept text of 16,384 four-byte characters (64 KiB) and its label, by,
#: was and time.
LARGEST_CORRECTION_BYTES = 66 * 1024
_GET_PLAIN = READ_BYTES // LARGEST_RESULT_BYTES  # ids read with one HMGET without their sizes first (4)
# HSCAN's COUNT is a hint: a step of a hash table returns COUNT to COUNT + 3 entries (measured over 1,000),
# a small listpack-encoded hash all of it at once (small: at most 512 entries of at most 64 bytes).
# Results per HSCAN of Client.kept_texts (was 200: 12.5 MB, 7-10 ms): at most 7 x 64 KiB of ordinary large
# results (440 KiB measured), 1.75 MiB of the largest possible.
_KEPT_SCAN = READ_BYTES // LARGEST_RESULT_BYTES
# Corrections per HSCAN of Client.correction_records (was 500: 32 MB, 27 ms): 15 of the largest fit in
# READ_BYTES; two thirds of that leave room for the hint's overshoot (at most 13: 833 KiB measured).
_LABELS_SCAN = READ_BYTES // LARGEST_CORRECTION_BYTES * 2 // 3
MAX_WAIT_S = 86_400  # the longest wait: inf overflowed the socket's timeout after the tickets were pushed
STAGE_TTL_S = 600  # a head's staging key (Client.publish_head) outlives a publisher that stalls by this much
DEAD_SCAN = 1000  # newest dead letters searched for waited-on ids that died before the wait began
DEAD_SCAN_BYTES = 4 * 1024 * 1024  # most bytes of dead letters one wait reads (each at most MAX_LETTER_BYTES)
_KEPT_CHUNK = 200  # texts read in one pipeline of GETs at a time (Client.kept_texts)
_KEPT_WALK = 10  # results looked at per text wanted, at most (Client.kept_texts)
_DEAD_FIRST_CHUNK = 16  # letters in the scan's first read; the next reads are sized by the bytes left
DEAD_READ_BYTES = 1024 * 1024  # most bytes of dead letters one LRANGE of Client.dead asks for (plus one)


def as_text(raw: bytes | str) -> str:
    """A Redis reply (bytes, or str on a decoding connection) as text; bytes that are not UTF-8 are
    replaced, never raised on."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class LabelError(ValueError):
    """A correction that was refused: unknown ticket, its text no longer kept, or a label it cannot have."""


@dataclass
class Waited:
    """What :meth:`Client.wait` saw: results, dead-lettered ids (id -> reason), and the rest."""

    results: dict[str, Result] = field(default_factory=dict)
    dead: dict[str, str] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # neither, when the timeout ran out

    @property
    def complete(self) -> bool:
        return not self.pending


def members(conn: Any, key: str) -> list[Any]:
    """Every member of the set ``key``, read with SSCAN a thousand at a time: one SMEMBERS of a set grown
    by hand (``P:workers`` of 100,000 ids) held Redis 14-16 ms. A user refused SSCAN (an ACL line from
    before it) reads it with SMEMBERS, as before."""
    try:
        return list(conn.sscan_iter(key, count=1000))
    except redis.exceptions.NoPermissionError:
        return list(conn.smembers(key))


def wrong_type(exc: Exception) -> bool:
    """Whether a reply error left in a pipeline's replies (``raise_on_error=False``) is ``WRONGTYPE``: a
    key of another type, made by hand; any other error (ACL, cluster) is the reader's to raise."""
    return str(exc).startswith("WRONGTYPE")


#: Most members of a set an error message lists (``label.lua``'s ``listed`` too: a taxonomy of 77 intents
#: is listed whole; 200,000 labels made by hand held Redis 364 ms, sorted and joined in the script).
LISTED = 200

#: Most labels :meth:`Client.labels_of` reads from a published label set (tasks have dozens; a set grown
#: past this by hand is offered in part, read in SSCANs, never whole on every page).
MAX_OFFERED_LABELS = 4096


@dataclass(frozen=True)
class Beat:
    """One worker's heartbeat as a reader sees it."""

    alive: bool  # the key exists and expires, as every heartbeat a worker writes does
    info: dict[str, Any]  # what it says (empty: none, or not a worker's JSON object)
    problem: str = ""  # why it is not a heartbeat a worker wrote (made by hand), or ""


def read_beats(client: redis.Redis, keys: Keys, ids: Sequence[str]) -> list[Beat]:
    """The heartbeats of ``ids``, in one pipeline: ``PTTL`` (a key that never expires, made by hand or left
    by ``PERSIST``, would count as alive forever and its worker's claim never be recovered: it is not a
    heartbeat, as :mod:`worker.recover` judges it too) and at most :data:`MAX_HEARTBEAT_BYTES` of each
    (one of 100 MB made by hand: a part). A key of another type is named, not an error for the others. A
    user whose ACL line predates ``+pttl`` judges by ``EXISTS`` alone, as before."""
    with client.pipeline(transaction=False) as pipe:
        for wid in ids:
            pipe.exists(keys.heartbeat(wid))
            pipe.pttl(keys.heartbeat(wid))
            pipe.getrange(keys.heartbeat(wid), 0, MAX_HEARTBEAT_BYTES - 1)
        replies = pipe.execute(raise_on_error=False) if ids else []
    out = []
    for n, wid in enumerate(ids):
        exists, ttl, beat = replies[3 * n : 3 * n + 3]
        if isinstance(ttl, redis.exceptions.NoPermissionError) and not isinstance(exists, Exception):
            ttl = 0 if exists else -2  # an ACL line from before +pttl: judged by EXISTS, as before
        for reply in (exists, ttl, beat):  # refused (ACL), a cluster's error: raised, not read as a beat
            if isinstance(reply, Exception) and not wrong_type(reply):
                raise reply
        problem = ""
        if isinstance(beat, Exception):
            problem, beat = f"{keys.heartbeat(wid)} is not a string: not a heartbeat a worker wrote", None
        elif ttl == -1:
            problem = f"{keys.heartbeat(wid)} never expires: not a heartbeat a worker wrote"
        alive = isinstance(ttl, int) and ttl >= 0 and not problem
        out.append(Beat(alive=alive, info=_json_object(beat), problem=problem))
    return out


@dataclass(frozen=True)
class WorkerStats:
    id: str
    alive: bool  # a heartbeat that expires (:func:`read_beats`)
    inflight: int
    info: dict[str, Any]
    problem: str = ""  # its heartbeat or in-flight key was made by hand (another type, no TTL), or ""


@dataclass(frozen=True)
class Stats:
    waiting: int
    done: int
    dead: int
    workers: list[WorkerStats]

    @property
    def inflight(self) -> int:
        return sum(w.inflight for w in self.workers)

    @property
    def alive(self) -> int:
        return sum(w.alive for w in self.workers)


def mask_url(url: str) -> str:
    """``redis://user:secret@host`` -> ``redis://user:***@host``, and ``?password=secret`` ->
    ``?password=***`` (redis-py reads a password from the query too); a URL without one is unchanged.

    The one masking helper: worker settings and the dashboard both show URLs through it."""
    parts = urlsplit(url)
    if parts.password is not None:
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{user}:***@{host}")
    if parts.query:
        parts = parts._replace(query=_QUERY_SECRET.sub(r"\g<1>***", parts.query))
    return urlunsplit(parts)


_QUERY_SECRET = re.compile(r"((?:^|&)password=)[^&]*", re.I)


def encode(ticket: Ticket | Mapping[str, Any], *, stamp: float | None = None) -> tuple[bytes, Ticket]:
    """One ticket as the payload a worker will read, and that payload decoded the way the worker will.

    ``stamp`` (unix seconds) is written as ``enqueued_at`` unless the ticket has one already.
    Raises :class:`~producer.protocol.BadTicket` with the worker's own reason."""
    if isinstance(ticket, Ticket):
        if stamp is not None and ticket.enqueued_at is None:
            ticket = Ticket(ticket.id, ticket.text, ticket.fields, enqueued_at=stamp)
        try:
            raw = ticket.to_json()
        except RecursionError:
            raise BadTicket("nested too deeply") from None
    else:
        extra = {} if stamp is None or "enqueued_at" in ticket else {"enqueued_at": stamp}
        try:
            raw = json.dumps({"v": VERSION, **ticket, **extra}, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise BadTicket(f"not JSON-serialisable: {exc}") from None
        except RecursionError:  # a field nested thousands deep: the worker's limit is far below
            raise BadTicket("nested too deeply") from None
    payload = raw.encode("utf-8", "surrogatepass")
    return payload, decode_ticket(payload)


class Client:
    """``stamp`` (default on): every pushed ticket gets ``enqueued_at``, so results and metrics show
    how long it waited. A stamped ticket pushed twice is two payloads, so the second is dead-lettered
    as ``duplicate id`` (the first result stands); a producer that re-pushes to retry and wants the
    second push taken as a harmless redelivery passes its own ``enqueued_at`` or ``stamp=False``."""

    def __init__(
        self,
        connection: redis.Redis,
        prefix: str = DEFAULT_PREFIX,
        *,
        cluster: bool = False,
        stamp: bool = True,
    ) -> None:
        self.redis = connection
        self.keys = Keys(cluster_prefix(prefix) if cluster else prefix)
        self.stamp = stamp
        self._sizes_refused = False  # the ACL refused HSTRLEN (the waiter's line: HMGET only): see _runs
        self._requeue_dead = scripts.load(connection, "producer", "requeue_dead.lua")
        self._label = scripts.load(connection, "producer", "label.lua")
        self._unlabel = scripts.load(connection, "producer", "unlabel.lua")
        self._publish = scripts.load(connection, "producer", "publish_head.lua")

    @classmethod
    def from_url(
        cls, url: str, prefix: str = DEFAULT_PREFIX, *, cluster: bool = False, **kwargs: Any
    ) -> Client:
        """With ``cluster``, ``url`` names any node of a Redis Cluster, and the prefix gets a hash tag
        (``ticketq`` -> ``{ticketq}``, as the workers do)."""
        if cluster:
            from redis.cluster import RedisCluster

            conn: Any = RedisCluster.from_url(url, **kwargs)
            return cls(conn, prefix, cluster=True)
        return cls(redis.Redis.from_url(url, **kwargs), prefix)

    def push(self, tickets: Iterable[Ticket | Mapping[str, Any]]) -> list[str]:
        """Validate every ticket, then LPUSH them all (pipelined). Returns their ids, in order, each once
        (a second ticket with an id pushed here ends as a ``duplicate id`` letter, unless it is the same
        payload).

        Nothing is pushed if any ticket is invalid: the exception names the first bad one.
        """
        return list(self._push(tickets))

    def push_and_wait(self, tickets: Iterable[Ticket | Mapping[str, Any]], timeout: float = 30.0) -> Waited:
        """Push, then wait for exactly these payloads: an older result for a reused id does not count
        (these tickets will go dead as ``duplicate id``, and the wait reports that)."""
        _check_wait(timeout)  # a timeout it cannot wait (inf) is refused before anything is pushed
        digests = self._push(tickets)
        return self.wait(list(digests), timeout, digests=digests)

    def requeue_dead(
        self,
        *,
        reason: str | None = None,
        limit: int | None = None,
        ticket_id: str | None = None,
        poison: bool = False,
    ) -> list[str]:
        """Move dead letters back onto the input, oldest first; returns their ids ('' for letters
        without one). ``reason`` matches the start of the letter's reason (``engine error``); ``limit``
        caps how many. Letters whose payload was not kept whole are left.

        Poison letters (a payload that was in flight on ``max-attempts`` workers that died) stay dead
        unless asked for: ``poison=True``, a ``reason`` starting with ``poison``, or their ``ticket_id``.
        A replayed poison payload keeps its attempt history, so it travels alone and one more death
        makes it dead again.

        Works in bounded chunks (one short script call each), so replaying 20,000 letters never blocks
        Redis: each letter is either still dead or back in the queue, never both, even if this client dies
        part way. A letter added meanwhile joins the new end and is not replayed by this call."""
        keys = [self.keys.dead, self.keys.tickets, self.keys.attempts]
        return replay(self._requeue_dead, keys, reason, limit, ticket_id, poison)

    def _push(self, tickets: Iterable[Ticket | Mapping[str, Any]]) -> dict[str, str]:
        payloads: list[bytes] = []
        digests: dict[str, str] = {}  # id -> digest of its first payload, the one that will win
        stamp = round(time.time(), 3) if self.stamp else None
        for n, ticket in enumerate(tickets):
            try:
                payload, decoded = encode(ticket, stamp=stamp)
            except BadTicket as exc:
                raise BadTicket(f"ticket #{n}: {exc.reason}") from None
            payloads.append(payload)
            digests.setdefault(decoded.id, payload_digest(payload))
        with self.redis.pipeline(transaction=False) as pipe:
            for chunk in _chunks(payloads, _PUSH_CHUNK, _PUSH_BYTES):
                pipe.lpush(self.keys.tickets, *chunk)
            pipe.execute()
        return digests

    def get(self, ticket_id: str) -> Result | None:
        return self.get_many([ticket_id]).get(ticket_id)

    def get_many(self, ids: Iterable[str], *, unreadable: dict[str, str] | None = None) -> dict[str, Result]:
        """The results of ``ids`` that have one, in their order. A result no worker wrote (by hand: not JSON,
        a field of the wrong type) is left out, and why goes in ``unreadable`` (id -> reason) when given.

        Read by size, not by count (:meth:`_runs`): HMGETs of at most :data:`READ_BYTES` of results each,
        sized by one pipeline of HSTRLENs per :data:`_GET_CHUNK` ids (one HMGET of 1,000 results of 64 KiB
        held Redis for 34-39 ms, of 100,000 small ones for 90 ms; now at most 0.5 ms). The sizes cost a round
        trip: the commands for 1,000 small results took 9.4 ms instead of 2.4 (a fixed 16 ids per HMGET,
        10 ms and up to 4 MiB an HMGET of the largest results; 4 ids, 36 ms); for 1,000 of 64 KiB, 86 ms
        instead of 162."""
        wanted = [ids] if isinstance(ids, str) else list(ids)  # one id, not its characters
        out: dict[str, Result] = {}
        for start in range(0, len(wanted), _GET_CHUNK):
            for run in self._runs(wanted[start : start + _GET_CHUNK]):
                for i, r in zip(run, self.redis.hmget(self.keys.results, run), strict=True):
                    if r is None:  # deleted since its size was read
                        continue
                    try:
                        out[i] = Result.from_json(r)
                    except ValueError as exc:
                        if unreadable is not None:
                            unreadable[i] = str(exc)[:200]
        return out

    def _runs(self, ids: Sequence[str]) -> list[Sequence[str]]:
        """``ids`` in order, in runs whose results add up to at most :data:`READ_BYTES` (one larger result
        alone), for one HMGET each; ids without a result are left out. Up to :data:`_GET_PLAIN` ids (a
        ``get``, a wait's ids from one event) are one run as they are, without their sizes: at most
        ``READ_BYTES`` of the largest results; so are runs of ``_GET_PLAIN`` where the ACL refuses HSTRLEN
        (the threat model's waiter line grants HMGET only: 1,000 small results then take 36 ms, not 9)."""
        sizes = None if len(ids) <= _GET_PLAIN or self._sizes_refused else self._allowed_sizes(ids)
        if sizes is None:
            return [ids[n : n + _GET_PLAIN] for n in range(0, len(ids), _GET_PLAIN)]
        return size_runs(ids, sizes, READ_BYTES)

    def _allowed_sizes(self, ids: Sequence[str]) -> list[int] | None:
        """:meth:`_result_sizes`, or None where the ACL refuses HSTRLEN (asked once a client: Redis logs
        each refusal)."""
        try:
            return self._result_sizes(ids)
        except redis.exceptions.NoPermissionError:
            self._sizes_refused = True
            return None

    def _result_sizes(self, ids: Sequence[str]) -> list[int]:
        return result_sizes(self.redis, self.keys.results, ids)

    def wait(
        self, ids: Iterable[str], timeout: float = 30.0, *, digests: Mapping[str, str] | None = None
    ) -> Waited:
        """Block until every id has a result or went dead, or ``timeout`` seconds pass. No polling.

        Subscribes to ``P:events`` first and only then reads the results hash, so a result written in
        between is seen either way. Dead letters written before the wait are found in the newest
        :data:`DEAD_SCAN` entries of ``P:dead`` (at most :data:`DEAD_SCAN_BYTES` of them). With
        ``digests`` (id -> payload digest), only results and dead letters for those exact payloads count,
        and a ``P:events`` dead entry only when it names that payload's digest (or, from an older worker,
        no digests at all). An id an event left out (``left_out``: its token) has its result read back
        at once, or, with none, its letter looked for as at the start.
        """
        _check_wait(timeout)
        expect = dict(digests or {})
        out = Waited(pending=set(ids))
        deadline = time.monotonic() + timeout
        pubsub = self.redis.pubsub()
        try:
            pubsub.subscribe(self.keys.events)
            self._confirmed(pubsub, deadline)
            self._collect(out, sorted(out.pending), expect)
            if out.pending:
                out.dead.update(self._dead_among(out.pending, expect))
                out.pending -= set(out.dead)
            tokens: dict[str, list[str]] = {}  # id_token -> the pending ids it names (events' left_out)
            for i in out.pending:
                tokens.setdefault(id_token(i), []).append(i)
            while out.pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                message = pubsub.get_message(timeout=left)
                if message is None or message.get("type") != "message":
                    continue
                event = Event.from_json(message["data"])
                self._collect(out, [i for i in event.ids if i in out.pending], expect)
                for tid, reason in event.dead.items():
                    if tid in out.pending and tid not in out.results and event.died(tid, expect.get(tid)):
                        out.dead[tid] = reason
                        out.pending.discard(tid)
                named = {i for t in event.left_out for i in tokens.get(t, ()) if i in out.pending}
                if named:  # left out of the event: its result read back, or its letter found where it lies
                    self._collect(out, sorted(named), expect)
                    if named := named & out.pending:
                        out.dead.update(self._dead_among(named, expect))
                        out.pending -= set(out.dead)
        finally:
            pubsub.close()
        return out

    @staticmethod
    def _confirmed(pubsub: PubSub, deadline: float) -> None:
        """Wait for the server to confirm the subscription: only then can no event slip between it and
        the read of the results hash that follows."""
        while (left := deadline - time.monotonic()) > 0:
            message = pubsub.get_message(timeout=left)
            if message is not None and message.get("type") == "subscribe":
                return

    def _collect(self, out: Waited, ids: Sequence[str], expect: Mapping[str, str]) -> None:
        found = {i: r for i, r in self.get_many(ids).items() if expect.get(i, r.digest) == r.digest}
        out.results.update(found)
        out.pending -= set(found)

    def _dead_among(self, ids: set[str], expect: Mapping[str, str]) -> dict[str, str]:
        """The newest letters for ``ids`` (and their expected payloads) among the newest :data:`DEAD_SCAN`.

        Read in chunks sized so the bytes read stay within :data:`DEAD_SCAN_BYTES` (every letter a worker
        writes is at most ``MAX_LETTER_BYTES``; a larger one, from an older worker, makes the next chunks
        smaller, and can pass the budget by one small first chunk at most); the scan stops there, so a list
        of large letters is searched less deep, never read whole."""
        found: dict[str, str] = {}
        for raw in self._dead_entries(DEAD_SCAN, DEAD_SCAN_BYTES):
            letter = DeadLetter.read(raw)  # an unreadable entry has no id: passed over
            if letter.id not in ids or letter.id in found:
                continue
            if expect.get(letter.id, "") in ("", payload_digest(letter.payload)):
                found[letter.id] = letter.reason
        return found

    def _dead_entries(
        self, most: int, budget: int | None, per_read: int | None = None
    ) -> Iterator[bytes | str]:
        """Up to ``most`` of the newest entries of ``P:dead``, newest first, read in chunks sized as if every
        next letter were as large as the largest seen (at least ``MAX_LETTER_BYTES``): so the bytes read stay
        within ``budget`` in all (None: no total; the first chunk of :data:`_DEAD_FIRST_CHUNK` letters may
        pass it) and within ``per_read`` in one LRANGE, the most one command holds Redis for."""
        start, left, largest = 0, budget, MAX_LETTER_BYTES
        count = min(most, _DEAD_FIRST_CHUNK)
        while start < most and count > 0:
            chunk = self.redis.lrange(self.keys.dead, start, start + count - 1)
            for raw in chunk:
                largest = max(largest, len(raw))
                if left is not None:
                    left -= len(raw)
                yield raw
            if len(chunk) < count:
                return
            start += count
            count = most - start
            if left is not None:  # what the budget has room for: none once it is spent
                count = min(count, max(left, 0) // largest)
            if per_read is not None:  # at least one: a letter larger than per_read is still read
                count = min(count, max(1, per_read // largest))

    def dead(self, limit: int = 20) -> list[DeadLetter]:
        """The newest dead letters first (an entry that is not a letter reads as one: DeadLetter.read), at
        most :data:`DEAD_READ_BYTES` a command: ``dead --limit 10000`` of large letters (up to 96 KiB each)
        would otherwise be one LRANGE of nearly a GB on the Redis every client shares."""
        return [DeadLetter.read(r) for r in self._dead_entries(max(limit, 1), None, DEAD_READ_BYTES)]

    def results_within(self, ids: Sequence[str], budget: int) -> int:
        """How many of ``ids``, from the first, have results that add up to at most ``budget`` bytes (the
        first always counts): one pipelined HSTRLEN each, for readers that must not ask Redis for every
        whole result at once (results carry what producers attach: ~64 KiB, up to LARGEST_RESULT_BYTES)."""
        if not ids:
            return 0
        spent, take = 0, 0
        for size in self._result_sizes(ids):
            if take and spent + size > budget:
                break
            spent, take = spent + size, take + 1
        return take

    def clipped_texts(self, ids: Sequence[str], chars: int) -> dict[str, tuple[str | None, bool]]:
        """id -> (the first ``chars`` characters of its kept text, or None when none is kept or its key holds
        another type; whether there was more), read with GETRANGE and STRLEN, never whole: for lists."""
        limit = chars * 4  # bytes: UTF-8 is at most 4 per character
        with self.redis.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.getrange(self.keys.text(i), 0, limit - 1)
                pipe.strlen(self.keys.text(i))
            replies = pipe.execute(raise_on_error=False)  # a key of another type: no text, not a failed page
        out: dict[str, tuple[str | None, bool]] = {}
        for n, i in enumerate(ids):
            head, size = replies[2 * n], replies[2 * n + 1]
            if not isinstance(head, bytes | str) or not isinstance(size, int) or not size:
                out[i] = (None, False)
                continue
            text = head.decode("utf-8", "ignore") if isinstance(head, bytes) else head
            clipped = size > len(head) or len(text) > chars
            out[i] = (text[:chars].rstrip() + "…" if clipped else text, clipped)
        return out

    def stats(self) -> Stats:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.keys.tickets)
            pipe.hlen(self.keys.results)
            pipe.llen(self.keys.dead)
            waiting, done, dead = pipe.execute()
        ids = sorted(as_text(m) for m in members(self.redis, self.keys.workers))
        beats = read_beats(self.redis, self.keys, ids)
        with self.redis.pipeline(transaction=False) as pipe:
            for wid in ids:
                pipe.llen(self.keys.inflight(wid))
            held = pipe.execute(raise_on_error=False) if ids else []
        workers = []
        for wid, beat, count in zip(ids, beats, held, strict=True):
            problem = beat.problem
            if isinstance(count, Exception) and not wrong_type(count):
                raise count
            if isinstance(count, Exception):
                problem, count = f"{self.keys.inflight(wid)} is not a list: recover its payloads by hand", 0
            workers.append(WorkerStats(wid, beat.alive, int(count), beat.info, problem))
        return Stats(waiting=int(waiting), done=int(done), dead=int(dead), workers=workers)

    # -- corrections and heads ---------------------------------------------------------------------------

    def label(
        self, ticket_id: str, label: str, by: str | None = None, question: str | None = None
    ) -> Correction:
        """Record the right label of a ticket a worker has labelled (one EVAL of ``LABEL_SCRIPT``), and take
        it off that question's review queue. :class:`LabelError`: unknown ticket, text no longer kept, or a
        label its result (or answer to ``question``) does not name. Labelling again replaces the
        correction."""
        problem = label_problem(ticket_id, label, by)
        if problem:
            raise LabelError(problem)
        asked = self.keys.asking(question)  # the question's corrections and review queue
        keys = [self.keys.results, self.keys.text(ticket_id), asked.labels, asked.labelset, asked.review]
        keys.append(self.keys.questions)
        try:
            raw = self._label(keys=keys, args=[ticket_id, label, by or "", question or ""])
        except redis.ResponseError as exc:
            message = str(exc)
            if message.startswith("TICKETQ "):
                raise LabelError(
                    message.removeprefix("TICKETQ ") + self._near(label, question, message)
                ) from None
            raise
        return Correction.from_json(ticket_id, raw)

    def _near(self, label: str, question: str | None, message: str) -> str:
        """For an unknown label, the published labels it is closest to (a taxonomy of dozens of intents:
        "card arrival" for ``card_arrival``), as a hint after the error; else nothing."""
        if not message.startswith("TICKETQ unknown label "):
            return ""
        close = closest_labels(label, self.labels_of(question))
        composed = unicodedata.normalize("NFC", label)
        for same in (c for c in close if unicodedata.normalize("NFC", c) == composed):  # looks identical
            return f"; {same!r} is spelt with other code points ({label!a} against {same!a})"
        return f"; did you mean {' or '.join(close)}?" if close else ""

    def labels_of(self, question: str | None = None, *, also: Iterable[str] = ()) -> list[str]:
        """The labels a correction of ``question`` (None: the primary) may name: the set workers publish at
        start (``P:labelset``, ``P:q:NAME:labelset``), with ``also`` (a result's own scores: a label set not
        published yet), sorted. A result may carry only its most probable labels (``--result-scores``), so
        its scores are not the list to offer."""
        try:  # a set grown by hand (200,000 labels: 30 ms of SMEMBERS on every page): a part of it
            _, found = self._set_within(self.keys.asking(question).labelset, MAX_OFFERED_LABELS)
        except redis.ResponseError as exc:  # a key of another type under the prefix: no published set
            if not wrong_type(exc):
                raise
            found = []
        return sorted({*(as_text(name) for name in found), *also})

    def _set_within(self, key: str, most: int) -> tuple[int, list[Any]]:
        """A set's size and its members: all of them up to ``most``, else ``most`` of them read by SSCAN,
        never the whole of a set grown by hand. A user refused SCARD (an ACL line from before it) reads
        it whole, as before."""
        try:
            size = int(self.redis.scard(key))
        except redis.exceptions.NoPermissionError:
            found = list(self.redis.smembers(key))
            return len(found), found
        if size <= most:
            return size, list(self.redis.smembers(key))
        return size, list(itertools.islice(self.redis.sscan_iter(key, count=min(most, 1000)), most))

    def _listed(self, key: str) -> str:
        """The members of a set for an error message, sorted and joined, as ``label.lua`` lists them: up to
        :data:`LISTED` of them; a set grown past that by hand is named with its size."""
        size, found = self._set_within(key, LISTED)
        if size > LISTED:
            return f"{size} of them, too many to list here: SMEMBERS {key}"
        return ", ".join(sorted(as_text(m) for m in found))

    def unlabel(self, ticket_id: str, question: str | None = None) -> Correction:
        """Withdraw a ticket's correction of ``question`` (None: the primary), a wrong one, say: the next
        ``train --from-redis`` no longer learns it (a head already trained on it keeps what it learnt until
        then). Returns the correction removed (a record that is not one reads as a bare correction of its
        id). One EVAL of ``producer/unlabel.lua``. :class:`LabelError` when there is none, or for a question
        no worker has published."""
        if question is not None and not self.redis.sismember(self.keys.questions, question):
            listed = self._listed(self.keys.questions)
            listed = listed or "none published: workers publish their task's questions at start"
            raise LabelError(f"unknown question {question} (questions: {listed})")
        raw = self._unlabel(keys=[self.keys.asking(question).labels], args=[ticket_id])
        if raw is None:
            whose = "" if question is None else f" for question {question}"
            raise LabelError(f"no correction of ticket {ticket_id}{whose}")
        try:
            return Correction.from_json(ticket_id, raw)
        except (ValueError, TypeError):
            return Correction(ticket_id, "", "")

    def correction_records(self, question: str | None = None) -> Iterator[Correction]:
        """Every recorded correction of ``question`` (None: the primary); a malformed record is skipped.

        Walked with HSCAN :data:`_LABELS_SCAN` records a step: each holds its ticket's text, up to 64 KiB, and
        a step of 500 returned 32 MB and held Redis for 14-107 ms; one of 10, at most 833 KiB, 0.5 ms."""
        for raw_id, raw in self.redis.hscan_iter(self.keys.asking(question).labels, count=_LABELS_SCAN):
            tid = as_text(raw_id)
            try:
                yield Correction.from_json(tid, raw)
            except (ValueError, TypeError):
                continue

    def kept_texts(
        self, limit: int, skip: Container[str] = (), accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, str]]:
        """Up to ``limit`` (ticket id, text) of tickets the workers classified whose text is still kept
        (``P:text:<id>``, written with each result), in ``P:results``' scan order; ids in ``skip``, texts
        that are empty, not UTF-8 or longer than a ticket may be, keys of another type, and results whose
        text expired are left out, and so is a text ``accept`` (called once per text read, in order) says
        False to: it does not count toward ``limit``. ``P:results`` is walked
        with HSCAN and the texts read with pipelined GETs, a chunk at a time: no command walks the keyspace
        or holds the server for long; at most ``_KEPT_WALK`` times ``limit`` results are looked at, so a
        hash of results kept long after their texts expired is not read whole. HSCAN returns the results
        with their ids, so a step is :data:`_KEPT_SCAN` of them: 200 results of 64 KiB were 12.5 MB and 7-10
        ms of one command, 4 are at most 0.3 ms (Redis 7.0 has no HSCAN NOVALUES; ``P:done`` holds the ids
        alone, but in another order: the texts returned would change)."""
        if limit < 1:
            return []
        most = _KEPT_WALK * limit  # results looked at, at most
        out: list[tuple[str, str]] = []
        ids: list[str] = []
        scan = self.redis.hscan_iter(self.keys.results, count=_KEPT_SCAN)
        for walked, (raw_id, _) in enumerate(scan, start=1):
            tid = as_text(raw_id)
            if tid not in skip:
                ids.append(tid)
            if len(ids) >= _KEPT_CHUNK or walked >= most:
                out += self._ticket_texts(ids, accept)
                ids = []
                if len(out) >= limit or walked >= most:
                    break
        return (out + self._ticket_texts(ids, accept))[:limit]

    def _ticket_texts(
        self, ids: Sequence[str], accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, str]]:
        """(id, text) of those ``ids`` whose kept text could be a ticket's (UTF-8, not blank, at most
        ``MAX_TEXT_CHARS``) and that ``accept`` (None: all) takes, read with one pipelined GET each; a key
        of another type is skipped, not fatal."""
        if not ids:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for tid in ids:
                pipe.get(self.keys.text(tid))
            raw = pipe.execute(raise_on_error=False)
        out = []
        for tid, text in zip(ids, raw, strict=True):
            if isinstance(text, bytes):
                try:
                    text = text.decode("utf-8")
                except UnicodeDecodeError:
                    continue
            ticket = isinstance(text, str) and text.strip() and len(text) <= MAX_TEXT_CHARS
            if ticket and (accept is None or accept(text)):
                out.append((tid, text))
        return out

    def corrections(self) -> Iterator[tuple[str, str, str]]:
        """(ticket id, text, right label) for every recorded correction: what training needs."""
        for c in self.correction_records():
            yield c.id, c.text, c.label

    def publish_head(
        self,
        data: bytes,
        *,
        by: str | None = None,
        gate: dict[str, Any] | None = None,
        question: str | None = None,
        replacing: str | None = None,
    ) -> str:
        """Store a head file's bytes as the current head, versioned; returns the new version.

        ``replacing``: the version this head was judged against ("" for none); if another one is current
        by then (published meanwhile), :class:`HeadChanged` and nothing changes. None: unconditional.

        Workers check the version before every claim and load the new head at their next drain. The
        bytes are not checked here (the producer side cannot read a head): a worker refuses a corrupt or
        mismatched head, logs ``head_rejected`` and keeps the one it has, or, started since, serves the last
        good one (``P:head:good``), as the running workers do. ``gate`` goes in ``P:heads``.
        """
        if not data:
            raise ValueError("empty head")
        if len(data) > MAX_HEAD_BYTES:
            raise ValueError(f"head too large: {len(data)} bytes > {MAX_HEAD_BYTES}")
        problem = publish_problem(data)
        if problem:
            raise ValueError(problem)
        # a typo would publish a head no worker loads (none published yet: nothing to check against)
        known = self.keys.questions
        if question is not None and self.redis.scard(known) and not self.redis.sismember(known, question):
            listed = self._listed(known)
            raise ValueError(f"the workers' task asks no question {question!r}; its questions: {listed}")
        entry: dict[str, Any] = {
            "at": round(time.time(), 3),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        entry |= {k: v for k, v in (("by", by), ("gate", gate)) if v}
        qk = self.keys.asking(question)  # a further question's heads have keys and versions of their own
        keys = [qk.head_seq, qk.head, qk.heads]
        staged = self._stage(qk, data)
        args: list[Any] = [b"" if staged else data, json.dumps(entry), HEADS_KEPT]
        out = self._publish(
            keys=keys if staged is None else [*keys, staged],
            args=args if replacing is None else [*args, replacing],
        )
        if isinstance(out, list) and as_text(out[0]) == "staged_gone":
            raise HeadChanged(
                f"the head's staging key expired before it was published ({STAGE_TTL_S} s): publish again"
            )
        if isinstance(out, list):
            now = as_text(out[1]) or "none"
            raise HeadChanged(
                f"the published head changed meanwhile (version {now} is current now, not "
                f"{replacing or 'none'}): train again to judge the new head against it"
            )
        return out.decode() if isinstance(out, bytes) else str(out)

    def _stage(self, keys: Keys, data: bytes) -> str | None:
        """Write a head's bytes to a staging key of its own, with a TTL, for ``publish_head.lua`` to rename
        onto ``P:head``: Redis copies them once (HSET, ~20 ms for 39 MB) instead of holding every client
        while a script takes them as an argument (95-115 ms). None where the ACL refuses the staging
        (a line written before it): the script then takes the bytes as before."""
        staged = keys.head_staging(secrets.token_hex(8))
        try:
            with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(staged, "data", data)
                pipe.expire(staged, STAGE_TTL_S)
                pipe.execute()
        except redis.exceptions.NoPermissionError:  # the transaction is refused whole: nothing written
            return None
        return staged

    def current_head(self, question: str | None = None) -> tuple[str, bytes] | None:
        """(version, bytes) of the published head, or ``None`` when none was published."""
        return read_head(self.redis, self.keys.asking(question).head)

    def last_good_head(self, question: str | None = None) -> tuple[str, bytes] | None:
        """(version, bytes) of the newest published head a worker loaded (``P:head:good``): what workers
        serve while they refuse the current one; ``None`` when no worker has loaded one."""
        return read_head(self.redis, self.keys.asking(question).head_good)

    def head_versions(self, question: str | None = None) -> list[HeadVersion]:
        """The publish history, newest first (at most ``HEADS_KEPT``)."""
        out = []
        # publish keeps HEADS_KEPT; a list grown by hand is read no further
        for raw in self.redis.lrange(self.keys.asking(question).heads, 0, HEADS_KEPT - 1):
            try:
                out.append(HeadVersion.from_json(raw))
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError):
                continue  # an entry no publish wrote
        return out


def result_sizes(conn: Any, results: str, ids: Sequence[str]) -> list[int]:
    """The bytes of each id's result in the hash ``results`` (0: none), one pipelined HSTRLEN each; raises
    NoPermissionError where the ACL refuses HSTRLEN."""
    with conn.pipeline(transaction=False) as pipe:
        for i in ids:
            pipe.hstrlen(results, i)
        return [int(n) for n in pipe.execute()]


def size_runs(ids: Sequence[str], sizes: Sequence[int], budget: int) -> list[Sequence[str]]:
    """``ids`` in order, those with a result (size > 0) only, in runs whose results add up to at most
    ``budget`` bytes (one larger result alone): one HMGET a run."""
    runs: list[Sequence[str]] = []
    run: list[str] = []
    spent = 0
    for i, size in zip(ids, sizes, strict=True):
        if not size:  # no result (one written since is announced on P:events, or fails a WATCH)
            continue
        if run and spent + size > budget:
            runs.append(run)
            run, spent = [], 0
        run.append(i)
        spent += size
    return [*runs, run] if run else runs


def _check_wait(timeout: float) -> None:
    if not (isinstance(timeout, int | float) and 0 <= timeout <= MAX_WAIT_S):  # inf, nan: no deadline
        raise ValueError(f"timeout must be 0..{MAX_WAIT_S} seconds, not {timeout!r}")


def _chunks(items: Sequence[bytes], most: int, most_bytes: int) -> Iterator[Sequence[bytes]]:
    """``items`` in order, in runs of at most ``most`` items and ``most_bytes`` bytes (one item over it
    travels alone)."""
    start, size = 0, 0
    for end, item in enumerate(items):
        if end > start and (end - start >= most or size + len(item) > most_bytes):
            yield items[start:end]
            start, size = end, 0
        size += len(item)
    if start < len(items):
        yield items[start:]


class HeadChanged(ValueError):
    """A head was judged against one published version and another is current by the time it is published."""


def _json_object(raw: bytes | None) -> dict[str, Any]:
    """A heartbeat's info: its values that are text, numbers or lists of them (what workers write); a
    record written by hand (not JSON, nested thousands deep, a JSON array) reads as empty, never raises."""
    try:
        obj = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        return {}
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if _flat(v) or (isinstance(v, list) and all(map(_flat, v)))}


def _flat(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
