"""Every exit status of every ticketq command, one meaning per code; ``--help`` and README show this table.

The same code means the same thing in ``ticketq-worker`` (run and its operator commands),
``ticketq-producer`` and ``ticketq-dashboard``, so a supervisor or a script can act on it without
knowing which command ran. ``tests/unit/test_exitcodes.py`` checks README's table against this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    OK = 0
    FAILED = 1
    CONFIG = 2
    REDIS_ACCESS = 3
    REDIS_REFUSED = 4
    REDIS_GONE = 5
    STALLED = 6
    HEAD_WORSE = 7
    INTERNAL = 70  # as sysexits' EX_SOFTWARE
    SIGNAL = 128  # 128 + N: stopped by a second signal N


@dataclass(frozen=True)
class Meaning:
    short: str  # for --help
    when: str
    action: str  # what a supervisor should do


TABLE: dict[Exit, Meaning] = {
    Exit.OK: Meaning(
        "done",
        "done; `run`: stopped by SIGTERM/SIGINT (drain finished, the rest requeued), or `--burst` found the "
        "input empty",
        "nothing",
    ),
    Exit.FAILED: Meaning(
        "failed (model, health, result, head file)",
        "the work failed: the model failed to load (`engine_load_failed`), `check` found no healthy "
        "worker, `verify` found labels that differ in float32, `push --wait`/`get` lack a result, a head "
        "could not be written",
        "fix the model or its cache; for `check`, restart the worker",
    ),
    Exit.CONFIG: Meaning(
        "bad setting or input",
        "a bad setting or input: flag, variable, dtype, device, task file, model path, a route to a label "
        "the task lacks, `--metrics-port` in use, a bad ticket file. Found before the model loads",
        "fix the configuration; restarting will not help",
    ),
    Exit.REDIS_ACCESS: Meaning(
        "Redis unreachable or refused credentials/permissions",
        "Redis cannot be used: unreachable at the command's one try (producer, dashboard, `train`), or it "
        "refused the credentials or an ACL permission (`WRONGPASS`, `NOAUTH`, `NOPERM`)",
        "fix the URL, the password or the ACL",
    ),
    Exit.REDIS_REFUSED: Meaning(
        "Redis refused a command (wrong type)",
        "Redis refused a command: a ticketq key holds the wrong type (`WRONGTYPE`), something else writes "
        "under the prefix",
        "pick another prefix or clean the key",
    ),
    Exit.REDIS_GONE: Meaning(
        "--burst gave up on an unreachable Redis",
        "`--burst` and Redis stayed unreachable for `--burst-wait-s` while the worker retried",
        "retry the job later",
    ),
    Exit.STALLED: Meaning(
        "stalled (watchdog)",
        "the watchdog: no progress for `--stall-timeout` (a hung forward pass)",
        "restart it (its claims are already with peers)",
    ),
    Exit.HEAD_WORSE: Meaning(
        "publish refused: candidate head worse",
        "`train --publish` refused to publish: the candidate head scored worse than the current one",
        "keep the current head; look at the corrections",
    ),
    Exit.INTERNAL: Meaning(
        "internal error",
        "an unexpected internal error (a bug): one `fatal` event, `cause: internal`, with the traceback; or "
        "the heartbeat thread died (`cause: heartbeat`). Claims stay for recovery, which counts an attempt, "
        "so a payload that trips the bug everywhere ends as a poison letter",
        "restart it, and report the traceback",
    ),
    Exit.SIGNAL: Meaning(
        "stopped by a second signal N",
        "128+N: a second signal N during a drain (what it held was requeued)",
        "nothing",
    ),
}


def epilog() -> str:
    """The table in one paragraph, for ``--help``."""
    return "Exit codes: " + "; ".join(f"{code(e)} {m.short}" for e, m in TABLE.items()) + "."


def markdown() -> str:
    """README's exit-code table."""
    rows = ["| code | name | when | what a supervisor should do |", "|---|---|---|---|"]
    for e, m in TABLE.items():
        rows.append(f"| {code(e)} | `{e.name}` | {m.when} | {m.action} |")
    return "\n".join(rows)


def code(e: Exit) -> str:
    return "128+N" if e is Exit.SIGNAL else str(int(e))


def for_redis_error(exc: Exception) -> Exit:
    """The code of a Redis error met on a command's one try: refused credentials or permissions and an
    unreachable server are :attr:`Exit.REDIS_ACCESS`; any other refused command (``WRONGTYPE``) is
    :attr:`Exit.REDIS_REFUSED`."""
    import redis

    if isinstance(exc, redis.exceptions.NoPermissionError):
        return Exit.REDIS_ACCESS
    return Exit.REDIS_REFUSED if isinstance(exc, redis.ResponseError) else Exit.REDIS_ACCESS
