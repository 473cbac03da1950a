"""``ticketq-dashboard`` refuses a bad setting with one line and exit 2 (the exit table's "bad setting"),
never a traceback, exit 1, or uvicorn's exit 3 (which the table keeps for "Redis unreachable")."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from producer.dashboard import cli
from producer.dashboard.cli import config_from_args, main, parser
from producer.exitcodes import Exit

SECRET = "Hunter2Secret"


@pytest.fixture(autouse=True)
def _no_dashboard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "TICKETQ_DASHBOARD_HOST",
        "TICKETQ_DASHBOARD_PORT",
        "TICKETQ_DASHBOARD_TOKEN",
        "TICKETQ_DASHBOARD_BASIC_AUTH",
        "TICKETQ_DASHBOARD_POLL_S",
        "TICKETQ_DASHBOARD_PUBLIC_READ_ONLY",
        "TICKETQ_CLUSTER",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A local port something is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ticketq-dashboard: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--port", "0"], {}, "port"),
        (["--port", "65536"], {}, "port"),
        (["--poll", "nan"], {}, "poll"),
        (["--poll", "inf"], {}, "poll"),
        (["--poll", "0.000001"], {}, "poll"),
        (["--poll", "3601"], {}, "poll"),
        (["--token", "short"], {}, "token"),
        (["--basic-auth", "nopassword"], {}, "basic-auth"),
        (["--session-hours", "0"], {}, "session-hours"),
        (["--host", "0.0.0.0"], {}, "--public-read-only"),
        ([], {"TICKETQ_DASHBOARD_PORT": "abc"}, "port"),
        ([], {"TICKETQ_DASHBOARD_POLL_S": "inf"}, "poll"),
        ([], {"TICKETQ_DASHBOARD_POLL_S": "fast"}, "poll"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line(
    argv: list[str],
    env: dict[str, str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["--redis-url", "redis://127.0.0.1:1/0", *argv]) == Exit.CONFIG
    assert named in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("url", "cluster"),
    [
        ("redis://127.0.0.1:99999/12", False),
        ("redis://127.0.0.1:6379/12?socket_timeout=abc", False),
        (f"redis://:{SECRET}@127.0.0.1:6379/12?socket_timeout=abc", False),
        ("redis://127.0.0.1:6379/12", True),
        (f"redis://default:{SECRET}@127.0.0.1:6379/12", True),
        (f"redis://default:{SECRET}/x@127.0.0.1:6379/12", False),  # redis-py quotes it as the "port"
        (f"redis://default:{SECRET}?x@127.0.0.1:6379/12", False),
        (f"redis://default:{SECRET}@127.0.0.1:99999/12", False),
    ],
)
def test_a_malformed_redis_url_exits_2_with_the_password_masked(
    url: str, cluster: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if cluster:
        monkeypatch.setenv("TICKETQ_CLUSTER", "1")
    assert main(["--redis-url", url]) == Exit.CONFIG
    line = _one_line(capsys.readouterr().err)
    assert "redis-url" in line and SECRET not in line


@pytest.mark.parametrize("poll", ["0.5", "2", "3600"])
def test_poll_within_its_bounds_is_taken(poll: str) -> None:
    assert config_from_args(parser().parse_args(["--poll", poll])).sample_s == float(poll)


def test_the_poll_bounds_are_in_its_help() -> None:
    text = " ".join(parser().format_help().split())
    assert "chart samples, 0.5 to 3600" in text


def test_a_port_in_use_exits_2_naming_it(
    taken_port: int, redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--port", str(taken_port), "--redis-url", redis_url, "--prefix", prefix])
    line = _one_line(capsys.readouterr().err)
    assert code == Exit.CONFIG
    assert f"127.0.0.1:{taken_port}" in line and "in use" in line.lower()


def test_an_unresolvable_host_exits_2_naming_it(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--host", "no-such-host.invalid", "--token", "a-long-enough-token", "--port", "8499"]
    code = main([*argv, "--redis-url", redis_url, "--prefix", prefix])
    line = _one_line(capsys.readouterr().err)
    assert code == Exit.CONFIG
    assert "no-such-host.invalid:8499" in line


def test_uvicorn_failing_to_listen_after_the_check_still_exits_2(
    taken_port: int,
    redis_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "check_listen", lambda host, port: None)  # the port taken just after the check
    code = main(["--port", str(taken_port), "--redis-url", redis_url, "--prefix", prefix])
    assert code == Exit.CONFIG
    assert f"cannot serve on 127.0.0.1:{taken_port}" in capsys.readouterr().err.strip().splitlines()[-1]


def test_good_settings_reach_uvicorn(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    served: dict[str, object] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: served.update(kwargs))
    assert main(["--port", str(port), "--poll", "0.5", "--redis-url", redis_url, "--prefix", prefix]) == 0
    assert served["host"] == "127.0.0.1" and served["port"] == port
    assert f"http://127.0.0.1:{port}/" in capsys.readouterr().err
