"""The Redis connection flags every command shares, with their ``TICKETQ_*`` variables and defaults.

``ticketq-producer``, ``ticketq-dashboard``, ``ticketq-worker check`` and ``ticketq-worker train
--from-redis`` take them from here, so a deployment sets ``TICKETQ_REDIS_URL``, ``TICKETQ_PREFIX`` and
``TICKETQ_CLUSTER`` once for all of them. (The worker's own settings read the same variables through
:mod:`worker.settings`, which layers flags over variables over defaults.)
"""

from __future__ import annotations

import argparse
import os

from producer.protocol import DEFAULT_PREFIX

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
TRUE_WORDS = ("1", "true", "yes", "on")


def env_flag(name: str) -> bool:
    """A boolean ``TICKETQ_*`` variable: 1, true, yes or on (any case) is true."""
    return os.environ.get(name, "").strip().lower() in TRUE_WORDS


def add_redis_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--redis-url``, ``--prefix`` and ``--cluster``, defaulting to their variables."""
    env = os.environ.get
    parser.add_argument(
        "--redis-url",
        default=env("TICKETQ_REDIS_URL", DEFAULT_REDIS_URL),
        help=f"[env TICKETQ_REDIS_URL] (default {DEFAULT_REDIS_URL})",
    )
    parser.add_argument(
        "--prefix",
        default=env("TICKETQ_PREFIX", DEFAULT_PREFIX),
        help=f"key prefix [env TICKETQ_PREFIX] (default {DEFAULT_PREFIX})",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        default=env_flag("TICKETQ_CLUSTER"),
        help="Redis Cluster (--redis-url names any node; the prefix gets a hash tag) [env TICKETQ_CLUSTER]",
    )
