"""Healthcheck: exit 0 when a worker of this host (or ``--worker-id``) is alive and making progress, else 1.

Alive means its heartbeat key exists and expires (:func:`producer.client.read_beats`). The heartbeat
thread renews that key only while the worker loop makes progress (see :mod:`worker.heartbeat`), so a
worker hung in a forward pass fails this check within its heartbeat TTL, not just a dead one. No keyspace
scan: the ids come from ``P:workers`` (a set, one per live or recently dead worker) and their heartbeats
are read in one pipeline.

For docker-compose: ``healthcheck: test: ["CMD", "ticketq-worker", "check"]`` (each container has its
own host name, which the default worker id starts with).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass

from producer import config
from producer.client import mask_url, members, read_beats
from producer.config import between, option, setting
from producer.exitcodes import Exit
from producer.options import RedisOptions
from producer.protocol import Keys, cluster_prefix


@dataclass(frozen=True)
class CheckOptions(RedisOptions):
    worker_id: str | None = setting(
        None, help="the worker to check", shown="any worker whose heartbeat names this host"
    )
    timeout: float = option(5.0, help="Redis socket timeout in seconds", check=between(0.1, 3600))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, CheckOptions)


def run(ns: argparse.Namespace) -> int:
    import redis

    from worker.connection import connect

    try:
        args = config.resolve(CheckOptions, ns, os.environ)
    except ValueError as exc:
        print(f"ticketq-worker check: {exc}", file=sys.stderr)
        return Exit.CONFIG
    keys = Keys(cluster_prefix(args.prefix) if args.cluster else args.prefix)
    client = connect(args.redis_url, socket_timeout=args.timeout, cluster=args.cluster)
    host = socket.gethostname()
    try:
        if args.worker_id:
            ids = [args.worker_id]
        else:
            # a member no worker wrote (not UTF-8, by hand) names no heartbeat: skipped, not a traceback
            ids = sorted(filter(None, map(_utf8, members(client, keys.workers))))
        beats = read_beats(client, keys, ids)  # at most MAX_HEARTBEAT_BYTES of each; one without TTL: dead
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        print(f"unhealthy: Redis at {mask_url(args.redis_url)}: {type(exc).__name__}: {exc}")
        return Exit.FAILED
    alive = []
    for wid, beat in zip(ids, beats, strict=True):
        if beat.alive and (args.worker_id or beat.info.get("host") == host):
            alive.append(f"{wid} (progress {beat.info.get('progress_age_s', '?')} s ago)")
    if not alive:
        who = args.worker_id or f"host {host}"
        print(f"unhealthy: no live heartbeat for {who} under {keys.prefix}")
        return Exit.FAILED
    print("healthy: " + ", ".join(alive))
    return 0


def _utf8(member: bytes | str) -> str:
    """A worker id as text; "" for one that is not UTF-8."""
    if isinstance(member, str):
        return member
    try:
        return member.decode("utf-8")
    except UnicodeDecodeError:
        return ""
