"""Fixtures of the process tier: throwaway redis-servers, fleets of fake-model worker processes, and a tiny
random model for real ones."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from faultkit import FAKE, FAKEWORKER, KEYS
from support import need_binary

from tools.chaos.fleet import Fleet
from tools.redis_server import RedisServer


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Makes redis-servers (not started) on free loopback ports; every one is killed afterwards."""
    need_binary("redis-server")
    made: list[RedisServer] = []

    def make(**kwargs: Any) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(made)}", **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.crash()


@pytest.fixture
def fleets(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Makes fleets of fake-model worker processes; any still running afterwards is killed."""
    made: list[Fleet] = []

    def make(url: str, *flags: str, prefix: str = KEYS.prefix, name_clients: bool = True) -> Fleet:
        logs = tmp_path / f"logs-{len(made)}"
        logs.mkdir()
        fleet = Fleet(
            url, prefix, logs, ["--model", FAKE, *flags], name_clients=name_clients, module=FAKEWORKER
        )
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.kill_all()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama directory (tests/tinymodel.py) for real worker processes to load."""
    from tinymodel import build_tiny_llama  # torch: only the tests that run a real model pay for it

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
