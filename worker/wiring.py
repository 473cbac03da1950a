"""Assembling a worker: load the classifier, connect the queue, heartbeat and routes, then serve.

``ticketq-worker run`` goes through :func:`serve`; the demo, the bench and ``tools/fakeworker.py`` reuse
the same pieces (a fake classifier in place of the engine, or an engine already loaded), so none of them
imports the CLI.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from producer.exitcodes import Exit
from producer.protocol import Keys, cluster_prefix
from worker.connection import SOCKET_TIMEOUT_S
from worker.contract import Classifier
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.metrics import Metrics
    from worker.service import Service


@dataclass(frozen=True)
class Loaded:
    """A classifier and the routes its task file asks for (label -> RQ queue, and the job function)."""

    classifier: Classifier
    routes: Mapping[str, str] = field(default_factory=dict)
    route_handler: str | None = None


def load_classifier(settings: Settings) -> Loaded:
    """The engine for ``settings.engine``, with its task's routes."""
    from worker import logs
    from worker.engine import Engine  # torch is imported here, and only here

    log = logs.get_logger("worker.engine")
    engine = Engine.load(settings.engine, log=lambda event, **fields: log.info(event, **fields))
    if engine.head is not None:
        log.info("head_loaded", **engine.head.summary())
    return Loaded(engine, dict(engine.task.routes), engine.task.route_handler)


def merge_routes(settings: Settings, loaded: Loaded) -> tuple[dict[str, str], str]:
    """The task file's routes, overridden label by label by ``--route``; the flag's handler wins too."""
    routes = {**loaded.routes, **dict(settings.routes)}
    return routes, settings.route_handler or loaded.route_handler or ""


def build_service(settings: Settings, loaded: Loaded, *, metrics: Metrics | None = None) -> Service:
    from worker.connection import connect
    from worker.heartbeat import Heartbeat
    from worker.metrics import Metrics
    from worker.queue import RedisQueue
    from worker.service import Service

    metrics = metrics or Metrics()
    keys = Keys(cluster_prefix(settings.prefix) if settings.cluster else settings.prefix)
    client = connect(settings.redis_url, socket_timeout=SOCKET_TIMEOUT_S, cluster=settings.cluster)
    classifier = loaded.classifier
    questions = tuple(getattr(classifier, "questions", ()) or ())  # an engine's task's; a double's: none
    queue = RedisQueue(
        client,
        keys,
        settings.worker_id,
        max_attempts=settings.max_attempts,
        keep_results_s=settings.keep_results_s,
        max_dead=settings.max_dead,
        keep_text_s=settings.keep_text_s,
        questions=questions,
    )
    # The heartbeat gets its own connection so a long batch or a blocked claim never delays it; it
    # beats only while the loop makes progress (the watchdog: see worker.heartbeat).
    beat_queue = RedisQueue(connect(settings.redis_url, cluster=settings.cluster), keys, settings.worker_id)
    heartbeat = Heartbeat(
        beat_queue,
        settings.heartbeat_s,
        settings.heartbeat_every_s,
        # the task's further questions: the dashboard offers their review queues
        {"model": classifier.name, **({"questions": list(questions)} if questions else {})},
        stall_timeout_s=settings.stall_timeout,
        on_progress=metrics.progress.set,
    )
    routes, handler = merge_routes(settings, loaded)
    hook = None
    if routes:
        from worker.routing import Router

        hook = Router(client, routes, handler)
    from worker.headwatch import HeadWatch

    def head_loaded(version: str) -> None:  # stats and the dashboard show which head each worker runs
        heartbeat.info["head_version"] = version

    heads = HeadWatch(client, keys, classifier, on_loaded=head_loaded)
    return Service(settings, queue, classifier, heartbeat=heartbeat, hook=hook, metrics=metrics, heads=heads)


def serve(settings: Settings, load: Callable[[Settings], Loaded] = load_classifier) -> int:
    """Log set-up, load, build, run until stopped; the exit status. A classifier that fails to load or
    routes without a handler are one clear log line, not a traceback. SIGTERM or SIGINT before the
    service serves (Redis being checked, the model loading) stops the worker with exit 0: it holds
    nothing yet."""
    from worker import logs
    from worker.metrics import Metrics

    logs.configure(settings.log_format, settings.log_level, bind={"worker_id": settings.worker_id})
    log = logs.get_logger("worker.cli")
    metrics = Metrics()
    if settings.metrics_port is not None:
        try:  # before the model loads: a scrape during a slow start shows the worker is coming up
            metrics.serve(settings.metrics_port)
        except OSError as exc:
            log.error("bad_settings", error=f"metrics-port {settings.metrics_port}: {exc}")
            return Exit.CONFIG
        log.info("metrics_serving", port=settings.metrics_port, path="/metrics")
    # a stop while Redis is checked or the model loads (it can take a while) is a clean stop, exit 0:
    # nothing is claimed yet; the service's own handlers take over once it is built
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for sig in before:  # main thread only, as the service's own
            signal.signal(sig, _stop_before_serving)
        try:
            service = _start(settings, load, metrics, log)
        except _StopBeforeServing as stop:
            log.info("stopping", signal=signal.Signals(stop.signum).name, served=False)
            return Exit.OK
        return service if isinstance(service, int) else int(service.run())
    finally:  # the caller's handlers back (a test's process goes on)
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _start(
    settings: Settings, load: Callable[[Settings], Loaded], metrics: Metrics, log: Any
) -> Service | int:
    """Redis checked, the classifier loaded and the service built, its signal handlers installed; or the
    exit status of what failed, one clear log line each."""
    from worker.startcheck import check_redis

    checked = check_redis(settings, log)
    if checked is not None:
        return checked
    log.info("loading", model=settings.engine.model)
    try:
        loaded = load(settings)
    except Exception as exc:  # one clear log line and exit 1 (2: a head that does not fit), not a traceback
        if _is_head_error(exc):
            log.error("head_refused", error=str(exc))
            return Exit.CONFIG
        log.error("engine_load_failed", model=settings.engine.model, error=f"{type(exc).__name__}: {exc}")
        return Exit.FAILED
    try:
        service = build_service(settings, loaded, metrics=metrics)
    except ValueError as exc:  # e.g. routes without a handler
        log.error("bad_routes", error=str(exc))
        return Exit.CONFIG
    service.install_signals()
    return service


class _StopBeforeServing(BaseException):
    """SIGTERM/SIGINT before the service took over its signals. BaseException, so the load's ``except
    Exception`` (a model that fails to load) does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_before_serving(signum: int, _: object) -> None:
    raise _StopBeforeServing(signum)


def _is_head_error(exc: Exception) -> bool:
    """A head that does not fit the model or task (exit 2, a configuration error). The engine module is
    only imported if it is already loaded: a fake classifier's failure must not pull torch in."""
    import sys

    head = sys.modules.get("worker.engine.head")
    return head is not None and isinstance(exc, head.HeadError)
