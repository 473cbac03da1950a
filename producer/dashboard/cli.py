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

import redis

from producer.client import Client, mask_url
from producer.dashboard.app import create_app
from producer.dashboard.security import SESSION_HOURS, Auth
from producer.dashboard.web import LOOPBACK_NAMES, LOW_CONFIDENCE, Config
from producer.options import add_redis_arguments

log = logging.getLogger("ticketq.dashboard")


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="ticketq-dashboard", description="Watch the queue live, correct labels, replay dead letters."
    )
    add_redis_arguments(p)
    p.add_argument(
        "--host",
        default=env("TICKETQ_DASHBOARD_HOST", "127.0.0.1"),
        help="address to listen on [env TICKETQ_DASHBOARD_HOST] (default 127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=int(env("TICKETQ_DASHBOARD_PORT", "8400")),
        help="[env TICKETQ_DASHBOARD_PORT] (default 8400)",
    )
    p.add_argument(
        "--token",
        default=env("TICKETQ_DASHBOARD_TOKEN") or None,
        help="allow actions to whoever signs in with this token [env TICKETQ_DASHBOARD_TOKEN]",
    )
    p.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        default=env("TICKETQ_DASHBOARD_BASIC_AUTH") or None,
        help="allow actions to this basic-auth user [env TICKETQ_DASHBOARD_BASIC_AUTH]",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        default=[h for h in env("TICKETQ_DASHBOARD_ALLOWED_HOSTS", "").split(",") if h.strip()],
        help="a name this dashboard is reached by (repeat; besides the bound address and "
        f"{', '.join(LOOPBACK_NAMES)}); requests for any other Host are refused "
        "[env TICKETQ_DASHBOARD_ALLOWED_HOSTS, comma-separated]",
    )
    p.add_argument(
        "--public-read-only",
        action="store_true",
        default=env("TICKETQ_DASHBOARD_PUBLIC_READ_ONLY", "") == "1",
        help="allow a non-loopback --host without credentials: anyone who reaches it reads ticket texts "
        "[env TICKETQ_DASHBOARD_PUBLIC_READ_ONLY=1]",
    )
    p.add_argument(
        "--secure-cookies",
        action="store_true",
        default=env("TICKETQ_DASHBOARD_SECURE_COOKIES", "") == "1",
        help="served behind HTTPS: the session cookie gets Secure (also automatic when a --trusted-proxy "
        "says https) [env TICKETQ_DASHBOARD_SECURE_COOKIES=1]",
    )
    p.add_argument(
        "--trusted-proxy",
        metavar="ADDRESS",
        default=env("TICKETQ_DASHBOARD_TRUSTED_PROXY") or None,
        help="the reverse proxy whose X-Forwarded-For/-Proto are believed (client address for sign-in "
        "throttling, https for Secure cookies) [env TICKETQ_DASHBOARD_TRUSTED_PROXY]",
    )
    p.add_argument(
        "--session-hours",
        type=float,
        default=float(env("TICKETQ_DASHBOARD_SESSION_HOURS", str(SESSION_HOURS))),
        help=f"how long a sign-in lasts [env TICKETQ_DASHBOARD_SESSION_HOURS] (default {SESSION_HOURS:g})",
    )
    p.add_argument(
        "--poll",
        type=float,
        default=float(env("TICKETQ_DASHBOARD_POLL_S", "2")),
        help="seconds between live updates and chart samples [env TICKETQ_DASHBOARD_POLL_S] (default 2)",
    )
    p.add_argument(
        "--low-confidence",
        type=float,
        default=LOW_CONFIDENCE,
        help=f"what the results page calls low confidence (default {LOW_CONFIDENCE})",
    )
    return p


def config_from_args(args: argparse.Namespace) -> Config:
    basic = None
    if args.basic_auth:
        user, sep, password = args.basic_auth.partition(":")
        if not sep or not user or not password:
            raise SystemExit("ticketq-dashboard: --basic-auth wants USER:PASSWORD, both non-empty")
        basic = (user, password)
    if args.token is not None and len(args.token) < 12:
        raise SystemExit("ticketq-dashboard: --token must be at least 12 characters")
    if args.poll <= 0 or not 0 < args.low_confidence <= 1:
        raise SystemExit("ticketq-dashboard: --poll must be > 0 and --low-confidence in (0, 1]")
    if not 0 < args.session_hours <= 24 * 30:
        raise SystemExit("ticketq-dashboard: --session-hours must be in (0, 720]")
    auth = Auth(token=args.token, basic=basic, session_s=args.session_hours * 3600)
    if not auth.enabled and not _loopback(args.host) and not args.public_read_only:
        raise SystemExit(
            f"ticketq-dashboard: --host {args.host} without --token or --basic-auth would show ticket texts "
            "to anyone who reaches it; set credentials, or pass --public-read-only to mean it"
        )
    hosts = [*LOOPBACK_NAMES, *(h.strip() for h in args.allowed_host)]
    if not _wildcard(args.host) and args.host not in hosts:
        hosts.append(args.host)
    return Config(
        redis_url=args.redis_url,
        prefix=args.prefix,
        auth=auth,
        sample_s=args.poll,
        low_confidence=args.low_confidence,
        allowed_hosts=tuple(hosts),
        secure_cookies=args.secure_cookies,
        trusted_proxy=args.trusted_proxy,
    )


def _wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::", "")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    config = config_from_args(args)
    client = Client.from_url(config.redis_url, config.prefix, cluster=args.cluster, socket_connect_timeout=5)
    try:
        client.redis.ping()
    except redis.RedisError as exc:
        print(
            f"ticketq-dashboard: cannot reach Redis at {mask_url(config.redis_url)}: {exc}", file=sys.stderr
        )
        return 3
    import uvicorn

    if not config.auth.enabled and not _loopback(args.host):
        log.warning(
            "serving %s read-only WITHOUT sign-in: anyone who reaches it reads ticket texts", args.host
        )
    if _wildcard(args.host) and config.allowed_hosts == LOOPBACK_NAMES:
        log.warning("bound to %s but no --allowed-host: only %s will be answered", args.host, LOOPBACK_NAMES)
    mode = "sign-in needed to read and act" if config.auth.enabled else "read-only"
    print(
        f"ticketq-dashboard: http://{args.host}:{args.port}/ ({mode}; Redis {mask_url(config.redis_url)}, "
        f"prefix {config.prefix})",
        file=sys.stderr,
    )
    logging.getLogger("uvicorn.access").disabled = True  # paths carry ticket ids: not worth a line each
    # Proxy headers are handled by the app, from --trusted-proxy only (uvicorn's default trusts 127.0.0.1).
    app = create_app(config, client)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", proxy_headers=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
