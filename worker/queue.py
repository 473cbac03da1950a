"""The reliable queue: claim, acknowledge, dead-letter, heartbeat and orphan recovery. Redis only.

Every state change is made of atomic steps, each bounded in bytes so no step holds the shared Redis for
long, and a worker may die between any two of them and lose nothing:

- claim moves payloads from ``P:tickets`` into ``P:inflight:<worker>`` (claim.lua, a MiB a call, or
  BLMOVE when idle);
- ack is a MULTI/EXEC per step of at most 512 KiB of payloads, oldest claim first: each ticket's result
  or dead letter, its in-flight removal, attempt counter, routed RQ job and the step's ``P:events``
  notice land together; every record is serialized and checked strict before it;
- recovery (recover.lua, ~512 KiB a step) requeues a dead worker's list to the *right* end of
  ``P:tickets`` (served next), counting one attempt per payload (``P:recovering:<worker>`` keeps a
  payload held twice one death across steps); one in flight on ``max_attempts`` dead workers is poison
  and dead-lettered. Such suspects are later claimed *alone*, so they cannot sink drain-mates twice.

Every key reaches the scripts as ``KEYS``, built by :class:`~producer.protocol.Keys`: with a hash-tagged
prefix such as ``{ticketq}`` this works on Redis Cluster as well.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.client import Pipeline

from producer import scripts
from producer.client import READ_BYTES, read_beats, result_sizes, size_runs
from producer.protocol import (
    DIGEST_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_REVIEW,
    DeadLetter,
    Event,
    Keys,
    Result,
    payload_digest,
    review_margin,
)
from producer.strictjson import Unwritable
from worker.connection import is_cluster, reply_code, transient
from worker.contract import Finished, Rejected
from worker.errors import FatalError, TransientError
from worker.records import attempts_of, digest_of, enqueued_at, poison_letter

__all__ = ["CLAIM_BYTES", "AckHook", "AckReport", "Recovery", "RedisQueue"]

_WATCH_RETRIES = 64
# Tickets one ack transaction writes and releases at most: a drain larger than this is acknowledged in
# several (measured, 2-core EPYC: a 10,000-ticket transaction held Redis for about 90 ms; 500, a few ms).
ACK_STEP = 500
# Payload and result bytes one ack transaction settles at most (at least one ticket): its texts,
# letters and routed jobs are about that much again. 256 valid 64 KiB tickets in one transaction held
# Redis 13-19 ms, 116-131 ms with routing (an audit, 2-core Xeon).
ACK_STEP_BYTES = 512 * 1024
_FEW_REJECTS = 4  # up to this many rejects an ack checks by LPOS, more by one LRANGE (_still_held)
_REVIEW_CUT = 1000  # review ids past MAX_REVIEW one ack removes at most
# Bytes one claim may hold: 256 payloads of the largest valid size, so real drains never reach it, while
# producers pushing huge payloads (refused, but read first) cannot make a worker hold more than this plus
# one payload. Redis's proto-max-bulk-len bounds that one (see docs/threat-model.md).
CLAIM_BYTES = 256 * MAX_PAYLOAD_BYTES
# Payloads one claim.lua call moves at most: a drain larger than this is claimed in several calls, each
# bounded (Redis time measured on a 2-core EPYC: 14 ms per 1,000 payloads of 200 bytes, so about 7 ms a
# call), so no worker holds the shared Redis long whatever --drain asks.
CLAIM_STEP = 500
# Payload bytes one claim.lua call moves at most (at least one payload): 256 valid payloads of 64 KiB,
# one call, held Redis 60-150 ms (an audit's SLOWLOG, 2-core Xeon); a MiB is about 4 ms.
CLAIM_CALL_BYTES = 1024 * 1024
# Payload and letter bytes one recover.lua step sends at most (one payload at least), and what a
# payload is guessed to weigh before any is read (the first read asks for this step's worth of them).
RECOVER_STEP_BYTES = 512 * 1024
_GUESSED_PAYLOAD_BYTES = 16 * 1024
#: Ids of ``P:workers`` one recovery pass looks at (each costs a few round trips when its heartbeat is gone):
#: a fleet's all at once; a set grown by hand over several passes, the worker serving between them.
RECOVER_IDS = 500
_RECOVER_READ = 64  # payloads one step reads at most (64 of 64 KiB: 4 MiB, read when small ones came first)
_TRIM_BATCH = 500  # results deleted per trim call: bounds the script's run time (and Lua's unpack)

#: Called inside the ack's MULTI with the tickets whose results are new (not redeliveries): routing.
AckHook = Callable[[Pipeline, Sequence[Finished]], None]


@dataclass
class AckReport:
    written: list[str] = field(default_factory=list)  # ids whose results were (re)written
    fresh: list[Finished] = field(default_factory=list)  # first results for their ids
    redelivered: list[str] = field(default_factory=list)  # same payload seen again: rewritten, not routed
    dead: list[DeadLetter] = field(default_factory=list)  # dead-lettered, duplicates of an id included


@dataclass(frozen=True)
class Recovery:
    worker: str
    requeued: int
    dead: int


class RedisQueue:
    """One worker's view of the queue. Not thread-safe: the heartbeat thread gets its own instance."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        worker_id: str,
        *,
        max_attempts: int = 3,
        max_claim_bytes: int = CLAIM_BYTES,
        keep_results_s: float = 0.0,
        max_dead: int = 0,
        keep_text_s: int = 0,
        questions: Sequence[str] = (),
    ) -> None:
        self.redis = client
        self.keys = keys
        self.worker_id = worker_id
        self.max_attempts = max_attempts
        self.max_claim_bytes = max_claim_bytes
        self.keep_results_s = keep_results_s  # 0: results are kept forever
        self.max_dead = max_dead  # 0: every dead letter is kept
        self.keep_text_s = keep_text_s  # > 0: keep each labelled ticket's text (P:text:<id>) this long
        self.inflight = keys.inflight(worker_id)
        # further questions whose review queues (P:q:NAME:review) the trim keeps in step with the results:
        # the task's (``questions``) and any an ack has queued ids for
        self.questions: dict[str, None] = dict.fromkeys(questions)
        # the scripts live beside this module: worker/claim.lua, recover.lua, requeue_own.lua, trim.lua
        self._claim = scripts.load(client, "worker", "claim.lua")
        self._recover = scripts.load(client, "worker", "recover.lua")
        self._requeue = scripts.load(client, "worker", "requeue_own.lua")
        self._trim = scripts.load(client, "worker", "trim.lua")
        self.recovery_errors: dict[str, str] = {}  # worker id -> why its recovery failed (for the log)
        self._workers_cursor = 0  # where the next recovery pass goes on in P:workers (SSCAN); 0: from the top
        self.recovery_complete = True  # whether the last pass reached the end of P:workers
        self._claim_unsure = False  # a claim failed part way: Redis may have moved payloads we never saw
        self.stale = 0  # payloads the last claim found already in this worker's list and handed back
        self._holds_nothing = False
        self._claimed: dict[bytes, int] = {}  # the last claim's payloads -> their order (oldest first)
        self.cluster = is_cluster(client)

    # -- claim ---------------------------------------------------------------------------------------

    @transient
    def claim(
        self, n: int, *, block_s: float = 1.0, max_wait_s: float = 0.05, holds_nothing: bool = False
    ) -> list[bytes]:
        """Move up to ``n`` payloads, oldest first, into this worker's in-flight list.

        Blocks up to ``block_s`` for the first one; then keeps filling for up to ``max_wait_s`` so a
        trickle still makes a decent batch. Returns ``[]`` when nothing arrived in time. Stops early at
        ``max_claim_bytes`` (give or take one payload), so memory stays bounded whatever was pushed.

        A claim whose reply was lost (the connection dropped after the server moved the payloads) left
        them in this worker's in-flight list, unseen; recovery never touches a live worker's list, so
        the next claim hands them back first. Safe because a worker claims only when it holds nothing else.
        ``holds_nothing`` (the service's case) says so, and payloads found in the in-flight list are
        handed back too (:attr:`stale` counts them): an ack lost in a cluster failover leaves such.
        """
        if self._claim_unsure:
            self.requeue_own()
            self._claim_unsure = False
        self._claim_unsure = True
        self._holds_nothing = holds_nothing
        got = self._fill(n, block_s, max_wait_s)
        self._claim_unsure = False
        self._claimed = {}
        for i, raw in enumerate(got):
            self._claimed.setdefault(raw, i)
        return got

    def _fill(self, n: int, block_s: float, max_wait_s: float) -> list[bytes]:
        got, stopped = self._claim_now(n, [])
        if not got:
            first = self._blmove(block_s)
            if first is None:
                return []
            got = [first]
            stopped = self._is_suspect(first) or len(first) >= self.max_claim_bytes
        deadline = time.monotonic() + max_wait_s
        while not stopped and len(got) < n:
            more, stopped = self._claim_now(n - len(got), got)
            got += more
            left = deadline - time.monotonic()
            if stopped or len(got) >= n or left < 0.005:
                break
            nxt = self._blmove(left)
            if nxt is None:
                break
            if self._is_suspect(nxt):  # it must travel alone: hand it back, served next
                self.redis.lmove(self.inflight, self.keys.tickets, "LEFT", "RIGHT")
                break
            got.append(nxt)
            if sum(map(len, got)) >= self.max_claim_bytes:
                break
        return got

    def _claim_now(self, n: int, held: Sequence[bytes]) -> tuple[list[bytes], bool]:
        """Up to ``n`` payloads by claim.lua, :data:`CLAIM_STEP` and :data:`CLAIM_CALL_BYTES` a call, so no
        one call holds Redis for long whatever ``--drain`` asks or producers push; (moved, whether a
        payload stopped the claim)."""
        keys = [self.keys.tickets, self.inflight, self.keys.attempts, self.keys.workers]
        got: list[bytes] = []
        if not held:
            self.stale = 0
        while True:
            step = min(n - len(got), CLAIM_STEP)
            have = len(held) + len(got)
            args: list[int | str] = [step, have, self.worker_id, self.max_claim_bytes]
            args += [
                sum(map(len, held)) + sum(map(len, got)),
                "1" if self._holds_nothing else "0",
                DIGEST_BYTES,
                CLAIM_CALL_BYTES,
            ]
            stopped, moved, stale, capped = self._claim(keys=keys, args=args)
            self.stale += int(stale)
            got += moved
            if stopped or len(got) >= n or (len(moved) < step and not capped):
                return got, bool(stopped)

    def _blmove(self, timeout_s: float) -> bytes | None:
        # Redis reads a timeout that rounds to 0 ms as "block forever": keep it at 10 ms or more.
        timeout: Any = max(timeout_s, 0.01)  # redis-py types it int; the server takes seconds as a float
        out = self.redis.blmove(self.keys.tickets, self.inflight, timeout, "RIGHT", "LEFT")
        if not isinstance(out, bytes):
            return None
        # The claim script registered this worker before the block; a peer that took it for dead while
        # it blocked has deregistered it since. Register again, so recovery can find what it now holds.
        self.redis.sadd(self.keys.workers, self.worker_id)
        return out

    def _is_suspect(self, raw: bytes) -> bool:
        return bool(self.redis.hexists(self.keys.attempts, payload_digest(raw)))

    # -- ack -----------------------------------------------------------------------------------------

    @transient
    def ack(
        self, finished: Sequence[Finished], rejected: Sequence[Rejected], hook: AckHook | None = None
    ) -> AckReport:
        """Write results and dead letters and release their payloads, in transactions of at most
        :data:`ACK_STEP` tickets and :data:`ACK_STEP_BYTES` of their payloads, oldest claim first (each
        ticket's result, letter and release together; a 10,000-ticket transaction held Redis for 90 ms).

        The duplicate-id rule is checked under WATCH of the results hash: the first result for an id
        wins; the same payload again is a redelivery (rewritten, not routed again); a different payload
        with a taken id is dead-lettered as ``duplicate id``. Safe to call again after a failure whose
        outcome is unknown: a second pass sees its own results as redeliveries, and dead letters are only
        pushed for payloads still in the in-flight list.
        """
        # In claim order, oldest first: each step then settles the oldest payloads still held, the tail of
        # the in-flight list, where its LREMs find them at once and _still_held reads them.
        claimed, last = self._claimed, len(self._claimed)
        both: list[Finished | Rejected] = [*finished, *rejected]
        items = sorted(both, key=lambda i: claimed.get(i.raw, last))
        encoded = {id(f): _encode(f) for f in finished}  # once, before the steps, which count them too
        report = AckReport()
        for part in _steps(items, encoded):
            done = [i for i in part if isinstance(i, Finished)]
            step = self._ack(done, [i for i in part if isinstance(i, Rejected)], hook, encoded)
            report.written += step.written
            report.fresh += step.fresh
            report.redelivered += step.redelivered
            report.dead += step.dead
        return report

    def _ack(
        self,
        finished: Sequence[Finished],
        rejected: Sequence[Rejected],
        hook: AckHook | None,
        encoded: dict[int, str | Unwritable],
    ) -> AckReport:
        """One transaction of :meth:`ack`."""
        with self.redis.pipeline(transaction=True) as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    pipe.watch(self.keys.results, self.inflight)
                    report, writes, rejects = self._plan(pipe, finished, rejected, encoded)
                    pipe.multi()
                    placing = self._write(pipe, report, writes, rejects, [*finished, *rejected], hook)
                    self._check(pipe.execute(raise_on_error=False), placing)
                    if self.cluster:  # a cluster transaction cannot PUBLISH: the wake-up follows it
                        self.redis.publish(self.keys.events, placing.event)
                    return report
                except redis.WatchError:
                    continue
        raise TransientError(f"ack kept conflicting after {_WATCH_RETRIES} tries")

    def _check(self, replies: list[Any], placing: Placing) -> None:
        """Raise the first command of the ack's transaction that failed (a key of the wrong type, written
        by hand since the start check), naming its key. Redis runs the rest of a transaction after a
        failed command: the payloads it released though their results or letters were not written go back
        onto the queue first (served next), so the failure loses no ticket."""
        failed = [(i, r) for i, r in enumerate(replies) if isinstance(r, Exception)]
        if not failed:
            return
        lost = [
            raw for i, raws in placing.payloads.items() if isinstance(replies[i], Exception) for raw in raws
        ]
        if lost:
            self.redis.rpush(self.keys.tickets, *[_any(raw) for raw in reversed(lost)])
        index, error = failed[0]
        key = placing.keys.get(index, "")
        raise type(error)(
            f"{error} (the ack's write to {key}; {len(lost)} payloads requeued)" if key else str(error)
        )

    def _plan(
        self,
        pipe: Pipeline,
        finished: Sequence[Finished],
        rejected: Sequence[Rejected],
        encoded: dict[int, str | Unwritable],
    ) -> tuple[AckReport, dict[str, tuple[Result, str]], list[Rejected]]:
        ids = list(dict.fromkeys(f.result.id for f in finished))
        digests: dict[str, str] = {}
        for chunk in self._by_size(ids):  # earlier results are read whole: a MiB an HMGET
            for tid, old in zip(chunk, pipe.hmget(self.keys.results, chunk), strict=True):
                if old is not None:
                    digests[tid] = digest_of(_raw(old))
        report = AckReport()
        writes: dict[str, tuple[Result, str]] = {}  # id -> the result and its JSON, checked strict
        rejects = list(rejected)
        for item in finished:
            tid, digest = item.result.id, item.result.digest
            # serialized (and checked strict) before the MULTI: one bad record cannot fail the rest
            text = encoded[id(item)]
            if isinstance(text, Unwritable):
                letter = DeadLetter(f"unwritable result: {text}", item.raw, worker=self.worker_id, id=tid)
                rejects.append(Rejected(item.raw, letter))
                continue
            if tid not in digests:
                digests[tid] = digest
                report.fresh.append(item)
                report.written.append(tid)
                writes[tid] = (item.result, text)
            elif digests[tid] == digest:
                report.redelivered.append(tid)
                if tid not in writes:
                    report.written.append(tid)
                    writes[tid] = (item.result, text)
            else:
                letter = DeadLetter("duplicate id", item.raw, worker=self.worker_id, id=tid)
                rejects.append(Rejected(item.raw, letter))
        # A payload no longer in flight was acked by an earlier try, or requeued by recovery for
        # someone else to judge: dead-lettering it here would make a second letter.
        rejects = self._still_held(pipe, rejects, len(finished) + len(rejected))
        report.dead = [r.letter for r in rejects]
        return report, writes, rejects

    def _by_size(self, ids: list[str]) -> list[Sequence[str]]:
        """The ids that have an earlier result, in runs of at most :data:`READ_BYTES` of them (one at
        least), by one pipelined HSTRLEN each after the WATCH began (a result written since fails the
        transaction): a drain re-pushing the ids of 64 KiB results read 16 MiB in one HMGET (14.7 ms).
        Where the ACL refuses HSTRLEN, one run of them all, as before."""
        if not ids:
            return []
        try:
            sizes = result_sizes(self.redis, self.keys.results, ids)
        except redis.exceptions.NoPermissionError:  # an ACL line from before +hstrlen
            return [ids]
        return size_runs(ids, sizes, READ_BYTES)

    def _still_held(self, pipe: Pipeline, rejects: list[Rejected], step: int) -> list[Rejected]:
        """The rejects whose payloads are still in this worker's in-flight list, each copy held once.
        A few (the usual bad payload in a drain): an LPOS each from the tail, at worst a scan of the list.
        More: one LRANGE of the list's last ``step`` payloads (this step's, the oldest still held, as
        :meth:`ack` orders them: no more bytes than the step), compared here; the whole list only when
        they are not all there (an earlier try acked them, or the list is not as claimed). An LPOS each
        was quadratic in the drain, inside the WATCH (1,000 rejected 64 KiB payloads alike but for their
        last bytes: 3.3 s to ack); the whole list, 16 MiB of a claim of 64 KiB payloads, 14-59 ms."""
        if not rejects:
            return rejects
        wanted = Counter(_raw(r.raw) for r in rejects)
        if len(rejects) <= _FEW_REJECTS:
            found = {raw: pipe.lpos(self.inflight, _any(raw), rank=-1, count=n) for raw, n in wanted.items()}
            held = Counter({raw: len(at) if isinstance(at, list) else 0 for raw, at in found.items()})
        else:
            tail = pipe.lrange(self.inflight, -step, -1)
            held = Counter(_raw(p) for p in tail)
            if len(tail) == step and any(held[raw] < n for raw, n in wanted.items()):  # not the whole list
                held = Counter(_raw(p) for p in pipe.lrange(self.inflight, 0, -1))
        kept = []
        for r in rejects:
            raw = _raw(r.raw)
            if held[raw] > 0:  # two rejects of one copy (an earlier try acked the other): one letter
                held[raw] -= 1
                kept.append(r)
        return kept

    def _write(
        self,
        pipe: Pipeline,
        report: AckReport,
        writes: dict[str, tuple[Result, str]],
        rejects: Sequence[Rejected],
        released: Sequence[Finished | Rejected],
        hook: AckHook | None,
    ) -> Placing:
        """Queue the ack's writes on ``pipe``; returns where they place the payloads, and the event
        (published inside, unless on a cluster)."""
        placing = Placing()
        if writes:
            letters = {r.raw for r in rejects}  # a finished ticket can be dead-lettered (duplicate id)
            placing.mark(
                pipe,
                self.keys.results,
                [r for r in released if isinstance(r, Finished) and r.raw not in letters],
            )
            pipe.hset(self.keys.results, mapping={tid: encoded for tid, (_, encoded) in writes.items()})
            # finish times, so results can be deleted oldest first (see trim)
            placing.mark(pipe, self.keys.done)
            pipe.zadd(self.keys.done, {tid: r.at for tid, (r, _) in writes.items()})
        if writes and self.keep_text_s > 0:
            # The text a correction will be trained on, kept with its result (P:text:<id>, with a TTL).
            for item in released:
                if isinstance(item, Finished) and writes.get(item.result.id, (None,))[0] is item.result:
                    pipe.set(self.keys.text(item.result.id), item.ticket.text, ex=self.keep_text_s)
        if rejects:
            placing.mark(pipe, self.keys.dead, rejects)
            pipe.lpush(self.keys.dead, *[r.letter.to_json() for r in rejects])
            if self.max_dead:
                pipe.ltrim(self.keys.dead, 0, self.max_dead - 1)
        # Oldest first, from the tail, where claim.lua put the oldest: each LREM finds its payload at once
        # (from the head, every one walked the whole list: quadratic in the drain, inside the transaction).
        claimed, last = self._claimed, len(self._claimed)
        for item in sorted(released, key=lambda i: claimed.get(i.raw, last)):
            pipe.lrem(self.inflight, -1, _any(item.raw))
        if released:
            pipe.hdel(self.keys.attempts, *{payload_digest(i.raw) for i in released})
        if unsure := {f.result.id: review_margin(f.result.scores) for f in report.fresh if f.result.review}:
            placing.mark(pipe, self.keys.review)
            pipe.zadd(self.keys.review, unsure)
            # past the bound (the largest margins), ids go: a thousand an ack at most (a queue far over it,
            # left by hand or an older version, cost 50 ms in one command)
            pipe.zremrangebyrank(self.keys.review, MAX_REVIEW, MAX_REVIEW + _REVIEW_CUT - 1)
        for question, margins in _unsure_answers(report.fresh).items():  # each question's own queue
            self.questions.setdefault(question)
            key = self.keys.asking(question).review
            placing.mark(pipe, key)
            pipe.zadd(key, margins)
            pipe.zremrangebyrank(key, MAX_REVIEW, MAX_REVIEW + _REVIEW_CUT - 1)
        if hook is not None and report.fresh:
            hook(pipe, report.fresh)
        placing.event = Event.after(report.written, report.dead).to_json()
        if not self.cluster:
            pipe.publish(self.keys.events, placing.event)
        return placing

    # -- heartbeat and recovery ------------------------------------------------------------------------

    @transient
    def beat(self, info: dict[str, Any], ttl_s: float) -> None:
        """Say this worker is alive. SET and SADD together: a recovering peer must never see the id in
        ``P:workers`` without its heartbeat while this worker is alive and claiming."""
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.heartbeat(self.worker_id), json.dumps(info), px=int(ttl_s * 1000))
            pipe.sadd(self.keys.workers, self.worker_id)
            pipe.execute()

    @transient
    def recover(self, *, include_self: bool = False) -> list[Recovery]:
        """Requeue the in-flight lists of workers whose heartbeat has expired: a pass over about
        :data:`RECOVER_IDS` ids of ``P:workers`` (read with SSCAN; a fleet's ids all at once), the next pass
        going on where this one stopped (:attr:`recovery_complete` says whether it reached the end). A set
        grown by hand to 100,000 ids was read whole and each id looked at, every pass: the worker loop
        stood still for most of a minute (long enough for its own stall watchdog) and claimed nothing."""
        out = []
        members: list[bytes | str] = []
        cursor = self._workers_cursor
        try:
            while len(members) < RECOVER_IDS:
                cursor, found = self.redis.sscan(self.keys.workers, cursor, count=RECOVER_IDS)
                members += found
                if cursor == 0:
                    break
        except redis.exceptions.NoPermissionError:  # an ACL line from before +sscan: whole, as before
            members, cursor = list(self.redis.smembers(self.keys.workers)), 0
        self._workers_cursor, self.recovery_complete = int(cursor), cursor == 0
        for raw_id in sorted(members):
            try:
                wid = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
            except UnicodeDecodeError:  # no worker's id: one set by hand; its keys cannot be named
                self.recovery_errors[repr(raw_id)[:100]] = (
                    "worker id is not UTF-8: no worker has it; remove it"
                )
                continue
            if wid == self.worker_id and not include_self:
                continue
            if not self._beating(wid):
                try:
                    done = self._recover_one(wid)
                except (TransientError, FatalError):  # fatal: a key it shares with this worker
                    raise
                except Exception as exc:  # one worker's list must not stop every other's recovery
                    self.recovery_errors[wid] = f"{type(exc).__name__}: {exc}"[:500]
                    continue
                if done is not None:
                    out.append(done)
        return out

    def _beating(self, wid: str) -> bool:
        """Whether ``wid``'s heartbeat is alive, judged as every reader judges it
        (:func:`producer.client.read_beats`; recover.lua judges the same inside the script)."""
        return read_beats(self.redis, self.keys, [wid])[0].alive

    def _recover_one(self, wid: str) -> Recovery | None:
        """:meth:`recover_worker`, but a dead worker's in-flight key of another type than a list (by hand)
        is that worker's problem, reported, not a fatal error for the worker recovering it: a key this
        worker shares with it (the input, P:attempts, P:dead) of the wrong type still is."""
        try:
            self.redis.llen(self.keys.inflight(wid))
        except redis.ResponseError as exc:
            if reply_code(exc) != "WRONGTYPE":
                raise
            raise ValueError(
                f"{self.keys.inflight(wid)} is not a list: recover its payloads by hand"
            ) from exc
        return self.recover_worker(wid)

    @transient
    def recover_worker(self, wid: str, *, force: bool = False) -> Recovery | None:
        """Requeue one worker's in-flight list; ``None`` if it turned out to be alive (or another worker
        recovers it, see below) before this one moved anything.

        In steps of about :data:`RECOVER_STEP_BYTES` of payloads and letters from the list's head (each
        step one atomic recover.lua call that re-checks what was read): one call for a whole claim of
        256 valid 64 KiB payloads held Redis 140-200 ms, and read the claim back whole first. A payload
        held twice is one death however the steps fall, and whichever worker takes them
        (``P:recovering:<worker>`` remembers its count until the list is empty). A worker found alive
        after a first step keeps the rest; a list that keeps changing under this worker (a peer
        recovering it too) is left to that peer after :data:`_WATCH_RETRIES` tries."""
        keys = self.keys
        script_keys = [keys.workers, keys.heartbeat(wid), keys.inflight(wid), keys.tickets]
        script_keys += [keys.attempts, keys.dead, keys.recovering(wid)]
        done = Recovery(wid, 0, 0)
        largest = _GUESSED_PAYLOAD_BYTES
        for _ in range(_WATCH_RETRIES):
            count = max(1, min(_RECOVER_READ, RECOVER_STEP_BYTES // largest))
            held = [_raw(p) for p in self.redis.lrange(keys.inflight(wid), 0, count - 1)]
            largest = max(map(len, held), default=largest)  # the next read sized by this one's largest
            digests = [payload_digest(p) for p in held]
            # the counts as stored, sent back as read: recover.lua re-checks them byte for byte
            stored: list[bytes] = []
            marks: list[bytes | None] = []
            if held:
                with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hmget(keys.attempts, digests)
                    pipe.hmget(keys.recovering(wid), digests)
                    counts, marked = pipe.execute()
                stored = [_raw(s or b"") for s in counts]
                marks = [None if m is None else _raw(m) for m in marked]
            args: list[Any] = [wid, self.max_attempts, "1" if force else "0", DIGEST_BYTES]
            spent = 0
            for p, d, s, m in zip(held, digests, stored, marks, strict=True):
                # a payload over DIGEST_BYTES is checked by its digest alone: not sent back in full; the
                # letter is read only when this attempt is the last (recover.lua re-checks the count)
                n = attempts_of(m) if m is not None else attempts_of(s) + 1
                letter = poison_letter(p, wid, n) if n >= self.max_attempts else ""
                if len(args) > 4 and spent + len(p) + len(letter) > RECOVER_STEP_BYTES:
                    break  # the rest by the next step
                seen = b"=" + m if m is not None else s
                args += [p if len(p) <= DIGEST_BYTES else b"", d, seen, letter]
                spent += len(p) + len(letter)  # what the script moves, sent back or not
            status, requeued, dead, left = self._recover(keys=script_keys, args=args)
            if status == b"alive":
                return done if done.requeued or done.dead else None
            if status == b"ok":
                done = Recovery(wid, done.requeued + int(requeued), done.dead + int(dead))
                if not int(left):
                    return done
        # changed again and again: another worker recovers it (the next round sees what is left)
        return done if done.requeued or done.dead else None

    @transient
    def trim(self, now: float | None = None) -> int:
        """Delete results older than ``keep_results_s`` (at most a thousand a call) and cap the dead
        letters at ``max_dead``; returns how many results went. Called after every drain and when idle."""
        if not self.keep_results_s and not self.max_dead:
            return 0
        cutoff = "" if not self.keep_results_s else repr((now or time.time()) - self.keep_results_s)
        keys = [self.keys.done, self.keys.results, self.keys.dead, self.keys.review]
        keys += [self.keys.asking(q).review for q in self.questions]
        return int(self._trim(keys=keys, args=[cutoff, _TRIM_BATCH, self.max_dead]))

    def refresh_slots(self) -> None:
        """Re-read a cluster's slot map after a failure. Plain commands do this inside redis-py, but a
        transaction's failure does not, and the ack would keep knocking on a dead master."""
        with contextlib.suppress(redis.RedisError, redis.exceptions.RedisClusterException):
            self.redis.nodes_manager.initialize()  # type: ignore[attr-defined]

    @transient
    def drop_heartbeat(self) -> None:
        """The watchdog's last act: with the key gone, peers recover this worker's claims at once."""
        self.redis.delete(self.keys.heartbeat(self.worker_id))

    @transient
    def requeue_own(self, *, leave: bool = False) -> int:
        """Hand back everything this worker holds (graceful stop); ``leave`` also deregisters it. A MiB of
        payloads a call (:data:`CLAIM_CALL_BYTES`), as claimed."""
        keys = [self.inflight, self.keys.tickets, self.keys.heartbeat(self.worker_id), self.keys.workers]
        moved = 0
        while True:
            n, left = self._requeue(keys=keys, args=[self.worker_id, "1" if leave else "0", CLAIM_CALL_BYTES])
            moved += int(n)
            if not int(left):
                return moved

    def load_scripts(self) -> None:
        """SCRIPT LOAD every script now (a start-up check of +evalsha and +script|load)."""
        for script in (self._claim, self._recover, self._requeue, self._trim):
            script.sha = self.redis.script_load(script.script)

    # -- reading -------------------------------------------------------------------------------------

    @transient
    def depth(self) -> int:
        return int(self.redis.llen(self.keys.tickets))

    @transient
    def held(self) -> int:
        return int(self.redis.llen(self.inflight))

    @transient
    def registered(self) -> int | None:
        """Ids in ``P:workers``: workers alive or recently dead (more than a fleet: ids added by hand); None
        for a worker whose ACL line predates ``+scard`` (only the backlog's log line wants it)."""
        try:
            return int(self.redis.scard(self.keys.workers))
        except redis.exceptions.NoPermissionError:
            return None

    @transient
    def depth_and_oldest(self) -> tuple[int, float | None]:
        """Tickets waiting, and the ``enqueued_at`` of the next one served (None: empty or unstamped)."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.llen(self.keys.tickets)
            pipe.lindex(self.keys.tickets, -1)
            depth, head = pipe.execute()
        return int(depth), enqueued_at(head)


def _encode(item: Finished) -> str | Unwritable:
    """A finished ticket's result as the JSON the ack writes, or why it cannot be written."""
    try:
        return item.result.to_json()
    except Unwritable as exc:
        return exc


def _steps(
    items: list[Finished | Rejected], encoded: dict[int, str | Unwritable]
) -> Iterator[list[Finished | Rejected]]:
    """``items`` in runs of at most :data:`ACK_STEP` tickets and :data:`ACK_STEP_BYTES` of payloads and
    results (one ticket at least); one empty run for no items. A result can be four times its payload
    (fields re-encoded: ``1e15`` is written ``1000000000000000.0``), so results count too."""
    run: list[Finished | Rejected] = []
    spent = 0
    for item in items:
        written = encoded.get(id(item))
        size = len(item.raw) + (len(written) if isinstance(written, str) else 0)
        if run and (len(run) >= ACK_STEP or spent + size > ACK_STEP_BYTES):
            yield run
            run, spent = [], 0
        run.append(item)
        spent += size
    yield run


@dataclass
class Placing:
    """Where an ack's transaction writes: the key of each command worth naming when it fails (by its
    place in the transaction), and the payloads each command that places them (their results, their dead
    letters) stands for."""

    keys: dict[int, str] = field(default_factory=dict)
    payloads: dict[int, list[bytes]] = field(default_factory=dict)
    event: str = ""

    def mark(self, pipe: Pipeline, key: str, items: Sequence[Finished | Rejected] = ()) -> None:
        """Name the next command queued on ``pipe``."""
        index = len(pipe.command_stack)
        self.keys[index] = key
        if items:
            self.payloads[index] = [i.raw for i in items]


def _unsure_answers(fresh: Sequence[Finished]) -> dict[str, dict[str, float]]:
    """question -> {id: margin of its answer} for the answers marked ``"review": true``."""
    out: dict[str, dict[str, float]] = {}
    for f in fresh:
        for question in f.result.questions_to_review():
            scores = f.result.answers[question].get("scores") or {}
            out.setdefault(question, {})[f.result.id] = review_margin(scores)
    return out


def _raw(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _any(value: bytes) -> Any:
    """redis-py types list values as ``str``; raw payloads are bytes and must stay bytes."""
    return value
