"""One exit-code table for every command (producer/exitcodes.py), shown by --help, checked against README
(tests/unit/test_config.py compares README's generated tables)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis

from producer.exitcodes import TABLE, Exit, epilog, for_redis_error


def test_every_code_has_one_meaning_and_the_ones_others_rely_on_are_fixed() -> None:
    assert set(TABLE) == set(Exit) and len({int(e) for e in Exit}) == len(Exit)
    assert (Exit.FAILED, Exit.CONFIG, Exit.REDIS_ACCESS, Exit.REDIS_REFUSED) == (1, 2, 3, 4)
    assert (Exit.REDIS_GONE, Exit.STALLED, Exit.INTERNAL) == (5, 6, 70)
    assert Exit.HEAD_WORSE not in (0, 1, 2, 3, 4, 5, 6, 70)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (redis.ConnectionError("refused"), Exit.REDIS_ACCESS),
        (redis.AuthenticationError("WRONGPASS"), Exit.REDIS_ACCESS),
        (redis.exceptions.NoPermissionError("NOPERM"), Exit.REDIS_ACCESS),
        (redis.ResponseError("WRONGTYPE"), Exit.REDIS_REFUSED),
    ],
)
def test_a_redis_error_maps_to_its_code(exc: Exception, code: Exit) -> None:
    assert for_redis_error(exc) == code


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--help"],
        ["worker", "check", "--help"],
        ["producer", "--help"],
        ["producer.dashboard", "--help"],
    ],
)
def test_help_prints_the_table(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", *argv], capture_output=True, text=True, check=True, env={"COLUMNS": "10000"}
    ).stdout
    assert " ".join(epilog().split()) in " ".join(out.split())
