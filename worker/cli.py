"""``ticketq-worker``: run the service (the default command), or ``verify``, ``bench``, ``eval``.

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

from producer.protocol import Keys
from worker import settings as settings_mod
from worker.errors import ConfigError
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.judge import Classifier
    from worker.service import Service

# command -> module; each module exposes add_arguments(parser) and run(args) -> int
_COMMANDS = {
    "verify": "worker.verify",
    "bench": "worker.bench",
    "eval": "worker.evaluate",
    "train": "worker.train",
}
_SOCKET_TIMEOUT_S = 15.0  # above the longest BLMOVE block (1 s), below "looks hung"


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    available = {name: mod for name, mod in _COMMANDS.items() if _exists(mod)}
    if not args_in or args_in[0] not in {"run", *available, "-h", "--help"}:
        args_in.insert(0, "run")
    parser = argparse.ArgumentParser(
        prog="ticketq-worker", description="Classify support tickets from Redis with a small language model."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="classify tickets from Redis until stopped (the default)")
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
    try:
        settings = settings_mod.from_args(args)
    except ConfigError as exc:
        print(f"ticketq-worker: {exc}", file=sys.stderr)
        return 2
    from worker import logs

    logs.configure(settings.log_format, settings.log_level)
    log = logs.get_logger("worker.cli")
    try:
        classifier, routes, handler = load_classifier(settings)
    except Exception as exc:  # one clear log line and exit 1, not a traceback
        log.error("engine_load_failed", model=settings.model, error=f"{type(exc).__name__}: {exc}")
        return 1
    try:
        service = build_service(settings, classifier, routes, handler)
    except ValueError as exc:  # e.g. routes without a handler
        log.error("bad_routes", error=str(exc))
        return 2
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
    settings: Settings, classifier: Classifier, routes: dict[str, str], handler: str | None
) -> Service:
    from worker.heartbeat import Heartbeat
    from worker.queue import RedisQueue, connect
    from worker.service import Service

    keys = Keys(settings.prefix)
    client = connect(settings.redis_url, socket_timeout=_SOCKET_TIMEOUT_S)
    queue = RedisQueue(client, keys, settings.worker_id, max_attempts=settings.max_attempts)
    # The heartbeat gets its own connection so a long batch or a blocked claim never delays it.
    beat_queue = RedisQueue(connect(settings.redis_url), keys, settings.worker_id)
    heartbeat = Heartbeat(
        beat_queue, settings.heartbeat_s, settings.heartbeat_every_s, {"model": classifier.name}
    )
    routes = {**routes, **dict(settings.routes)}
    hook = None
    if routes:
        from worker.routing import Router

        hook = Router(client, routes, settings.route_handler or handler or "")
    return Service(settings, queue, classifier, heartbeat=heartbeat, hook=hook)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n")[0]
