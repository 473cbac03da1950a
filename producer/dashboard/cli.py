"""``ticketq-dashboard``: serve the dashboard (flags over ``TICKETQ_*`` variables over defaults).

Binds 127.0.0.1 unless told otherwise, and is read-only unless given a token (``--token`` or
``TICKETQ_DASHBOARD_TOKEN``) or basic-auth credentials (``--basic-auth USER:PASSWORD`` or
``TICKETQ_DASHBOARD_BASIC_AUTH``). Prefer the variables: flags show up in ``ps``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import redis

from producer.client import Client, mask_url
from producer.dashboard.app import create_app
from producer.dashboard.security import Auth
from producer.dashboard.web import LOW_CONFIDENCE, Config
from producer.options import add_redis_arguments


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
    return Config(
        redis_url=args.redis_url,
        prefix=args.prefix,
        auth=Auth(token=args.token, basic=basic),
        sample_s=args.poll,
        low_confidence=args.low_confidence,
    )


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

    mode = "actions need the token or basic auth" if config.auth.enabled else "read-only"
    print(
        f"ticketq-dashboard: http://{args.host}:{args.port}/ ({mode}; Redis {mask_url(config.redis_url)}, "
        f"prefix {config.prefix})",
        file=sys.stderr,
    )
    logging.getLogger("uvicorn.access").disabled = True  # paths carry ticket ids: not worth a line each
    uvicorn.run(create_app(config, client), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
