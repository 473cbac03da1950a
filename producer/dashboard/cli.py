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
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from producer import config
from producer.client import Client, mask_url
from producer.config import Check, between, setting
from producer.dashboard.app import create_app
from producer.dashboard.security import SESSION_HOURS, Auth
from producer.dashboard.web import LOOPBACK_NAMES, LOW_CONFIDENCE, SAMPLE_S, Config
from producer.options import RedisOptions

log = logging.getLogger("ticketq.dashboard")


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
        help="seconds between live updates and chart samples",
        env="TICKETQ_DASHBOARD_POLL_S",
        check=Check(lambda s: s > 0, "must be > 0"),
    )
    low_confidence: float = setting(
        LOW_CONFIDENCE,
        help="what the results page calls low confidence",
        env=False,
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
        found = config.problems(self)
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
        prog="ticketq-dashboard", description="Watch the queue live, correct labels, replay dead letters."
    )
    config.add_arguments(p, DashboardOptions)
    return p


def options_from_args(args: argparse.Namespace) -> DashboardOptions:
    """Flags over variables over defaults; a bad value ends the command with one line naming it."""
    try:
        return config.resolve(DashboardOptions, args, os.environ)
    except ValueError as exc:
        raise SystemExit(f"ticketq-dashboard: {exc}") from None


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


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = options_from_args(args)
    config = app_config(options)
    client = Client.from_url(
        config.redis_url, config.prefix, cluster=options.cluster, socket_connect_timeout=5
    )
    try:
        client.redis.ping()
    except redis.RedisError as exc:
        print(
            f"ticketq-dashboard: cannot reach Redis at {mask_url(config.redis_url)}: {exc}", file=sys.stderr
        )
        return 3
    import uvicorn

    if not config.auth.enabled and not _loopback(options.host):
        log.warning("serving %s WITHOUT sign-in: anyone who reaches it reads ticket texts", options.host)
    if _wildcard(options.host) and config.allowed_hosts == LOOPBACK_NAMES:
        log.warning("bound to %s but no --allowed-host: only %s are answered", options.host, LOOPBACK_NAMES)
    mode = "sign-in needed to read and act" if config.auth.enabled else "read-only"
    print(
        f"ticketq-dashboard: http://{options.host}:{options.port}/ ({mode}; "
        f"Redis {mask_url(config.redis_url)}, prefix {config.prefix})",
        file=sys.stderr,
    )
    logging.getLogger("uvicorn.access").disabled = True  # paths carry ticket ids: not worth a line each
    # Proxy headers are the app's, from --trusted-proxy only (uvicorn's own default trusts 127.0.0.1).
    app = create_app(config, client)
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning", proxy_headers=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
