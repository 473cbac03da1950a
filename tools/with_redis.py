"""``python -m tools.with_redis COMMAND [ARG...]``: run a command with ``TICKETQ_TEST_REDIS_URL`` naming a
Redis that the tests may write to and flush. ``make test`` and CI run the suite through it; the suite's
conftest finds its Redis the same way (:func:`find_test_redis`) when run without it.

Which Redis, first match wins:

1. ``TICKETQ_TEST_REDIS_URL``, when it is already set: used as it is.
2. A Redis answering PING on 127.0.0.1:6379 (database 15, to stay clear of anything in database 0).
3. A throwaway redis-server on a free local port: no persistence, its files under a temporary directory,
   stopped and removed when the command ends, however it ends.
4. None: with ``CI=true`` that is an error (the Redis tier must run in CI); otherwise the command runs
   without the variable and the Redis tests skip, saying why.

The command's exit status is this one's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

from tools.redis_server import local_redis

ENV = "TICKETQ_TEST_REDIS_URL"
LOCAL = "redis://127.0.0.1:6379/15"


@contextlib.contextmanager
def find_test_redis(environ: Mapping[str, str] | None = None) -> Iterator[tuple[str | None, str]]:
    """``(url or None, where it came from)`` for the ``with`` block (a server started here stops after)."""
    env = os.environ if environ is None else environ
    with local_redis(given=env.get(ENV), try_urls=[LOCAL]) as (url, how):
        yield url, f"{ENV} from the environment" if how == "given" else f"{url} ({how})" if url else how


def _log(message: str) -> None:
    print(f"with_redis: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        _log("usage: python -m tools.with_redis COMMAND [ARG...]")
        return 2
    # SIGTERM unwinds like Ctrl-C does, so a server started here is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with find_test_redis() as (url, how):
        env = dict(os.environ)
        if url is not None:
            env[ENV] = url
            _log(f"using {how}")
        elif os.environ.get("CI", "").lower() == "true":
            _log(f"CI=true and {how}, and {ENV} is not set. Start Redis, install redis-server or set {ENV}.")
            return 1
        else:
            _log(f"{how}: running anyway; the tests that need a real Redis will skip")
        try:
            return subprocess.call(command, env=env)
        except FileNotFoundError:
            _log(f"command not found: {command[0]}")
            return 127
        except KeyboardInterrupt:
            return 130


if __name__ == "__main__":
    sys.exit(main())
