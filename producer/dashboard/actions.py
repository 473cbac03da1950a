"""Sign-in and the actions: module-level POST handlers (and ``GET /login``) reading ``app.state``."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from producer.client import LabelError
from producer.dashboard import data
from producer.dashboard.security import CSRF_FIELD, SESSION_COOKIE, Refused, check_origin
from producer.dashboard.web import form_str, render, state


async def login(request: Request) -> Response:
    auth = state(request).auth
    if request.method == "GET":
        if auth.basic and auth.identity(request) is None and not auth.token:
            return PlainTextResponse(
                "sign in", status_code=401, headers={"www-authenticate": 'Basic realm="ticketq"'}
            )
        if auth.identity(request) is not None:
            return RedirectResponse("/", status_code=303)
        return render(request, "login.html", error="")
    form = await request.form()
    try:
        check_origin(request)
    except Refused as exc:
        return PlainTextResponse(exc.reason, status_code=exc.status)
    if not auth.check_token(str(form.get("token", ""))):
        return render(request, "login.html", status=401, error="wrong token")
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        SESSION_COOKIE, auth.session_value(), httponly=True, samesite="strict", path="/", max_age=86400
    )
    return response


async def logout(request: Request) -> Response:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def label(request: Request) -> Response:
    st = state(request)
    form = await request.form()
    try:
        who = st.auth.check_action(request, form_str(form.get(CSRF_FIELD)))
    except Refused as exc:
        return PlainTextResponse(exc.reason, status_code=exc.status)
    ticket_id, name = form_str(form.get("id")) or "", form_str(form.get("label")) or ""
    try:
        await run_in_threadpool(st.client.label, ticket_id, name, by=f"dashboard:{who}")
    except LabelError as exc:
        return PlainTextResponse(str(exc), status_code=422)
    if "hx-request" not in request.headers:  # a browser without JavaScript: back to the ticket
        return RedirectResponse(f"/results?q={quote(ticket_id)}", status_code=303)
    row = await run_in_threadpool(data.row, st.client, ticket_id)
    head = await run_in_threadpool(data.head_info, st.client)
    if row is None:
        return PlainTextResponse(f"{ticket_id}: labelled {name}")
    return render(
        request,
        "_result_row.html",
        row=row,
        labels=sorted(row.result.scores),
        low_confidence=st.config.low_confidence,
        row_note=f"recorded; head version {head.next_version} will learn it",
    )


async def replay(request: Request) -> Response:
    """Replay one ticket's dead letters (by id) or all of them: the producer's atomic requeue."""
    st = state(request)
    form = await request.form()
    try:
        st.auth.check_action(request, form_str(form.get(CSRF_FIELD)))
    except Refused as exc:
        return PlainTextResponse(exc.reason, status_code=exc.status)
    ticket_id = form_str(form.get("id"))
    if not ticket_id and form.get("all") != "1":
        return PlainTextResponse("name a ticket id, or all=1", status_code=422)
    moved = await run_in_threadpool(st.client.requeue_dead, ticket_id=ticket_id or None)
    what = f"{ticket_id}: " if ticket_id else ""
    return RedirectResponse(f"/dead?replayed={len(moved)}&what={quote(what)}", status_code=303)
