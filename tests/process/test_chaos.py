"""A small chaos run in the suite: real workers SIGKILLed and SIGTERMed mid-batch, one worker's
connections killed from the server, Redis restarted and, for a second, full; still nothing lost and
nothing in flight.

The large run, and how to repeat it, is in docs/chaos.md (``python -m tools.chaos``).
"""

from __future__ import annotations

import pytest
from support import need_binary

from tools.chaos.cli import render
from tools.chaos.run import Config, run

pytestmark = [pytest.mark.redis, pytest.mark.process]


@pytest.fixture(scope="module")
def redis_server_binary() -> None:
    need_binary("redis-server")  # the chaos run starts (and restarts) a server of its own


@pytest.mark.timeout(90)
def test_a_small_chaos_run_loses_nothing(redis_server_binary: None) -> None:
    cfg = Config(
        tickets=400, workers=3, producers=2, kills=5, client_kills=1, redis_restarts=1, redis_full=1,
        duration_s=7.0, seed=11, delay_ms=20, heartbeat_s=1.0, canaries=10, startup_s=30, settle_s=40,
    )  # fmt: skip
    summary = run(cfg, say=lambda _: None)
    report = render(summary)
    v, c = summary.verdict, summary.chaos
    assert summary.ok, report
    assert v.lost == 0 and v.wrong == 0 and v.stray == 0, report
    assert v.left_in_flight == 0 and v.left_in_input == 0, report
    assert v.ok == v.planned, report  # every payload where it belongs, none poisoned by the kills
    assert c.sigkill + c.sigterm == 5 and c.client_kills == 1, report
    assert c.redis_restarts == 1 and c.redis_full == 1, report
    assert c.connections_killed >= 1 and c.workers_started == 3 + 5, report
    assert summary.canaries_served and not summary.unexpected_exits, report
