"""Server-side scripts as files: every ``.lua`` lives beside the module that runs it and is loaded here.

Each file opens with a header stating its ``KEYS``, ``ARGV``, what it guarantees atomically and what it
costs. :func:`load` registers a script once per client (redis-py's ``Script``): calls go as ``EVALSHA``
and fall back to ``EVAL``-and-cache when the server answers ``NOSCRIPT`` (after a restart or a failover),
so no caller handles that. The files ship in the wheel (``package-data`` in pyproject.toml), so other
languages can load the same bytes.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any


@cache
def source(package: str, name: str) -> str:
    """The text of ``name`` (e.g. ``claim.lua``) in ``package`` (e.g. ``worker``), read once."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def load(client: Any, package: str, name: str) -> Any:
    """The script registered on ``client`` (a ``redis.commands.core.Script``; redis is not imported here,
    as producer.learning, which the engine imports, reads sources through this module): ``EVALSHA``,
    with ``NOSCRIPT`` answered by loading it."""
    return client.register_script(source(package, name))
