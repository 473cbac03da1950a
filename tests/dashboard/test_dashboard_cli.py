"""``ticketq-dashboard``'s command line, and what the package must not import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from producer.dashboard.cli import config_from_args, main, parser


def test_defaults_bind_this_machine_only_and_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TICKETQ_DASHBOARD_HOST", "TICKETQ_DASHBOARD_TOKEN", "TICKETQ_DASHBOARD_BASIC_AUTH"):
        monkeypatch.delenv(name, raising=False)
    args = parser().parse_args([])
    assert args.host == "127.0.0.1"
    assert not config_from_args(args).auth.enabled


def test_credentials_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETQ_DASHBOARD_TOKEN", "a-long-enough-token")
    monkeypatch.setenv("TICKETQ_DASHBOARD_BASIC_AUTH", "ops:pass:with:colons")
    monkeypatch.setenv("TICKETQ_PREFIX", "{acme}")
    monkeypatch.setenv("TICKETQ_REDIS_URL", "redis://app:hunter2@db:6379/1")
    config = config_from_args(parser().parse_args([]))
    assert config.prefix == "{acme}"
    assert config.auth.token == "a-long-enough-token" and config.auth.basic == ("ops", "pass:with:colons")
    assert "a-long-enough-token" not in repr(config) and "pass:with" not in repr(config)
    assert "hunter2" not in repr(config) and "app:***@db" in repr(config)


@pytest.mark.parametrize("argv", [["--basic-auth", "nopassword"], ["--token", "short"], ["--poll", "0"]])
def test_bad_flags_fail_at_start(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        config_from_args(parser().parse_args(argv))


def test_no_redis_exits_3_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--redis-url", "redis://u:hunter2@127.0.0.1:1/0"]) == 3
    err = capsys.readouterr().err
    assert "cannot reach Redis" in err and "hunter2" not in err and "u:***@" in err


def test_the_dashboard_imports_neither_torch_nor_the_worker() -> None:
    code = (
        "import sys, producer.dashboard.app, producer.dashboard.cli; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'worker', 'transformers')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_demo_says_how_to_open_the_dashboard() -> None:
    from tools.demo import dashboard_hint

    assert "ticketq-dashboard --prefix ticketq-demo" in dashboard_hint("local")
    assert "http://127.0.0.1:8400/" in dashboard_hint("local")
    assert "gone" in dashboard_hint("a throwaway redis-server on port 1234")


def test_a_public_address_without_credentials_needs_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "TICKETQ_DASHBOARD_TOKEN",
        "TICKETQ_DASHBOARD_BASIC_AUTH",
        "TICKETQ_DASHBOARD_PUBLIC_READ_ONLY",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match="--public-read-only"):
        config_from_args(parser().parse_args(["--host", "0.0.0.0"]))
    config = config_from_args(parser().parse_args(["--host", "0.0.0.0", "--public-read-only"]))
    assert not config.auth.enabled and config.allowed_hosts == ("127.0.0.1", "localhost")
    signed = config_from_args(parser().parse_args(["--host", "10.1.2.3", "--token", "a-long-enough-token"]))
    assert signed.allowed_hosts == ("127.0.0.1", "localhost", "10.1.2.3")


def test_allowed_hosts_and_session_lifetime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKETQ_DASHBOARD_ALLOWED_HOSTS", "tickets.example, ops.example")
    assert config_from_args(parser().parse_args([])).allowed_hosts[2:] == ("tickets.example", "ops.example")
    args = parser().parse_args(["--allowed-host", "third.example", "--session-hours", "2"])
    config = config_from_args(args)  # flags win over the variable, as for every setting
    assert config.allowed_hosts[2:] == ("third.example",)
    assert config.auth.session_s == 7200
    with pytest.raises(SystemExit):
        config_from_args(parser().parse_args(["--session-hours", "0"]))
