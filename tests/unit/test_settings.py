"""Settings (flags over env over defaults, validated once, secrets masked), log set-up and the CLI shape."""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest
import structlog

from producer.client import mask_url
from worker import cli, logs
from worker.engine.options import EngineOptions
from worker.errors import ConfigError
from worker.settings import Settings, add_arguments, from_args


def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return from_args(parser.parse_args(argv), env or {})


def test_defaults() -> None:
    s = parse([])
    assert (s.redis_url, s.prefix, s.drain, s.max_wait_ms, s.burst) == (
        "redis://127.0.0.1:6379/0",
        "ticketq",
        256,
        50,
        False,
    )
    assert s.engine == EngineOptions()  # every engine default lives there, once
    e = s.engine
    assert (e.model, e.dtype, e.device, e.task, e.threads) == ("smollm2", "auto", "auto", None, None)
    assert (e.batch_size, e.max_batch_tokens, e.max_row_len, e.max_ticket_tokens) == (32, 8192, 128, 512)
    assert (s.heartbeat_s, s.max_attempts, s.routes) == (15.0, 3, ())


def test_flags_win_over_env_which_wins_over_defaults() -> None:
    env = {
        "TICKETQ_DRAIN": "64",
        "TICKETQ_BATCH_SIZE": "8",
        "TICKETQ_BURST": "yes",
        "TICKETQ_ROUTES": "a=q1,b=q2",
    }
    s = parse(["--drain", "128"], env)
    assert (s.drain, s.engine.batch_size, s.burst, s.routes) == (128, 8, True, (("a", "q1"), ("b", "q2")))
    assert parse(["--route", "x=qx", "--route", "y=qy"], env).routes == (("x", "qx"), ("y", "qy"))


@pytest.mark.parametrize(
    ("argv", "env", "problem"),
    [
        (["--drain", "0"], {}, "drain"),
        (["--batch-size", "300"], {}, "batch-size"),
        (["--redis-url", "http://x"], {}, "redis-url"),
        (["--worker-id", "a:b"], {}, "worker-id"),
        (["--log-format", "xml"], {}, "log-format"),
        (["--route", "nolabel"], {}, "route"),
        ([], {"TICKETQ_BURST": "maybe"}, "burst"),
        ([], {"TICKETQ_DRAIN": "lots"}, "drain"),
    ],
)
def test_bad_values_fail_once_with_the_setting_named(
    argv: list[str], env: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse(argv, env)


@pytest.mark.parametrize(
    ("argv", "env", "problem"),
    [
        (
            ["--redis-url", "redis://127.0.0.1:6379/notadb"],
            {},
            "redis-url: the path must be a database number",
        ),
        (
            ["--redis-url", "redis://127.0.0.1:6379/12/extra"],
            {},
            "redis-url: the path must be a database number",
        ),
        (["--redis-url", "redis://h:6379/0?socket_timeout=inf"], {}, "socket_timeout must be a positive"),
        (["--redis-url", "redis://h:99999/0"], {}, "redis-url: cannot be read as a Redis URL"),
        (["--cluster", "--redis-url", "redis://h:6379/12"], {}, "Redis Cluster has database 0 only"),
        ([], {"TICKETQ_REDIS_URL": "redis://:p\udcffw@h:6379/0"}, "redis-url: not UTF-8 text"),
        (["--prefix", "tq\udcff"], {}, "prefix: must be non-empty UTF-8 text"),
        (["--prefix", "tq\x1b[2J"], {}, "prefix: must be non-empty UTF-8 text"),
        (["--worker-id", "w\udcff1"], {}, "worker-id: must be non-empty UTF-8 text"),
        (["--worker-id", "w1\n  ghost  yes"], {}, "worker-id: must be non-empty UTF-8 text"),
    ],
)
def test_a_setting_redis_would_misread_or_a_key_name_could_not_hold_is_refused_before_anything_starts(
    argv: list[str], env: dict[str, str], problem: str
) -> None:
    """Audit: each of these was a traceback before the model loaded (a surrogate from undecodable bytes in
    an argument or variable, a cluster URL naming db 12), or silently another database (redis-py reads
    ``/notadb`` as db 0), or a worker id whose newline drew a fake row in ``stats``."""
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse(argv, env)


def test_a_url_redis_py_cannot_read_is_refused_without_quoting_its_password() -> None:
    """redis-py's own message for a password holding '/' quotes the password ("Port could not be cast to
    integer value as 'Hunter2Secret'"), and it was printed."""
    with pytest.raises(ConfigError, match="percent-encoded") as refused:
        parse(["--redis-url", "redis://default:Hunter2Secret/x@127.0.0.1:6379/12"])
    assert "Hunter2Secret" not in str(refused.value)


def test_the_password_is_masked_everywhere() -> None:
    s = parse(["--redis-url", "redis://user:s3cret@db:6379/2"])
    assert mask_url(s.redis_url) == "redis://user:***@db:6379/2"
    assert "s3cret" not in repr(s) and "s3cret" not in json.dumps(s.public())
    assert mask_url("redis://:pw@h") == "redis://:***@h" and mask_url("redis://h:1") == "redis://h:1"


def test_json_logs_are_one_object_per_line_with_secrets_scrubbed() -> None:
    out = io.StringIO()
    logs.configure("json", "info", stream=out)
    try:
        log = logs.get_logger("test")
        log.info("drain", claimed=3, url="rediss://u:pw@host/0")
        log.debug("hidden")
        (line,) = out.getvalue().splitlines()
        event = json.loads(line)
        assert list(event)[:4] == ["timestamp", "level", "event", "logger"]
        assert event["event"] == "drain" and event["claimed"] == 3 and event["url"] == "rediss://u:***@host/0"
        assert event["timestamp"].endswith("Z")
    finally:
        structlog.reset_defaults()


def test_a_config_error_exits_2_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--drain", "0"]) == 2
    assert "drain" in capsys.readouterr().err


def test_run_is_the_default_command_and_the_engine_is_not_imported_for_it() -> None:
    code = (
        "import sys\n"
        "from worker import cli, service, queue, settings, routing\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'transformers'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    helptext = subprocess.run(
        [sys.executable, "-m", "worker", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "run" in helptext
    run_help = subprocess.run(
        [sys.executable, "-m", "worker", "run", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--burst" in run_help and "TICKETQ_REDIS_URL" in run_help


def test_routes_without_a_handler_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from tools import fakeworker

    argv = ["--model", "fake:a,b", "--route", "a=q", "--burst", "--log-format", "json"]
    assert fakeworker.main(argv) == 2
    structlog.reset_defaults()


def test_engine_flags_come_from_one_options_class_with_their_defaults_in_the_help() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    helps = {a.dest: a.help or "" for a in parser._actions}
    defaults = EngineOptions()
    assert helps["batch_size"].endswith(f"(default {defaults.batch_size}) [env TICKETQ_BATCH_SIZE]")
    assert helps["max_batch_tokens"].endswith(
        f"(default {defaults.max_batch_tokens}) [env TICKETQ_MAX_BATCH_TOKENS]"
    )
    s = parse(["--batch-size", "8"], {"TICKETQ_MAX_ROW_LEN": "96", "TICKETQ_DTYPE": "float32"})
    assert s.engine == replace(defaults, batch_size=8, max_row_len=96, dtype="float32")
    with pytest.raises(ConfigError, match="max-batch-tokens"):
        parse(["--max-batch-tokens", "8"])


def test_other_commands_dispatch_to_their_module_and_missing_ones_are_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_COMMANDS", {"bench": "cli_command_stub", "eval": "no_such_module_here"})
    assert cli.main(["bench", "--answer", "7"]) == 7
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    # --help is the run command's: its flags, and the other commands that are installed
    assert "--redis-url" in helptext and "--stall-timeout" in helptext
    assert "Other commands: bench (ticketq-worker COMMAND --help)" in helptext


def test_flag_routes_win_over_the_task_files_label_by_label() -> None:
    from worker.wiring import Loaded, merge_routes

    loaded = Loaded(classifier=None, routes={"spam": "spam-q", "ham": "ham-q"}, route_handler="task.h")  # type: ignore[arg-type]
    assert merge_routes(parse(["--route", "ham=ham-2"]), loaded) == (
        {"spam": "spam-q", "ham": "ham-2"},
        "task.h",
    )
    assert merge_routes(parse(["--route-handler", "cli.h"]), loaded)[1] == "cli.h"


def test_the_head_comes_from_the_flag_or_ticketq_head() -> None:
    assert parse([]).engine.head is None  # the task's own head, if it has one
    assert parse([], {"TICKETQ_HEAD": "none"}).engine.head == "none"
    assert parse(["--head", "my.head"], {"TICKETQ_HEAD": "none"}).engine.head == "my.head"
