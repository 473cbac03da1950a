"""Sign-in and the actions: module-level POST handlers (and ``GET /login``) reading ``app.state``.

Every refusal is a :class:`~producer.dashboard.security.Refused`, answered by the app's handler as a 4xx
with a fixed text; no request value is echoed back. A correction the queue refuses (:class:`LabelError`)
is a 422 naming what the signed-in operator sent, as text/plain.
"""

from __future__ import annotations

import math
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from producer.client import LabelError
from producer.dashboard import data, heads
from producer.dashboard.security import CSRF_FIELD, SESSION_COOKIE, Refused, check_origin
from producer.dashboard.web import client_of, question_of, read_form, render, state


async def login(request: Request) -> Response:
    auth = state(request).auth
    if not auth.enabled:
        return RedirectResponse("/", status_code=303)
    if request.method == "GET":
        if auth.identity(request) is not None:
            return RedirectResponse("/", status_code=303)
        if auth.basic and not auth.token:
            return PlainTextResponse(
                "sign in", status_code=401, headers={"www-authenticate": 'Basic realm="ticketq"'}
            )
        return render(request, "login.html", error="")
    check_origin(request)
    client = client_of(request)
    wait = auth.throttle.wait_s(client)
    if wait > 0:
        raise Refused(429, "too many failed sign-ins: try again later", {"retry-after": str(math.ceil(wait))})
    form = await read_form(request)
    if not auth.check_token(form.get("token", "")):
        auth.throttle.failed(client)
        return render(request, "login.html", status=401, error="wrong token")
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        auth.sessions.open(auth.session_s),
        httponly=True,
        samesite="strict",
        secure=state(request).config.secure_cookies or request.url.scheme == "https",
        path="/",
        max_age=int(auth.session_s),
    )
    return response


async def logout(request: Request) -> Response:
    """Ends the session server-side: the cookie is worthless afterwards, even if it was copied."""
    check_origin(request)
    state(request).auth.sessions.close(request.cookies.get(SESSION_COOKIE, ""))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def label(request: Request) -> Response:
    st = state(request)
    form = await read_form(request)
    who = st.auth.check_action(request, form.get(CSRF_FIELD))
    ticket_id, name = form.get("id", ""), form.get("label", "")
    question = question_of(form.get("question"))  # a further question's answer (the review page's tabs)
    try:
        await run_in_threadpool(st.client.label, ticket_id, name, by=f"dashboard:{who}", question=question)
    except LabelError as exc:
        return PlainTextResponse(str(exc), status_code=422)
    if form.get("back") == "review":  # from the review page: back to the queue, the next one on top
        where = "/review" + (f"?question={quote(question, safe='')}" if question else "")
        return RedirectResponse(where, status_code=303)
    if "hx-request" not in request.headers:  # a browser without JavaScript: back to the ticket
        return RedirectResponse(f"/tickets/{quote(ticket_id, safe='')}", status_code=303)
    row = await run_in_threadpool(data.row, st.client, ticket_id)
    head = await run_in_threadpool(heads.head_info, st.client)
    if row is None:
        return PlainTextResponse("labelled")
    return render(
        request,
        "_result_row.html",
        row=row,
        labels=st.client.labels_of(also=row.result.scores),
        low_confidence=st.config.low_confidence,
        row_note=f"recorded; head version {head.next_version} will learn it",
    )


async def unlabel(request: Request) -> Response:
    """Withdraw a ticket's correction (the ticket page's button), then back to the ticket."""
    st = state(request)
    form = await read_form(request)
    st.auth.check_action(request, form.get(CSRF_FIELD))
    ticket_id = form.get("id", "")
    try:
        await run_in_threadpool(st.client.unlabel, ticket_id, question_of(form.get("question")))
    except LabelError as exc:
        return PlainTextResponse(str(exc), status_code=422)
    return RedirectResponse(f"/tickets/{quote(ticket_id, safe='')}", status_code=303)


async def replay(request: Request) -> Response:
    """Replay one ticket's dead letters (by id) or all of them: the producer's requeue."""
    st = state(request)
    form = await read_form(request)
    st.auth.check_action(request, form.get(CSRF_FIELD))
    ticket_id = form.get("id", "")
    if not ticket_id and form.get("all") != "1":
        raise Refused(422, "name a ticket id, or all=1")
    moved = await run_in_threadpool(st.client.requeue_dead, ticket_id=ticket_id or None)
    # Only a count goes back in the URL: the page never echoes request text as a message.
    return RedirectResponse(f"/dead?replayed={len(moved)}{'&one=1' if ticket_id else ''}", status_code=303)
