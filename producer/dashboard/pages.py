"""The pages and what they poll: module-level GET handlers that read ``request.app.state``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from producer.dashboard import data
from producer.dashboard.web import render, state


def overview_page(request: Request) -> Response:
    st = state(request)
    return render(request, "overview.html", ov=data.overview(st.client, st.history))


def overview_fragment(request: Request) -> Response:
    st = state(request)
    return render(request, "_overview.html", ov=data.overview(st.client, st.history))


def overview_json(request: Request) -> Response:
    st = state(request)
    return JSONResponse(data.overview(st.client, st.history).to_dict())


def history_json(request: Request) -> Response:
    return JSONResponse(state(request).history.series())


def results_page(request: Request) -> Response:
    st = state(request)
    params = request.query_params
    label = params.get("label") or None
    low = st.config.low_confidence if params.get("low") else None
    corrected = {"yes": True, "no": False}.get(params.get("corrected", ""))
    q = (params.get("q") or "").strip() or None
    rows = data.results_page(st.client, label=label, low=low, corrected=corrected, q=q)
    labels = data.known_labels(rows)
    if label and label not in labels:
        labels = sorted({*labels, label})
    return render(
        request,
        "results.html",
        rows=rows,
        labels=labels,
        label=label or "",
        low=bool(low),
        corrected=params.get("corrected", ""),
        q=q or "",
        low_confidence=st.config.low_confidence,
        head=data.head_info(st.client),
    )


def dead_page(request: Request) -> Response:
    st = state(request)
    replayed = request.query_params.get("replayed", "")
    message = ""
    if replayed.isdigit() and len(replayed) < 10:  # a count, never free text from the URL
        n = int(replayed)
        whose = " of that ticket" if request.query_params.get("one") else ""
        message = f"{n} dead letter{'' if n == 1 else 's'}{whose} requeued"
    rows = data.dead_page(st.client)
    return render(request, "dead.html", rows=rows, total=st.client.stats().dead, message=message)


def healthz(request: Request) -> Response:
    state(request).client.redis.ping()
    return PlainTextResponse("ok")
