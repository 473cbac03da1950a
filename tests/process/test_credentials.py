"""Credentials against real worker processes: a password in the URL, TLS, and the ACLs that
docs/threat-model.md gives, applied as written. No secret may reach a log.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import KEYS, MB, all_accounted, cli, events
from support import need_binary, tickets, wait_for

from producer.client import Client
from producer.protocol import DeadLetter, Keys
from tools.chaos.fleet import Fleet
from tools.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.process]

ROOT = Path(__file__).resolve().parents[2]


def test_a_password_in_the_url_works_and_never_reaches_the_logs(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    secret = "pw-" + os.urandom(8).hex()
    server = servers(password=secret)
    server.start()
    r = server.client()
    r.lpush(KEYS.tickets, *tickets(20))
    worker = fleets(server.url).spawn("--burst")
    assert worker.proc.wait(30) == 0
    assert r.hlen(KEYS.results) == 20
    wrong = "pw-" + os.urandom(8).hex()
    refused = fleets(server.url.replace(secret, wrong)).spawn()
    assert refused.proc.wait(10) == 3  # a wrong password is fatal at once, not an outage retried forever
    assert "AuthenticationError" in events(refused, "fatal")[0]["error"]
    for w in (worker, refused):
        text = w.log.read_text()
        assert secret not in text and wrong not in text
        assert ":***@" in text  # the URL is logged, masked


def test_a_tls_url_with_a_password_works_and_the_password_is_not_logged(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet], tmp_path: Path
) -> None:
    need_binary("openssl")
    tls = tmp_path / "tls"
    tls.mkdir()
    argv = [
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
    ]
    argv += [
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        str(tls / "key.pem"),
        "-out",
        str(tls / "cert.pem"),
    ]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)  # a self-signed certificate
    secret = "pw-" + os.urandom(8).hex()
    server = servers(password=secret, tls=tls)
    server.start()
    assert server.url.startswith("rediss://")
    r = server.client()
    r.lpush(KEYS.tickets, *tickets(20))
    worker = fleets(server.url).spawn("--burst")
    assert worker.proc.wait(30) == 0
    all_accounted(r, 20, 0)
    text = worker.log.read_text()
    assert secret not in text and "rediss://:***@" in text


def test_the_acls_in_the_threat_model_work_as_written(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    doc = (ROOT / "docs" / "threat-model.md").read_text()
    rules = {
        line.split()[2]: line.split() for line in doc.splitlines() if line.startswith("ACL SETUSER ticketq-")
    }
    assert set(rules) == {"ticketq-producer", "ticketq-waiter", "ticketq-worker"}
    server = servers(password="admin-" + os.urandom(8).hex())
    server.start()
    admin = server.client()
    for rule in rules.values():
        admin.execute_command(*rule)
    admin.config_set("proto-max-bulk-len", "1mb")  # as the document advises

    def url(user: str) -> str:
        password = next(t[1:] for t in rules[user] if t.startswith(">"))
        return f"redis://{user}:{password}@127.0.0.1:{server.port}/0"

    keys = Keys("ticketq")
    admin.sadd(keys.workers, "ghost")  # a dead peer's claim: recovery runs as the worker user too
    admin.lpush(keys.inflight("ghost"), b'{"id": "g1", "text": "billing: left behind"}')
    # --review-below 1: every result is marked for review, so the ack's review-queue commands run too
    # (ZREMRANGEBYRANK was missing from the line: every worker exited at its first uncertain ticket)
    flags = ("--heartbeat-s", "1", "--review-below", "1")
    worker = fleets(url("ticketq-worker"), *flags, prefix="ticketq", name_clients=False).spawn()
    waiter = Client.from_url(url("ticketq-waiter"), prefix="ticketq")
    waited = waiter.push_and_wait([{"id": f"a{n}", "text": "account: locked out"} for n in range(10)], 20)
    assert len(waited.results) == 10 and waited.complete
    producer = url("ticketq-producer")
    assert cli(producer, "LPUSH", keys.tickets, "not json").strip() == b"1"
    assert cli(producer, "-x", "LPUSH", keys.tickets, stdin=b"x" * 900_000).strip() == b"1"
    too_big = cli(producer, "-x", "LPUSH", keys.tickets, stdin=b"x" * 2 * MB, dropped_ok=True)
    assert b"invalid bulk length" in too_big or b"Connection reset" in too_big, too_big
    for refused in (
        ["HSET", keys.results, "a0", "forged"],
        ["LPUSH", keys.dead, "forged"],
        ["LRANGE", keys.tickets, "0", "-1"],
        ["DEL", keys.tickets],
        ["EVAL", "return 1", "0"],
        ["PUBLISH", keys.events, '{"ids": [], "dead": {"a0": "forged"}}'],
        ["LPUSH", "rq:queue:default", "forged"],
    ):
        assert cli(producer, *refused).startswith(b"NOPERM"), refused
    wait_for(lambda: admin.hexists(keys.results, "g1") and admin.llen(keys.dead) == 2, 15, "recovery")
    reasons = sorted(DeadLetter.from_json(d).reason.split(":")[0] for d in admin.lrange(keys.dead, 0, -1))
    assert reasons == ["not JSON", "payload too large"]
    assert worker.alive
    # the health probe as the worker user (docker-compose's healthcheck) reads its heartbeat
    probe = [sys.executable, "-m", "worker", "check", "--redis-url", url("ticketq-worker")]
    probe += ["--prefix", "ticketq"]
    done = subprocess.run([*probe, "--worker-id", worker.id], cwd=ROOT, capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(b"healthy"), done.stdout
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.proc.wait(10) == 0
    assert admin.hlen(keys.results) == 11 and admin.llen(keys.tickets) == 0
    assert admin.zcard(keys.review) == 11  # written as the worker user
    # the head watch, keeping the last good head and falling back to it, as the worker user
    from worker.connection import connect
    from worker.headwatch import HeadWatch

    class Heads:  # the head contract; a head is bytes, b"bad" refused
        def __init__(self) -> None:
            self.head: Any = None

        def load_head(self, data: bytes, version: str) -> None:
            if data == b"bad":
                raise ValueError("not a head")
            self.head = (data, version)

    Client(admin, "ticketq").publish_head(b"h1")
    assert HeadWatch(connect(url("ticketq-worker")), keys, Heads()).check() is True
    assert admin.hgetall(keys.head_good) == admin.hgetall(keys.head)  # kept by COPY, which the line grants
    Client(admin, "ticketq").publish_head(b"bad")
    started = Heads()
    assert HeadWatch(connect(url("ticketq-worker")), keys, started).check() is True
    assert started.head == (b"h1", "1")


# -- issue 19: checked before the model loads; secrets masked wherever they hide ---------------------------


def _serve_without_loading(url: str, *flags: str) -> tuple[int, list[dict[str, Any]]]:
    """``wiring.serve`` in process with a loader that must not be reached; (exit status, JSON events)."""
    import contextlib
    import io

    from worker import settings as settings_mod
    from worker.wiring import Loaded, serve

    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    args = parser.parse_args(["--redis-url", url, "--prefix", KEYS.prefix, "--log-format", "json", *flags])
    settings = settings_mod.from_args(args, environ={})

    def load(_: object) -> Loaded:
        raise LookupError("the model was loaded")

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = serve(settings, load=load)
    return code, [json.loads(line) for line in err.getvalue().splitlines() if line.startswith("{")]


def test_credentials_permissions_and_key_types_fail_before_the_model_loads(
    servers: Callable[..., RedisServer],
) -> None:
    secret = "pw-" + os.urandom(8).hex()
    server = servers(password=secret)
    server.start()
    admin = server.client()
    code, logged = _serve_without_loading(server.url.replace(secret, "wrong"))
    assert code == 3 and logged[-1]["event"] == "fatal" and logged[-1]["when"] == "before loading"
    admin.execute_command("ACL", "SETUSER", "nollen", "on", ">pw", "~*", "+@all", "-llen")
    code, logged = _serve_without_loading(f"redis://nollen:pw@127.0.0.1:{server.port}/0")
    assert code == 3 and "NoPermissionError" in str(logged[-1]["error"])
    admin.set(KEYS.results, "not a hash")
    code, logged = _serve_without_loading(server.url)
    assert code == 4 and logged[-1]["cause"] == "wrongtype"
    admin.delete(KEYS.results)
    admin.set(KEYS.review, "not a sorted set")  # the ack writes it: refused at start, not mid-drain
    code, logged = _serve_without_loading(server.url)
    assert code == 4 and logged[-1]["cause"] == "wrongtype"
    admin.delete(KEYS.review)
    code, logged = _serve_without_loading(server.url)  # all good: it goes on to load the model
    assert code == 1 and logged[-1]["event"] == "engine_load_failed"
    assert not any(secret in json.dumps(e) for e in logged)


def test_an_evicting_redis_is_a_warning_or_under_strict_a_refusal(
    servers: Callable[..., RedisServer],
) -> None:
    server = servers()
    server.start()
    admin = server.client()
    admin.config_set("maxmemory-policy", "allkeys-lru")
    code, logged = _serve_without_loading(server.url)
    (warned,) = [e for e in logged if e["event"] == "memory_policy"]
    assert code == 1 and warned["level"] == "warning" and warned["policy"] == "allkeys-lru"
    assert "noeviction" in str(warned["fix"])
    code, logged = _serve_without_loading(server.url, "--strict")
    assert code == 2 and logged[-1]["event"] == "memory_policy" and logged[-1]["level"] == "error"
    admin.config_set("maxmemory-policy", "noeviction")
    # audit finding 5: a proto-max-bulk-len over 1 MiB lets one payload stall every script that reads it
    code, logged = _serve_without_loading(server.url)
    (warned,) = [e for e in logged if e["event"] == "max_bulk_len"]  # the default 512 MB: a warning
    assert warned["level"] == "warning" and "proto-max-bulk-len 1mb" in str(warned["fix"])
    code, logged = _serve_without_loading(server.url, "--strict")
    assert code == 2 and logged[-1]["event"] == "max_bulk_len" and logged[-1]["level"] == "error"
    admin.config_set("proto-max-bulk-len", "1mb")
    code, logged = _serve_without_loading(server.url, "--strict")
    assert code == 1 and not any(e["event"].startswith(("memory_policy", "max_bulk")) for e in logged)
    admin.execute_command("ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config")
    code, logged = _serve_without_loading(f"redis://noconfig:pw@127.0.0.1:{server.port}/0", "--strict")
    assert code == 1 and [e for e in logged if e["event"] == "memory_policy_unchecked"]


def test_a_password_given_as_a_url_query_is_masked_in_every_log_line(
    servers: Callable[..., RedisServer], fleets: Callable[..., Fleet]
) -> None:
    secret = "pw-" + os.urandom(8).hex()
    server = servers(password=secret)
    server.start()
    r = server.client()
    r.lpush(KEYS.tickets, *tickets(5))
    url = f"redis://127.0.0.1:{server.port}/0?password={secret}"
    worker = fleets(url, name_clients=False).spawn("--burst")
    assert worker.proc.wait(30) == 0 and r.hlen(KEYS.results) == 5
    text = worker.log.read_text()
    assert secret not in text and "password=***" in text
    code, logged = _serve_without_loading(url.replace(secret, "wrong-" + secret))
    assert code == 3 and secret not in json.dumps(logged)
