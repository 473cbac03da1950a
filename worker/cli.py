"""``ticketq-worker``: run the service (the default command), or ``check``, ``verify``, ``bench``, ``eval``.

``ticketq-worker --burst`` means ``ticketq-worker run --burst``. The other commands live in their own
modules (each with ``add_arguments(parser)`` and ``run(args) -> int``) and are imported only when they
are the command being run, so starting the service never pays for them; one that is not installed yet
is simply not offered.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from producer.protocol import Keys, cluster_prefix
from worker import settings as settings_mod
from worker.errors import EXIT_CONFIG, EXIT_MODEL, ConfigError
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.judge import Classifier
    from worker.metrics import Metrics
    from worker.service import Service

# command -> module; each module exposes add_arguments(parser) and run(args) -> int
_COMMANDS = {
    "check": "worker.check",
    "verify": "worker.verify",
    "bench": "worker.bench",
    "eval": "worker.evaluate",
}
_SOCKET_TIMEOUT_S = 15.0  # above the longest BLMOVE block (1 s), below "looks hung"


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    available = {name: mod for name, mod in _COMMANDS.items() if _exists(mod)}
    # `ticketq-worker --help` shows the run flags (what an operator looks for), naming the other commands
    if not args_in or args_in[0] not in {"run", *available}:
        args_in.insert(0, "run")
    parser = argparse.ArgumentParser(
        prog="ticketq-worker", description="Classify support tickets from Redis with a small language model."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    others = ", ".join(available)
    run = sub.add_parser(
        "run",
        help="classify tickets from Redis until stopped (the default)",
        usage="ticketq-worker [run] [flags]",
        description="Classify tickets from Redis until stopped (the default command). Other commands: "
        f"{others} (ticketq-worker COMMAND --help). Exit codes: 0 stopped or burst done, 1 model failed "
        "to load, 2 settings, 3 Redis auth or permissions, 4 a key of the wrong type, 5 --burst gave up "
        "on Redis, 6 stalled (watchdog), 128+N second signal N.",
    )
    settings_mod.add_arguments(run)
    run.set_defaults(func=run_service)
    for name, module in available.items():
        if args_in[0] == name:  # import only the command that runs
            mod: Any = importlib.import_module(module)
            cmd = sub.add_parser(name, help=_first_line(mod.__doc__))
            mod.add_arguments(cmd)
            cmd.set_defaults(func=mod.run)
        else:
            sub.add_parser(name, help=f"see: ticketq-worker {name} --help")
    args = parser.parse_args(args_in)
    return int(args.func(args))


def run_service(args: argparse.Namespace) -> int:
    """Settings, then every check that needs no model (exit 2), then metrics, the model and the loop."""
    from worker import preflight

    try:
        settings = settings_mod.from_args(args)
        preflight.check(settings)
    except ConfigError as exc:
        print(f"ticketq-worker: {exc}", file=sys.stderr)
        return EXIT_CONFIG
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
            return EXIT_CONFIG
        log.info("metrics_serving", port=settings.metrics_port, path="/metrics")
    try:
        classifier, routes, handler = load_classifier(settings)
    except Exception as exc:  # one clear log line and exit 1, not a traceback
        log.error("engine_load_failed", model=settings.model, error=f"{type(exc).__name__}: {exc}")
        return EXIT_MODEL
    try:
        service = build_service(settings, classifier, routes, handler, metrics=metrics)
    except ValueError as exc:  # e.g. routes without a handler
        log.error("bad_routes", error=str(exc))
        return EXIT_CONFIG
    service.install_signals()
    return int(service.run())


def load_classifier(settings: Settings) -> tuple[Classifier, dict[str, str], str | None]:
    """The engine and the task file's routes. ``fake:...`` selects the keyword test double."""
    from worker import fake

    if settings.model.startswith(fake.PREFIX):
        return fake.KeywordClassifier.from_spec(settings.model, batch_size=settings.batch_size), {}, None
    from worker.engine import Engine  # torch is imported here, and only here

    engine = Engine.load(
        model=settings.model,
        dtype=settings.dtype,
        device=settings.device,
        task_path=settings.task,
        batch_size=settings.batch_size,
        max_batch_tokens=settings.max_batch_tokens,
        threads=settings.threads,
    )
    return engine, dict(engine.task.routes), engine.task.route_handler


def build_service(
    settings: Settings,
    classifier: Classifier,
    routes: dict[str, str],
    handler: str | None,
    *,
    metrics: Metrics | None = None,
) -> Service:
    from worker.heartbeat import Heartbeat
    from worker.metrics import Metrics
    from worker.queue import RedisQueue, connect
    from worker.service import Service

    metrics = metrics or Metrics()
    keys = Keys(cluster_prefix(settings.prefix) if settings.cluster else settings.prefix)
    client = connect(settings.redis_url, socket_timeout=_SOCKET_TIMEOUT_S, cluster=settings.cluster)
    queue = RedisQueue(
        client,
        keys,
        settings.worker_id,
        max_attempts=settings.max_attempts,
        keep_results_s=settings.keep_results_s,
        max_dead=settings.max_dead,
    )
    # The heartbeat gets its own connection so a long batch or a blocked claim never delays it; it
    # beats only while the loop makes progress (the watchdog: see worker.heartbeat).
    beat_queue = RedisQueue(connect(settings.redis_url, cluster=settings.cluster), keys, settings.worker_id)
    heartbeat = Heartbeat(
        beat_queue,
        settings.heartbeat_s,
        settings.heartbeat_every_s,
        {"model": classifier.name},
        stall_timeout_s=settings.stall_timeout,
        on_progress=metrics.progress.set,
    )
    routes = {**routes, **dict(settings.routes)}
    hook = None
    if routes:
        from worker.routing import Router

        hook = Router(client, routes, settings.route_handler or handler or "")
    return Service(settings, queue, classifier, heartbeat=heartbeat, hook=hook, metrics=metrics)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n")[0]
