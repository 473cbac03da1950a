"""``ticketq-dashboard``: serve the dashboard (flags over ``TICKETQ_*`` variables over defaults).

Binds 127.0.0.1 unless told otherwise, and is read-only unless given a token (``--token`` or
``TICKETQ_DASHBOARD_TOKEN``) or basic-auth credentials (``--basic-auth USER:PASSWORD`` or
``TICKETQ_DASHBOARD_BASIC_AUTH``); with either, reading needs sign-in too. Prefer the variables: flags show
up in ``ps``. Without credentials it refuses a non-loopback ``--host`` unless ``--public-read-only``.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from producer import config
from producer.client import Client, mask_url
from producer.config import Check, between, option, setting
from producer.dashboard.app import create_app
from producer.dashboard.security import SESSION_HOURS, Auth
from producer.dashboard.web import LOOPBACK_NAMES, LOW_CONFIDENCE, SAMPLE_S, Config
from producer.exitcodes import Exit, epilog
from producer.options import RedisOptions

log = logging.getLogger("ticketq.dashboard")

POLL_MIN_S = 0.5  # below it the pages would poll Redis for little more than noise
POLL_MAX_S = 3600.0


def _user_password(value: str) -> bool:
    user, sep, password = value.partition(":")
    return bool(sep and user and password)


@dataclass(frozen=True)
class DashboardOptions(RedisOptions):
    host: str = setting(
        "127.0.0.1", help="address to listen on (127.0.0.1: this machine only)", env="TICKETQ_DASHBOARD_HOST"
    )
    port: int = setting(8400, help="port to listen on", env="TICKETQ_DASHBOARD_PORT", check=between(1, 65535))
    token: str | None = setting(
        None,
        help="sign-in for reading and acting: whoever types this token",
        env="TICKETQ_DASHBOARD_TOKEN",
        check=Check(lambda t: len(t) >= 12, "must be at least 12 characters"),
    )
    basic_auth: str | None = setting(
        None,
        help="sign-in for reading and acting: this basic-auth user",
        env="TICKETQ_DASHBOARD_BASIC_AUTH",
        metavar="USER:PASSWORD",
        check=Check(_user_password, "wants USER:PASSWORD, both non-empty"),
    )
    poll: float = setting(
        SAMPLE_S,
        help=f"seconds between live updates and chart samples, {POLL_MIN_S:g} to {POLL_MAX_S:g}",
        env="TICKETQ_DASHBOARD_POLL_S",
        check=Check(
            lambda s: math.isfinite(s) and POLL_MIN_S <= s <= POLL_MAX_S,
            f"must be a number of seconds from {POLL_MIN_S:g} to {POLL_MAX_S:g}",
        ),
    )
    low_confidence: float = option(
        LOW_CONFIDENCE,
        help="what the results page calls low confidence",
        check=Check(lambda c: 0 < c <= 1, "must be in (0, 1]"),
    )
    allowed_host: tuple[str, ...] = setting(
        (),
        help="a name this dashboard is reached by, besides the bound address and "
        f"{', '.join(LOOPBACK_NAMES)}; any other Host is refused; repeatable (the variable: comma-separated)",
        env="TICKETQ_DASHBOARD_ALLOWED_HOSTS",
        metavar="NAME",
        repeat=tuple,
    )
    public_read_only: bool = setting(
        False,
        help="allow a non-loopback --host without credentials: whoever reaches it reads ticket texts",
        env="TICKETQ_DASHBOARD_PUBLIC_READ_ONLY",
    )
    secure_cookies: bool = setting(
        False,
        help="served behind HTTPS: the session cookie gets Secure (also when --trusted-proxy says https)",
        env="TICKETQ_DASHBOARD_SECURE_COOKIES",
    )
    trusted_proxy: str | None = setting(
        None,
        help="the reverse proxy whose X-Forwarded-For/-Proto are believed (throttling, Secure cookies)",
        env="TICKETQ_DASHBOARD_TRUSTED_PROXY",
        metavar="ADDRESS",
    )
    session_hours: float = setting(
        SESSION_HOURS,
        help="how long a sign-in lasts",
        env="TICKETQ_DASHBOARD_SESSION_HOURS",
        check=Check(lambda h: 0 < h <= 720, "must be in (0, 720]"),
    )

    def __post_init__(self) -> None:
        found = config.problems(self) + self.url_problems()
        if not (self.token or self.basic_auth) and not _loopback(self.host) and not self.public_read_only:
            found.append(
                f"host {self.host} without --token or --basic-auth would show ticket texts to anyone who "
                "reaches it; set credentials, or pass --public-read-only to mean it"
            )
        if found:
            raise ValueError("; ".join(found))


def _wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ticketq-dashboard",
        description="Watch the queue live, correct labels, replay dead letters.",
        epilog=epilog(),
    )
    config.add_arguments(p, DashboardOptions)
    return p


class BadSetting(SystemExit):
    """A bad setting: ends the command with :attr:`Exit.CONFIG`; ``str()`` is the one line that says why
    (``main`` prints it on stderr)."""

    def __init__(self, line: str) -> None:
        super().__init__(Exit.CONFIG)
        self.line = line

    def __str__(self) -> str:
        return self.line


def options_from_args(args: argparse.Namespace) -> DashboardOptions:
    """Flags over variables over defaults; a bad value raises :class:`BadSetting`, one line naming it."""
    try:
        return config.resolve(DashboardOptions, args, os.environ)
    except ValueError as exc:
        raise BadSetting(f"ticketq-dashboard: {exc}") from None


def config_from_args(args: argparse.Namespace) -> Config:
    return app_config(options_from_args(args))


def app_config(options: DashboardOptions) -> Config:
    basic = None
    if options.basic_auth:
        user, _, password = options.basic_auth.partition(":")
        basic = (user, password)
    hosts = [*LOOPBACK_NAMES, *options.allowed_host]
    if not _wildcard(options.host) and options.host not in hosts:
        hosts.append(options.host)
    return Config(
        redis_url=options.redis_url,
        prefix=options.prefix,
        auth=Auth(token=options.token, basic=basic, session_s=options.session_hours * 3600),
        sample_s=options.poll,
        low_confidence=options.low_confidence,
        allowed_hosts=tuple(hosts),
        secure_cookies=options.secure_cookies,
        trusted_proxy=options.trusted_proxy,
    )


def check_listen(host: str, port: int) -> str | None:
    """Whether ``host:port`` can be listened on, before uvicorn tries (whose failure would exit 3,
    "Redis unreachable"): None, or the OS's reason. Binds each address the name resolves to, as
    asyncio will (``SO_REUSEADDR``, IPv6 only on IPv6 sockets), and lets go at once."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:  # socket.gaierror: a name that does not resolve
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                if os.name == "posix":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            return reason if address[0] == host else f"{address[0]}: {reason}"
    return None


def _refuse(line: str) -> int:
    print(f"ticketq-dashboard: {line}", file=sys.stderr)
    return Exit.CONFIG


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        options = options_from_args(args)
    except BadSetting as exc:
        print(exc.line, file=sys.stderr)
        return Exit.CONFIG
    config = app_config(options)  # the URL was checked with the settings (producer.options.url_problem)
    where = mask_url(config.redis_url)
    if trouble := check_listen(options.host, options.port):
        return _refuse(f"cannot listen on {options.host}:{options.port}: {trouble}")
    try:
        client = Client.from_url(
            config.redis_url, config.prefix, cluster=options.cluster, socket_connect_timeout=5
        )
        client.redis.ping()
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        print(f"ticketq-dashboard: cannot reach Redis at {where}: {exc}", file=sys.stderr)
        return Exit.REDIS_ACCESS
    import uvicorn

    if not config.auth.enabled and not _loopback(options.host):
        log.warning("serving %s WITHOUT sign-in: anyone who reaches it reads ticket texts", options.host)
    if _wildcard(options.host) and config.allowed_hosts == LOOPBACK_NAMES:
        log.warning("bound to %s but no --allowed-host: only %s are answered", options.host, LOOPBACK_NAMES)
    mode = "sign-in needed to read and act" if config.auth.enabled else "read-only"
    print(
        f"ticketq-dashboard: http://{options.host}:{options.port}/ ({mode}; "
        f"Redis {where}, prefix {config.prefix})",
        file=sys.stderr,
    )
    logging.getLogger("uvicorn.access").disabled = True  # paths carry ticket ids: not worth a line each
    # Proxy headers are the app's, from --trusted-proxy only (uvicorn's own default trusts 127.0.0.1).
    app = create_app(config, client)
    try:
        uvicorn.run(app, host=options.host, port=options.port, log_level="warning", proxy_headers=False)
    except SystemExit as exc:  # uvicorn's own startup failure (3): the listen failed after all, a race
        if exc.code in (None, 0):
            return Exit.OK
        return _refuse(f"cannot serve on {options.host}:{options.port} (uvicorn's reason above)")
    return Exit.OK


if __name__ == "__main__":
    sys.exit(main())
