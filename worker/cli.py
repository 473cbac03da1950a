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
from typing import Any

from producer.exitcodes import Exit, epilog
from worker import settings as settings_mod
from worker.errors import ConfigError

# command -> module; each module exposes add_arguments(parser) and run(args) -> int
_COMMANDS = {
    "check": "worker.check",
    "verify": "worker.verify",
    "bench": "worker.bench.cli",
    "eval": "worker.evaluate",
    "train": "worker.train",
}


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    available = {name: mod for name, mod in _COMMANDS.items() if _exists(mod)}
    # `ticketq-worker --help` shows the run flags (what an operator looks for), naming the other commands
    if not args_in or args_in[0] not in {"run", *available}:
        args_in.insert(0, "run")
    parser = argparse.ArgumentParser(
        prog="ticketq-worker",
        description="Classify support tickets from Redis with a small language model.",
        epilog=epilog(),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    others = ", ".join(available)
    run = sub.add_parser(
        "run",
        help="classify tickets from Redis until stopped (the default)",
        usage="ticketq-worker [run] [flags]",
        description="Classify tickets from Redis until stopped (the default command). Other commands: "
        f"{others} (ticketq-worker COMMAND --help).",
        epilog=epilog(),
    )
    settings_mod.add_arguments(run)
    run.set_defaults(func=run_service)
    for name, module in available.items():
        if args_in[0] == name:  # import only the command that runs
            mod: Any = importlib.import_module(module)
            cmd = sub.add_parser(name, help=_first_line(mod.__doc__), epilog=epilog())
            mod.add_arguments(cmd)
            cmd.set_defaults(func=mod.run)
        else:
            sub.add_parser(name, help=f"see: ticketq-worker {name} --help")
    args = parser.parse_args(args_in)
    return int(args.func(args))


def run_service(args: argparse.Namespace) -> int:
    """Settings, then every check that needs no model (exit 2, before torch is imported), then serve."""
    from worker import preflight

    try:
        settings = settings_mod.from_args(args)
        preflight.check(settings)
    except ConfigError as exc:
        print(f"ticketq-worker: {exc}", file=sys.stderr)
        return Exit.CONFIG
    from worker import wiring

    return wiring.serve(settings)


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n")[0]
