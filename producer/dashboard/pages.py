"""The pages and what they poll: module-level GET handlers that read ``request.app.state``.

Each reads a bounded amount from Redis whatever its query string says (see :mod:`producer.dashboard.data`);
a malformed query is a 400 with a fixed text, an unknown ticket a 404, never a 500 nor an echo.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from producer import review
from producer.dashboard import data, heads, overview
from producer.dashboard.security import Refused
from producer.dashboard.web import question_of, render, state
from producer.protocol import MAX_ID_CHARS
from producer.strictjson import count

MAX_PAGE = 1_000_000  # dead-letter pages: 50 million letters is past any real list


def _overview(request: Request) -> overview.Overview:
    """What the background sampler collected last (the pages never sample themselves: one writer)."""
    ov = state(request).history.latest()
    if ov is None:
        raise Refused(503, "no sample from Redis yet: is it reachable? retrying every poll")
    return ov


def overview_page(request: Request) -> Response:
    return render(request, "overview.html", ov=_overview(request))


def overview_fragment(request: Request) -> Response:
    return render(request, "_overview.html", ov=_overview(request))


def overview_json(request: Request) -> Response:
    return JSONResponse(_overview(request).to_dict())


def history_json(request: Request) -> Response:
    return JSONResponse(state(request).history.series())


def _ticket_id(value: str) -> str:
    if len(value) > MAX_ID_CHARS:
        raise Refused(400, f"ticket ids are at most {MAX_ID_CHARS} characters")
    return value


def _filters(request: Request) -> tuple[data.Filters, dict[str, str]]:
    """The results page's filters, and the query that reproduces them (for the next page's link)."""
    params = request.query_params
    label = params.get("label", "")
    if len(label) > 128:
        raise Refused(400, "labels are at most 128 characters")
    corrected = params.get("corrected", "")
    if corrected not in ("", "yes", "no"):
        raise Refused(400, "corrected is yes, no or empty")
    low = params.get("low", "") == "1"
    filters = data.Filters(
        label=label or None,
        low=state(request).config.low_confidence if low else None,
        corrected={"yes": True, "no": False}.get(corrected),
    )
    query = {k: v for k, v in (("label", label), ("low", "1" if low else ""), ("corrected", corrected)) if v}
    return filters, query


def _load_results(request: Request) -> dict[str, Any]:
    st = state(request)
    filters, query = _filters(request)
    typed = request.query_params.get("q") or ""
    q = _ticket_id(typed.strip()) and typed  # no id is only spaces: an empty search lists
    if q:
        # the id as typed (ids may begin or end with spaces), else without the spaces a paste brings
        one = (data.row(st.client, q) if len(q) <= MAX_ID_CHARS else None) or (
            data.row(st.client, q.strip()) if q.strip() != q else None
        )
        page = data.Page(rows=[one] if one else [], next=None, scanned=1, read_bytes=0)
    else:
        try:
            cursor = (
                data.Cursor.parse(request.query_params["before"])
                if "before" in request.query_params
                else None
            )
        except ValueError:
            raise Refused(400, "bad cursor: follow the page's own links") from None
        page = data.results_page(st.client, filters, cursor)
    latest = st.history.latest()
    seen = {*data.known_labels(page.rows), *(latest.labels if latest else {})}
    labels = st.client.labels_of(also=seen)  # the published set too: results may carry their top labels only
    next_url = f"/results?{urlencode({**query, 'before': str(page.next)})}" if page.next else ""
    return {
        "page": page,
        "rows": page.rows,
        "labels": labels,
        "label": filters.label or "",
        "low": filters.low is not None,
        "corrected": query.get("corrected", ""),
        "filtered": filters.any,
        "first": "before" not in request.query_params,
        "q": q,
        "next_url": next_url,
        "low_confidence": st.config.low_confidence,
        "head": heads.head_info(st.client),
        "deciders": heads.decider_summary(st.client, [r.result for r in page.rows]),
    }


async def results_page(request: Request) -> Response:
    context = await run_in_threadpool(_load_results, request)
    return render(request, "results.html", **context)


async def ticket_page(request: Request) -> Response:
    st = state(request)
    ticket_id = _ticket_id(request.path_params["ticket_id"])
    found = await run_in_threadpool(data.ticket, st.client, ticket_id)
    if found is None:
        raise Refused(404, "no ticket with that id in Redis (results, texts and corrections looked at)")
    head = await run_in_threadpool(heads.head_info, st.client)
    decided = heads.deciders(st.client, [found.result])[0] if found.result else None
    labels = st.client.labels_of(also=found.result.scores if found.result else ())
    return render(
        request,
        "ticket.html",
        t=found,
        decided=decided,
        labels=labels,
        head=head,
        low_confidence=st.config.low_confidence,
    )


REVIEW_ROWS = 100  # the smallest margins shown at once; labelling them brings the next ones up


def _review(request: Request) -> dict[str, Any]:
    st = state(request)
    question = question_of(request.query_params.get("question"))
    latest = st.history.latest()
    # the primary's queue and each further question's that live workers name (or the one asked for)
    asked = [None, *dict.fromkeys([*(latest.questions if latest else ()), *([question] if question else [])])]
    keys = st.client.keys
    with st.client.redis.pipeline(transaction=False) as pipe:
        for q in asked:
            pipe.zcard(keys.asking(q).review)
        sizes = pipe.execute()
    items = review.queue(  # clipped texts, at most a page's bytes of results, as the results page reads
        st.client,
        REVIEW_ROWS,
        question=question,
        text_chars=data.LIST_TEXT_CHARS,
        result_bytes=data.PAGE_BYTES,
    )
    size, oldest = review.summary(st.client, question=question)
    return {
        "items": items,
        "offered": st.client.labels_of(question),  # what a correction may name (empty: not published yet)
        "size": size,
        "oldest": oldest,
        "question": question,
        "queues": list(zip(asked, sizes, strict=True)),
    }


async def review_page(request: Request) -> Response:
    """The tickets that need a person on a question (``?question=NAME``; the primary by default), smallest
    margin first: confirm or correct each in one click (both record a correction for that question, which
    takes the ticket off its queue). A tab per question that live workers ask, with its queue's size."""
    return render(request, "review.html", **await run_in_threadpool(_review, request))


async def dead_page(request: Request) -> Response:
    st = state(request)
    page_text = request.query_params.get("page", "0")
    page = count(page_text)
    if page is None or page > MAX_PAGE:
        raise Refused(400, "page is a number")
    replayed = request.query_params.get("replayed", "")
    message = ""
    if (n := count(replayed, 9)) is not None:  # a count, never free text from the URL
        whose = " of that ticket" if request.query_params.get("one") else ""
        message = f"{n} dead letter{'' if n == 1 else 's'}{whose} requeued"
    rows = await run_in_threadpool(data.dead_page, st.client, page * data.DEAD_ROWS)
    total = int(await run_in_threadpool(st.client.redis.llen, st.client.keys.dead))
    return render(
        request,
        "dead.html",
        rows=rows,
        total=total,
        message=message,
        page=page,
        first=page * data.DEAD_ROWS,
        more=(page + 1) * data.DEAD_ROWS < total,
    )


def healthz(request: Request) -> Response:
    try:
        state(request).client.redis.ping()
    except redis.RedisError:
        return PlainTextResponse("redis unreachable", status_code=503)
    return PlainTextResponse("ok")
