"""Routes: for tickets whose label has a route, one RQ job in the same transaction as the result.

The job is enqueued inside the ack's MULTI (through :data:`worker.queue.AckHook`), so a result and its
job exist together or not at all. Its id is derived from the ticket id and payload digest, and the ack
only routes *first* results (not redeliveries), so a ticket processed twice still makes one job.

The job calls ``handler(ticket=..., result=...)`` with plain dicts (JSON serializer, so handlers can be
written without importing ticketq):

- ``ticket``: ``{"id", "text", "fields"}``
- ``result``: the :class:`~producer.protocol.Result` JSON as a dict

A ticket whose result needs review (``"review": true``, see :mod:`worker.review`) goes to the route named
``review`` instead, when one is configured (``--route review=QUEUE`` or ``review = "QUEUE"`` in the task's
``[routes]``).

A route names a primary label (``billing``) or a further question's label (``intent:lost_card``, the
result's ``answers.intent.label``); a ticket that matches several routes gets one job per route, each
with an id of its own. A question's answer that needs review (``answers.intent.review``) goes to the
route ``intent:review`` instead of ``intent:<label>``, when one is configured, as the primary's does.

RQ's own keys (``rq:*``) do not share ticketq's hash tag, so routing is for plain (non-cluster) Redis.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import redis
from redis.client import Pipeline
from rq import Queue
from rq.serializers import JSONSerializer

from worker.engine.task import REVIEW_ROUTE, ROUTE_SEP, review_route
from worker.queue import Finished


def job_id(ticket_id: str, digest: str, route: str | None = None) -> str:
    """Stable across redeliveries and workers; RQ accepts letters, digits, ``-`` and ``_``. ``route``: a
    further question's route (``NAME:label``); a primary label's job keeps the id it always had."""
    key = f"{ticket_id}\0{digest}" + (f"\0{route}" if route else "")
    return "ticketq-" + hashlib.sha1(key.encode()).hexdigest()


def matched(routes: Mapping[str, str], item: Finished) -> list[tuple[str, str | None, str]]:
    """(queue, question route or None, label) of every route this result matches."""
    out: list[tuple[str, str | None, str]] = []
    result = item.result
    review = routes.get(REVIEW_ROUTE)
    if result.review and review:  # a ticket that needs review goes there, not to its label's queue
        out.append((review, None, REVIEW_ROUTE))
    elif result.label in routes:
        out.append((routes[result.label], None, result.label))
    unsure = set(result.questions_to_review())
    for question, answer in result.answers.items():
        route = review_route(question)  # the same rule per question: review first, else the label's
        if question not in unsure or route not in routes:
            route = f"{question}{ROUTE_SEP}{answer.get('label')}"
        if route in routes:
            out.append((routes[route], route, route))
    return out


@dataclass
class Router:
    connection: redis.Redis
    routes: Mapping[str, str]  # label -> RQ queue name
    handler: str  # dotted path of the job function
    job_timeout: int = 300
    result_ttl: int = 86_400
    _queues: dict[str, Queue] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.routes and not self.handler:
            raise ValueError("routes need a handler: --route-handler or route_handler in the task file")

    def queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(name, connection=self.connection, serializer=JSONSerializer)
        return self._queues[name]

    def __call__(self, pipe: Pipeline, fresh: Sequence[Finished]) -> None:
        """The ack hook: add one job per routed ticket to the open MULTI in ``pipe``.

        ``enqueue_many(..., pipeline=pipe)`` only queues commands on the pipeline, which is what a
        MULTI needs (``enqueue(pipeline=...)`` reads from Redis and fails inside one).
        """
        by_queue: dict[str, list[tuple[Finished, str | None, str]]] = {}
        for item in fresh:
            for name, route, label in matched(self.routes, item):
                by_queue.setdefault(name, []).append((item, route, label))
        for name, items in by_queue.items():
            datas = [
                Queue.prepare_data(
                    self.handler,
                    kwargs={
                        "ticket": {"id": f.ticket.id, "text": f.ticket.text, "fields": f.ticket.fields},
                        "result": json.loads(f.result.to_json()),
                    },
                    job_id=job_id(f.result.id, f.result.digest, route),
                    timeout=self.job_timeout,
                    result_ttl=self.result_ttl,
                    description=f"ticketq route {label} for {f.result.id}",
                )
                for f, route, label in items
            ]
            self.queue(name).enqueue_many(datas, pipeline=pipe)
