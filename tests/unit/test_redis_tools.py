"""The tools' Redis helpers: the demo's last-resort embedded server runs the queue's real Lua."""

from __future__ import annotations

import json

import fakeredis

from producer.protocol import Keys, payload_digest
from tools.redis_server import teach_fakeredis_sha1hex
from worker.queue import RedisQueue


def test_the_claim_script_singles_out_suspects_on_fakeredis_too() -> None:
    teach_fakeredis_sha1hex()
    r = fakeredis.FakeRedis()
    keys = Keys("t-embedded")
    raws = [json.dumps({"id": f"t{i}", "text": "refund please"}).encode() for i in range(3)]
    r.lpush(keys.tickets, *raws)
    r.hset(keys.attempts, payload_digest(raws[1]), 1)  # in flight once when a worker died: a suspect
    queue = RedisQueue(r, keys, "w1")
    claims = []
    for _ in range(3):
        claims.append(queue.claim(10, block_s=0, max_wait_s=0))
        r.delete(keys.inflight("w1"))
    assert claims == [[raws[0]], [raws[1]], [raws[2]]]  # the suspect travels alone
