"""The worker loop: recover orphans -> claim -> stage (decode + classify) -> ack, until told to stop.

Stopping. The first SIGTERM/SIGINT stops claiming; the drain being classified is finished and acked,
anything claimed but not started is requeued, and the process exits 0. A second signal abandons the
drain: what is held is requeued and the process exits at once (128 + signal number). A signal before the
service runs (the model loading) exits 0 at once: :func:`worker.wiring.serve`.

Redis outages. Every Redis step is retried with bounded, jittered back-off (logged once per attempt,
interruptible by a stop signal); a drain that was classified is acked when Redis is back, never
classified twice by this worker. A stop during an outage exits in bounded time: the in-flight list
stays in Redis, the heartbeat expires, and a peer's recovery requeues it (counting one attempt).
With ``--burst`` the worker gives up after ``burst_wait_s`` of outage (exit 5): a batch job must end.

Errors no wait can fix (a wrong password, missing ACL permissions, a ticketq key of the wrong type)
end the worker at once with one ``fatal`` event and the error's exit code; what it holds is handed
back first when Redis still takes that command. An exception nobody classified (a bug) ends it with one
``fatal`` event carrying the traceback and exit code 7; what it holds is *not* handed back but left for
recovery, which counts an attempt, so a payload that trips the bug on every worker ends as a poison
letter instead of crash-looping the fleet. If the heartbeat thread dies, the worker stops claiming and
ends the same way: peers would otherwise take its claims while it still works on them. Progress (each
claim, pass and retry) feeds the watchdog in :mod:`worker.heartbeat`.

Signal handlers only set flags (logging there could deadlock on the logger's lock); the loop logs
``stopping`` when it acts on one. A Redis outage is logged once per spell (``redis_unavailable``, then
``redis_restored`` with the attempts and seconds it lasted); each retry is a debug line.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from producer.exitcodes import Exit
from producer.protocol import MAX_REASON_CHARS
from worker import review
from worker.contract import Classifier
from worker.engine.types import BatchStats
from worker.errors import Backoff, FatalError, TransientError
from worker.headwatch import HeadWatch
from worker.heartbeat import Heartbeat
from worker.logs import get_logger
from worker.metrics import Metrics
from worker.queue import AckHook, AckReport, RedisQueue
from worker.review import Threshold
from worker.settings import Settings
from worker.stage import Outcome, process
from worker.startcheck import publish_labels, question_labels

T = TypeVar("T")

_BLOCK_S = 1.0  # longest a claim blocks on an empty input; bounds how fast a stop is noticed
_GAUGE_EVERY_S = 1.0  # queue depth and oldest-ticket age are read at most this often


class HardStop(BaseException):
    """Raised from the signal handler on a second signal. BaseException so no ``except Exception``
    (the engine-failure isolation, for one) swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Abandoned(Exception):
    """A stop was requested while Redis was unreachable: give up on the current step."""


class _GaveUp(Exception):
    """``--burst`` and Redis stayed unreachable past ``burst_wait_s``."""


class Service:
    def __init__(
        self,
        settings: Settings,
        queue: RedisQueue,
        classifier: Classifier,
        *,
        heartbeat: Heartbeat | None = None,
        hook: AckHook | None = None,
        backoff: Backoff | None = None,
        metrics: Metrics | None = None,
        heads: HeadWatch | None = None,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.classifier = classifier
        self.heartbeat = heartbeat
        self.hook = hook
        self.backoff = backoff or Backoff()
        self.metrics = metrics or Metrics()
        self.heads = heads  # follows the published head (P:head) between drains
        self.stopping = threading.Event()
        self._signals = 0
        self._signal_name = ""  # set by the handler, logged by the loop (never from inside the handler)
        self._next_gauges = 0.0
        self._head_seen: object = object()  # nothing seen yet: the first drain (or start) reports
        self._review_seen: Threshold | None = None
        self._question_review_seen: dict[str, Threshold] = {}
        self._log = get_logger("worker.service")

    # -- control ---------------------------------------------------------------------------------------

    def install_signals(self) -> None:
        """Main thread only (Python's rule for signal handlers)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        """Flags only: no logging, no I/O (a handler runs between any two bytecodes of the main thread,
        possibly while it holds the logger's lock). A second signal raises, to abandon the drain."""
        self._signals += 1
        if self._signals > 1:
            raise HardStop(signum)
        self._signal_name = signal.Signals(signum).name
        self.stopping.set()

    def _log_stopping(self, **fields: Any) -> None:
        if self._signal_name:
            self._log.info("stopping", signal=self._signal_name, **fields)
            self._signal_name = ""

    def stop(self) -> None:
        self.stopping.set()

    # -- the loop --------------------------------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        described = self.classifier.describe()
        self.metrics.set_worker_info(self.queue.worker_id, described)
        self._head_info()
        self._log.info("worker_start", **described, settings=s.public())
        try:
            self._retry(self._start)
            if self.heartbeat is not None:
                self.heartbeat.start()
            self._loop()
            self._log_stopping()
        except _Abandoned:
            self._log_stopping()
            self._log.warning(
                "exit_during_outage", note="in-flight payloads stay in Redis; recovery requeues them"
            )
            return 0
        except _GaveUp:
            self._log.error(
                "redis_gave_up",
                waited_s=s.burst_wait_s,
                note="--burst: Redis unreachable too long; in-flight payloads stay for recovery",
            )
            return Exit.REDIS_GONE
        except FatalError as exc:
            self._log.error("fatal", cause=exc.cause, error=str(exc), exit_code=exc.exit_code)
            self._leave()
            return exc.exit_code
        except HardStop as stop:
            self._log_stopping(hard=True)
            self._requeue_after_hard_stop()
            return Exit.SIGNAL + stop.signum
        except Exception as exc:  # a bug: one event with the traceback, and an exit code of its own
            self._log.error(
                "fatal",
                cause="internal",
                error=f"{type(exc).__name__}: {exc}"[:1000],
                exit_code=Exit.INTERNAL,
                note="claims are left for recovery, which counts an attempt against each",
                exc_info=True,
            )
            self._abandon_claims()
            return Exit.INTERNAL
        finally:
            if self.heartbeat is not None and self.heartbeat.is_alive():
                self.heartbeat.stop()
        self._leave()
        return 0

    def _progress(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.progress()
        else:
            self.metrics.progress.set(time.time())

    def _start(self) -> None:
        """Take back what an earlier process with this id left behind, then requeue dead peers' work."""
        own = self.queue.recover_worker(self.queue.worker_id, force=True)
        if own is not None and (own.requeued or own.dead):
            self._log.info(
                "requeued", worker=own.worker, count=own.requeued, dead=own.dead, why="own restart"
            )
        if self.heartbeat is not None:
            self.heartbeat.beat()
        labels = self.classifier.describe().get("labels")
        if isinstance(labels, list | tuple) and all(isinstance(x, str) for x in labels):
            publish_labels(self.queue, list(labels), question_labels(self.classifier))
        self._recover()

    def _loop(self) -> None:
        s = self.settings
        next_recovery = time.monotonic() + s.heartbeat_s
        # Burst mode is for draining and tests: notice an empty input quickly.
        block_s = min(_BLOCK_S, 0.1) if s.burst else _BLOCK_S
        while not self.stopping.is_set():
            self._progress()
            self._check_heartbeat()
            if time.monotonic() >= next_recovery:
                self._retry(self._recover)
                self._retry(self.queue.trim)
                next_recovery = time.monotonic() + s.heartbeat_s
            claimed = self._retry(
                lambda: self.queue.claim(
                    s.drain, block_s=block_s, max_wait_s=s.max_wait_ms / 1000, holds_nothing=True
                )
            )
            if self.queue.stale:
                self._log.warning(
                    "requeued", worker=self.queue.worker_id, count=self.queue.stale, why="stale"
                )
                self.queue.stale = 0
            self._gauges(len(claimed))
            if self.heads is not None:  # after the claim: a head published while it blocked labels it
                self._retry(self.heads.check)
            if not claimed:
                if s.burst and self._retry(self._input_done):
                    self._log.info("burst_done")
                    return
                continue
            if self.stopping.is_set():
                return  # claimed but not started: _leave() requeues it
            self._drain(claimed)

    def _check_heartbeat(self) -> None:
        """Claim only while the heartbeat thread runs: without it, peers take this worker for dead and
        recover its claims while it still works on them (every ticket labelled twice, attempts burnt)."""
        hb = self.heartbeat
        if hb is None or hb.ident is None or hb.is_alive():
            return
        self._log.error("heartbeat_dead", error=hb.failure or "the thread ended", note="no more claims")
        raise FatalError(
            f"heartbeat thread died: {hb.failure or 'ended'}", cause="heartbeat", exit_code=Exit.INTERNAL
        )

    def _drain(self, claimed: list[bytes]) -> None:
        began = time.perf_counter()
        verdict = process(
            claimed,
            self.classifier,
            self.queue.worker_id,
            on_pass=self._on_pass,
            claimed_at=time.time(),
            review=self._review_threshold(),
            question_review=self._question_thresholds(),
            keep_scores=self.settings.result_scores,
        )
        for err in verdict.engine_errors:
            self._log.error("engine_error", error=err)
        report = self._retry(lambda: self.queue.ack(verdict.finished, verdict.rejected, self.hook))
        seconds = time.perf_counter() - began
        self._progress()
        self._record(verdict, report, seconds)
        self._log_drain(claimed, verdict, report, seconds)
        self._retry(self.queue.trim)

    def _review_threshold(self) -> Threshold:
        """Resolved per drain (a published head may bring its own); logged when it changes."""
        threshold = review.resolve(self.settings.review_below, self.classifier)
        if threshold != self._review_seen:
            self._review_seen = threshold
            self._log.info("review_threshold", threshold=threshold.value, source=threshold.source)
            self.metrics.review_threshold.set(-1 if threshold.value is None else threshold.value)
        return threshold

    def _question_thresholds(self) -> dict[str, Threshold]:
        """Each further question's threshold (its own head may be published), logged when it changes."""
        found = review.resolve_questions(self.classifier)
        for question, threshold in found.items():
            if self._question_review_seen.get(question) != threshold:
                self._question_review_seen[question] = threshold
                self._log.info(
                    "review_threshold", question=question, threshold=threshold.value, source=threshold.source
                )
                value = -1 if threshold.value is None else threshold.value
                self.metrics.question_review_threshold.labels(question).set(value)
        return found

    def _on_pass(self, b: BatchStats) -> None:
        """Each forward pass as it ends: the watchdog hears of progress, logs and metrics show it live."""
        self._progress()
        self.metrics.observe_pass(b.seconds, b.real_tokens, b.padded_tokens)
        self._log.info(
            "batch",
            items=b.items,
            rows=b.rows,
            real_tokens=b.real_tokens,
            padded_tokens=b.padded_tokens,
            padding_overhead=round(b.padding_overhead, 4),
            ms=round(b.seconds * 1000, 2),
            items_per_s=round(b.items_per_s, 1) if b.seconds > 0 else None,
        )

    def _record(self, verdict: Outcome, report: AckReport, seconds: float) -> None:
        labels = [f.result.label for f in report.fresh]  # first results only: redeliveries count apart
        marked = sum(f.result.review for f in report.fresh)
        if marked:
            self.metrics.review.labels("review").inc(marked)
        if len(report.fresh) > marked:
            self.metrics.review.labels("auto").inc(len(report.fresh) - marked)
        passes = [(b.seconds, b.real_tokens, b.padded_tokens) for b in verdict.stats]
        self.metrics.observe_drain(
            seconds, labels, [d.reason for d in report.dead], len(report.redelivered), passes
        )
        self.metrics.observe_answers(f.result.answers for f in report.fresh)
        for f in verdict.finished:
            if f.result.queued_s is not None:
                self.metrics.queue_wait.observe(f.result.queued_s)
        self.metrics.inflight.set(0)
        self._head_info()

    def _head_info(self) -> None:
        """Keep ``ticketq_head_info`` in step with the classifier's head (loaded between drains, maybe)."""
        head = getattr(self.classifier, "head", None)
        questions = dict(getattr(self.classifier, "answer_heads", None) or {})
        asked = {q: questions.get(q) for q in getattr(self.classifier, "questions", ()) or ()}
        if asked:
            self.metrics.set_question_heads(asked)
        if head is self._head_seen:
            return
        self._head_seen = head
        self.metrics.set_head_info(
            head_id=getattr(head, "id", None),
            version=getattr(head, "version", None),
            model=self.classifier.name,
        )

    def _gauges(self, claimed: int) -> None:
        """Queue-wide gauges, read at most once a second (two cheap reads, pipelined)."""
        self.metrics.inflight.set(claimed)
        now = time.monotonic()
        if now < self._next_gauges:
            return
        self._next_gauges = now + _GAUGE_EVERY_S
        try:
            depth, oldest = self.queue.depth_and_oldest()
        except TransientError:
            return
        self.metrics.depth.set(depth)
        self.metrics.oldest_enqueued_at = oldest

    def _input_done(self) -> bool:
        """Burst mode's exit test; a last recovery first, so a peer's orphans are not left behind."""
        if self._recover() or not self.queue.recovery_complete:  # P:workers not yet looked at to its end
            return False
        return self.queue.depth() == 0 and self.queue.held() == 0

    def _recover(self) -> int:
        moved = 0
        recovered = self.queue.recover()
        for wid, error in self.queue.recovery_errors.items():
            self._log.error("recovery_failed", worker=wid, error=error, note="other workers still recovered")
        self.queue.recovery_errors.clear()
        if not self.queue.recovery_complete:  # a set no fleet fills: said at every pass until worked through
            self._log.warning(
                "recovery_backlog",
                registered=self.queue.registered(),
                note="P:workers holds more ids than a recovery pass looks at (added by hand?): "
                "looked at a few hundred a pass, the worker serving between passes",
            )
        for rec in recovered:
            self._log.info(
                "requeued", worker=rec.worker, count=rec.requeued, dead=rec.dead, why="heartbeat expired"
            )
            moved += rec.requeued + rec.dead
        return moved

    def _abandon_claims(self) -> None:
        """After a bug: stop beating, drop the heartbeat: a peer recovers (and counts) the claims now."""
        if self.heartbeat is not None:
            self.heartbeat.stop()
        try:
            self.queue.drop_heartbeat()
        except Exception as exc:  # Redis may be the trouble: the heartbeat then expires on its own
            self._log.warning("drop_heartbeat_failed", error=f"{type(exc).__name__}: {exc}"[:500])

    def _leave(self) -> None:
        try:
            count = self.queue.requeue_own(leave=True)
        except (TransientError, FatalError) as exc:
            self._log.warning("requeue_failed", error=str(exc), note="recovery requeues them after the TTL")
            return
        if count:
            self._log.info("requeued", worker=self.queue.worker_id, count=count, why="shutdown")

    def _requeue_after_hard_stop(self) -> None:
        # The signal may have landed mid-command: drop every pooled connection rather than reuse one
        # that is half way through a reply.
        self.queue.redis.connection_pool.disconnect()
        self._leave()

    # -- Redis outages ---------------------------------------------------------------------------------

    def _retry(self, step: Callable[[], T]) -> T:
        delays = self.backoff.delays()
        failures = 0
        first_failure = 0.0
        while True:
            try:
                out = step()
            except TransientError as exc:
                self._progress()  # waiting on Redis is not a hang: the watchdog must not fire
                self.metrics.redis_errors.inc()
                if not failures:
                    first_failure = time.monotonic()
                elif self.settings.burst and time.monotonic() - first_failure >= self.settings.burst_wait_s:
                    raise _GaveUp from exc
                failures += 1
                delay = next(delays)
                # Once per spell at warning (a long outage must not flood the log); each retry at debug.
                log = self._log.warning if failures == 1 else self._log.debug
                log("redis_unavailable", error=str(exc), attempt=failures, retry_in_s=round(delay, 3))
                if self.stopping.wait(delay):
                    raise _Abandoned from exc
                continue
            if failures:
                waited = round(time.monotonic() - first_failure, 3)
                self._log.info("redis_restored", after_attempts=failures, waited_s=waited)
            return out

    # -- logging ---------------------------------------------------------------------------------------

    def _log_drain(self, claimed: list[bytes], verdict: Outcome, report: AckReport, seconds: float) -> None:
        for letter in report.dead:
            # as the letter stores it: a reason may quote a producer's value
            self._log.warning("dead_letter", id=letter.id, reason=letter.reason[:MAX_REASON_CHARS])
        fields: dict[str, Any] = {
            "claimed": len(claimed),
            "results": len(report.written),
            "dead": len(report.dead),
            "redelivered": len(report.redelivered),
            "ms": round(seconds * 1000, 2),
        }
        waits = [f.result.queued_s for f in verdict.finished if f.result.queued_s is not None]
        if waits:
            fields["queued_s_max"] = round(max(waits), 3)
        try:
            fields["queue_depth"] = self.queue.depth()
        except TransientError:
            fields["queue_depth"] = None
        self._log.info("drain", **fields)
