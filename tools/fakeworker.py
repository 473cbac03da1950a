"""``python -m tools.fakeworker``: the real worker service with the keyword classifier of
:mod:`tools.fake` in place of the engine. For tests and the chaos harness; never shipped.

It takes every ``ticketq-worker run`` flag; ``--model`` names the fake's labels, ``fake:a,b,c`` (optionally
``?delay_ms=N``), and defaults to ``fake:billing,technical,account``. The fake's test hooks (a ticket
containing ``__raise__`` makes the classifier raise; ``__exit__`` ends the process, status 70) exist
only here, so no worker started with ``ticketq-worker`` can be made to run them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace

from producer.exitcodes import Exit
from tools.fake import PREFIX, KeywordClassifier
from worker import settings as settings_mod
from worker.engine.options import EngineOptions
from worker.errors import ConfigError
from worker.settings import Settings
from worker.wiring import Loaded, serve

DEFAULT_MODEL = PREFIX + "billing,technical,account"


def load_fake(settings: Settings) -> Loaded:
    spec = settings.engine.model
    return Loaded(KeywordClassifier.from_spec(spec, batch_size=settings.engine.batch_size))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fakeworker", description=__doc__)
    settings_mod.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_mod.from_args(args)
    except ConfigError as exc:
        print(f"fakeworker: {exc}", file=sys.stderr)
        return Exit.CONFIG
    if settings.engine.model == EngineOptions().model:  # not given: the fake's default labels
        settings = replace(settings, engine=replace(settings.engine, model=DEFAULT_MODEL))
    elif not settings.engine.model.startswith(PREFIX):
        print(f"fakeworker: --model must be {PREFIX}LABEL,LABEL...", file=sys.stderr)
        return Exit.CONFIG
    return serve(settings, load=load_fake)


if __name__ == "__main__":
    sys.exit(main())
