"""The dashboard's web app: pages, the htmx fragments they poll, JSON for the chart, and the actions.

Pages are rendered on the server with Jinja2 (autoescaping on: a ticket is untrusted input); htmx swaps
the live fragments in and uPlot draws the chart. Both are vendored under ``static/``: nothing is fetched
from another site, and the Content-Security-Policy says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from producer.client import Client, LabelError, mask_url
from producer.dashboard import data
from producer.dashboard.security import CSRF_FIELD, SESSION_COOKIE, Auth, Refused, check_origin

HERE = Path(__file__).parent
LOW_CONFIDENCE = 0.6
SAMPLE_S = 2.0  # how often the chart takes a sample, and the pages poll
SECURITY_HEADERS = {
    # Scripts and styles from this origin only: an injected <script> would not run even if escaping failed.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


@dataclass
class Config:
    redis_url: str
    prefix: str
    auth: Auth = field(default_factory=Auth)
    sample_s: float = SAMPLE_S
    low_confidence: float = LOW_CONFIDENCE

    def __repr__(self) -> str:  # the Redis password never leaves in clear
        return (
            f"Config(redis_url={mask_url(self.redis_url)!r}, prefix={self.prefix!r}, auth={self.auth!r}, "
            f"sample_s={self.sample_s}, low_confidence={self.low_confidence})"
        )


class _Headers(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def create_app(config: Config, client: Client | None = None) -> Starlette:
    client = client or Client.from_url(config.redis_url, config.prefix, socket_connect_timeout=5)
    history = data.History()
    # Autoescaping on for every template, whatever its name: ticket text and ids are untrusted input.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    templates = Jinja2Templates(env=env)
    templates.env.filters["age"] = _age
    templates.env.filters["pct"] = lambda v: f"{100 * v:.0f}%"
    templates.env.filters["when"] = lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t else ""
    auth = config.auth

    def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        who = auth.identity(request)
        context.update(
            request=request,
            can_act=who is not None,
            auth_enabled=auth.enabled,
            csrf=auth.csrf_token(who),
            csrf_field=CSRF_FIELD,
            redis=mask_url(config.redis_url),
            prefix=config.prefix,
            poll_s=config.sample_s,
        )
        return templates.TemplateResponse(request, name, context, status_code=status)

    def overview_page(request: Request) -> Response:
        return render(request, "overview.html", ov=data.overview(client, history))

    def overview_fragment(request: Request) -> Response:
        return render(request, "_overview.html", ov=data.overview(client, history))

    def overview_json(request: Request) -> Response:
        return JSONResponse(data.overview(client, history).to_dict())

    def history_json(request: Request) -> Response:
        return JSONResponse(history.series())

    def results_page(request: Request) -> Response:
        params = request.query_params
        label = params.get("label") or None
        low = config.low_confidence if params.get("low") else None
        corrected = {"yes": True, "no": False}.get(params.get("corrected", ""))
        q = (params.get("q") or "").strip() or None
        rows = data.results_page(client, label=label, low=low, corrected=corrected, q=q)
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
            low_confidence=config.low_confidence,
            head=data.head_info(client),
        )

    def dead_page(request: Request) -> Response:
        replayed = request.query_params.get("replayed", "")
        message = ""
        if replayed.isdigit():
            n = int(replayed)
            message = f"{request.query_params.get('what', '')}{n} dead letter{'' if n == 1 else 's'} requeued"
        rows = data.dead_page(client)
        return render(request, "dead.html", rows=rows, total=client.stats().dead, message=message)

    async def login(request: Request) -> Response:
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

    async def action_label(request: Request) -> Response:
        form = await request.form()
        try:
            who = auth.check_action(request, _str(form.get(CSRF_FIELD)))
        except Refused as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)
        ticket_id, label = _str(form.get("id")) or "", _str(form.get("label")) or ""
        try:
            await run_in_threadpool(client.label, ticket_id, label, by=f"dashboard:{who}")
        except LabelError as exc:
            return PlainTextResponse(str(exc), status_code=422)
        if "hx-request" not in request.headers:  # a browser without JavaScript: back to the ticket
            return RedirectResponse(f"/results?q={quote(ticket_id)}", status_code=303)
        row = await run_in_threadpool(data.row, client, ticket_id)
        head = await run_in_threadpool(data.head_info, client)
        if row is None:
            return PlainTextResponse(f"{ticket_id}: labelled {label}")
        return render(
            request,
            "_result_row.html",
            row=row,
            labels=sorted(row.result.scores),
            low_confidence=config.low_confidence,
            row_note=f"recorded; head version {head.next_version} will learn it",
        )

    async def action_replay(request: Request) -> Response:
        """Replay one ticket's dead letters (by id) or all of them: the producer's atomic requeue."""
        form = await request.form()
        try:
            auth.check_action(request, _str(form.get(CSRF_FIELD)))
        except Refused as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)
        ticket_id = _str(form.get("id"))
        if not ticket_id and form.get("all") != "1":
            return PlainTextResponse("name a ticket id, or all=1", status_code=422)
        moved = await run_in_threadpool(client.requeue_dead, ticket_id=ticket_id or None)
        what = f"{ticket_id}: " if ticket_id else ""
        return RedirectResponse(f"/dead?replayed={len(moved)}&what={quote(what)}", status_code=303)

    def healthz(request: Request) -> Response:
        client.redis.ping()
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(_sample_forever(client, history, config.sample_s))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    routes = [
        Route("/", overview_page),
        Route("/fragments/overview", overview_fragment),
        Route("/api/overview", overview_json),
        Route("/api/history", history_json),
        Route("/results", results_page),
        Route("/dead", dead_page),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/actions/label", action_label, methods=["POST"]),
        Route("/actions/replay", action_replay, methods=["POST"]),
        Route("/healthz", healthz),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(_Headers)], lifespan=lifespan)


async def _sample_forever(client: Client, history: data.History, every_s: float) -> None:
    """The chart keeps sampling while nobody looks, so it has a past when somebody does."""
    while True:
        with contextlib.suppress(Exception):  # Redis away: the pages say so; the chart just has a gap
            await run_in_threadpool(data.overview, client, history)
        await asyncio.sleep(every_s)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _age(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
