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
from dataclasses import dataclass

import redis

from producer import config
from producer.client import Client, mask_url
from producer.config import Check, between, option, setting
from producer.dashboard.app import LOW_CONFIDENCE, SAMPLE_S, Config, create_app
from producer.dashboard.security import Auth
from producer.exitcodes import Exit, epilog
from producer.options import RedisOptions


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
        help="allow actions to whoever signs in with this token",
        env="TICKETQ_DASHBOARD_TOKEN",
        check=Check(lambda t: len(t) >= 12, "must be at least 12 characters"),
    )
    basic_auth: str | None = setting(
        None,
        help="allow actions to this basic-auth user",
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
    low_confidence: float = option(
        LOW_CONFIDENCE,
        help="what the results page calls low confidence",
        check=Check(lambda c: 0 < c <= 1, "must be in (0, 1]"),
    )

    def __post_init__(self) -> None:
        found = config.problems(self)
        if found:
            raise ValueError("; ".join(found))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ticketq-dashboard",
        description="Watch the queue live, correct labels, replay dead letters.",
        epilog=epilog(),
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
    return Config(
        redis_url=options.redis_url,
        prefix=options.prefix,
        auth=Auth(token=options.token, basic=basic),
        sample_s=options.poll,
        low_confidence=options.low_confidence,
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
        return Exit.REDIS_ACCESS
    import uvicorn

    mode = "actions need the token or basic auth" if config.auth.enabled else "read-only"
    print(
        f"ticketq-dashboard: http://{options.host}:{options.port}/ ({mode}; "
        f"Redis {mask_url(config.redis_url)}, prefix {config.prefix})",
        file=sys.stderr,
    )
    logging.getLogger("uvicorn.access").disabled = True  # paths carry ticket ids: not worth a line each
    uvicorn.run(create_app(config, client), host=options.host, port=options.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
