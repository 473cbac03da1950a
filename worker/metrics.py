"""Prometheus metrics for one worker process, served at ``/metrics`` when ``--metrics-port`` is set.

Built on the official client (``prometheus_client``) with a registry of its own, so two workers in one
test process, or a worker inside a bigger application, never clash on the global registry. The service
records into a :class:`Metrics` object whether or not it is served: recording is a few dict look-ups,
and keeping one code path means the numbers a scrape shows are the ones the tests check.

Per-worker numbers (counters, histograms, this worker's in-flight count) add up across a fleet with
``sum()``; the queue-wide gauges (depth, oldest ticket age) are the same on every worker, so take
``max()`` of them, not the sum.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import start_http_server

from producer.protocol import reason_kind

# A forward pass takes milliseconds on a GPU and seconds on a small CPU: buckets span both.
_PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DRAIN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# Queue wait runs from "nothing waits" to "a backlog of hours".
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600)


class Metrics:
    """Every metric the worker exports. Names are the public interface: see README, Monitoring."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.tickets = Counter(
            "ticketq_tickets", "Tickets finished, by outcome (labelled or dead)", ["outcome"], registry=reg
        )
        self.labels = Counter("ticketq_labels", "Tickets labelled, by label", ["label"], registry=reg)
        self.answers = Counter(
            "ticketq_answers",
            "Answers to a task's further questions ([questions.NAME]), by question and label",
            ["question", "label"],
            registry=reg,
        )
        self.dead = Counter(
            "ticketq_dead_letters",
            "Dead letters written, by reason kind (producer.protocol.DEAD_REASON_KINDS, or other)",
            ["reason"],
            registry=reg,
        )
        self.review = Counter(
            "ticketq_review",
            "Tickets labelled, by whether they were marked for review (below the threshold) or decided "
            "automatically",
            ["decision"],
            registry=reg,
        )
        self.review_threshold = Gauge(
            "ticketq_review_threshold", "Confidence below which results need review (-1: none)", registry=reg
        )
        self.review_threshold.set(-1)
        self.question_review = Counter(
            "ticketq_question_review",
            "Answers to a task's further questions, by question and whether they were marked for review "
            "(below that question's threshold) or decided automatically",
            ["question", "decision"],
            registry=reg,
        )
        self.question_review_threshold = Gauge(
            "ticketq_question_review_threshold",
            "Confidence below which a further question's answers need review (-1: none)",
            ["question"],
            registry=reg,
        )
        self.redelivered = Counter(
            "ticketq_redelivered", "Payloads seen again after their result was written", registry=reg
        )
        self.pass_seconds = Histogram(
            "ticketq_pass_seconds", "Duration of one forward pass", buckets=_PASS_BUCKETS, registry=reg
        )
        self.drain_seconds = Histogram(
            "ticketq_drain_seconds",
            "Claim to ack of one drain (decode, classify, write)",
            buckets=_DRAIN_BUCKETS,
            registry=reg,
        )
        self.queue_wait = Histogram(
            "ticketq_queue_wait_seconds",
            "Enqueue (the ticket's enqueued_at) to claim, for tickets that carry enqueued_at",
            buckets=_WAIT_BUCKETS,
            registry=reg,
        )
        self.tokens = Counter(
            "ticketq_tokens", "Tokens of the forward passes: real (scored) or padded (computed)", ["kind"],
            registry=reg,
        )  # fmt: skip
        self.padding = Gauge(
            "ticketq_padding_ratio", "Padded share of the tokens computed in the last drain", registry=reg
        )
        self.tokens_per_s = Gauge(
            "ticketq_tokens_per_second", "Real tokens per second of the last drain's passes", registry=reg
        )
        self.depth = Gauge("ticketq_queue_depth", "Tickets waiting in P:tickets (queue-wide)", registry=reg)
        self.inflight = Gauge(
            "ticketq_inflight", "Tickets this worker has claimed and not acked", registry=reg
        )
        self.oldest = Gauge(
            "ticketq_oldest_ticket_age_seconds",
            "Age of the next ticket to be served, from its enqueued_at (0 when empty or unstamped)",
            registry=reg,
        )
        # the age grows between reads of the queue (a long drain reads nothing): computed at scrape time
        self.oldest_enqueued_at: float | None = None
        self.oldest.set_function(
            lambda: max(0.0, time.time() - self.oldest_enqueued_at) if self.oldest_enqueued_at else 0.0
        )
        self.redis_errors = Counter(
            "ticketq_redis_errors", "Redis steps that failed and were retried", registry=reg
        )
        self.progress = Gauge(
            "ticketq_last_progress_timestamp_seconds",
            "Unix time the worker loop last made progress (the watchdog's clock)",
            registry=reg,
        )
        self.worker = Info("ticketq_worker", "This worker: id, model, dtype, device", registry=reg)
        self.head = Info("ticketq_head", "The classification head in use (or zero-shot)", registry=reg)
        self.head.info({"method": "zero-shot", "id": "", "version": ""})
        self.question_head = Info(
            "ticketq_question_head", "The head answering each further question", ["question"], registry=reg
        )

    # -- recording -------------------------------------------------------------------------------------

    def set_worker_info(self, worker_id: str, describe: Mapping[str, Any]) -> None:
        keep = ("model", "dtype", "device", "task")
        self.worker.info({"worker_id": worker_id, **{k: str(describe.get(k, "")) for k in keep}})

    def set_head_info(self, *, head_id: str | None, version: str | None, model: str = "") -> None:
        """Called when a head is loaded (or dropped: ``head_id=None`` means zero-shot)."""
        method = "head" if head_id else "zero-shot"
        self.head.info({"method": method, "id": head_id or "", "version": version or "", "model": model})

    def set_question_heads(self, heads: Mapping[str, Any]) -> None:
        """question -> its head (None: not answered yet), as the classifier holds them."""
        for question, head in heads.items():
            info = {"id": getattr(head, "id", "") or "", "version": getattr(head, "version", "") or ""}
            self.question_head.labels(question).info(info)

    def observe_answers(self, answers: Iterable[Mapping[str, Mapping[str, Any]]]) -> None:
        """Each fresh result's answers (``Result.answers``): counted by question and label, and by
        whether they need review."""
        for per_question in answers:
            for question, answer in per_question.items():
                self.answers.labels(question, str(answer.get("label"))).inc()
                decision = "review" if answer.get("review") is True else "auto"
                self.question_review.labels(question, decision).inc()

    def observe_pass(self, seconds: float, real_tokens: int, padded_tokens: int) -> None:
        self.pass_seconds.observe(seconds)
        self.tokens.labels("real").inc(real_tokens)
        self.tokens.labels("padded").inc(padded_tokens)

    def observe_drain(
        self,
        seconds: float,
        labels: Iterable[str],
        dead_reasons: Iterable[str],
        redelivered: int,
        passes: Iterable[tuple[float, int, int]],
    ) -> None:
        """One acked drain: its labels, dead letters and (seconds, real, padded) per pass."""
        self.drain_seconds.observe(seconds)
        n = 0
        for label in labels:
            self.labels.labels(label).inc()
            n += 1
        if n:
            self.tickets.labels("labelled").inc(n)
        for reason in dead_reasons:
            self.tickets.labels("dead").inc()
            self.dead.labels(reason_kind(reason)).inc()
        if redelivered:
            self.redelivered.inc(redelivered)
        busy = real = padded = 0.0
        for s, r, p in passes:
            busy, real, padded = busy + s, real + r, padded + p
        if padded:
            self.padding.set((padded - real) / padded)
        if busy > 0:
            self.tokens_per_s.set(real / busy)

    def render(self) -> bytes:
        """The text a scrape gets (for tests and ``ticketq-worker check --metrics``)."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str = "0.0.0.0") -> Any:
        """Start the /metrics HTTP server on a daemon thread; returns the server (for tests to close)."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
