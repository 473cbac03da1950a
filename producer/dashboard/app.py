"""The dashboard's web app: pages, the htmx fragments they poll, JSON for the chart, and the actions.

Pages are rendered on the server with Jinja2 (autoescaping on: a ticket is untrusted input); htmx swaps
the live fragments in and uPlot draws the chart. Both are vendored under ``static/``: nothing is fetched
from another site, and the Content-Security-Policy says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from producer.client import Client
from producer.dashboard import actions, overview, pages
from producer.dashboard.security import Refused
from producer.dashboard.web import HERE, Config, State, client_of, make_templates, state

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


class _Headers(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


ROUTES = [
    Route("/", pages.overview_page),
    Route("/fragments/overview", pages.overview_fragment),
    Route("/api/overview", pages.overview_json),
    Route("/api/history", pages.history_json),
    Route("/results", pages.results_page),
    Route("/tickets/{ticket_id:path}", pages.ticket_page),
    Route("/review", pages.review_page),
    Route("/dead", pages.dead_page),
    Route("/login", actions.login, methods=["GET", "POST"]),
    Route("/logout", actions.logout, methods=["POST"]),
    Route("/actions/label", actions.label, methods=["POST"]),
    Route("/actions/unlabel", actions.unlabel, methods=["POST"]),
    Route("/actions/replay", actions.replay, methods=["POST"]),
    Route("/healthz", pages.healthz),
    Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
]


PUBLIC_PATHS = ("/healthz", "/login")  # and /static/: what answers without sign-in


class _SignIn(BaseHTTPMiddleware):
    """With credentials configured, everything but :data:`PUBLIC_PATHS` and static files needs them:
    a browser asking for a page is sent to ``/login``, anything else gets 401."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        auth = state(request).auth
        path = request.url.path
        if not auth.enabled or path in PUBLIC_PATHS or path.startswith("/static/"):
            return await call_next(request)
        client = client_of(request)
        presented = "authorization" in request.headers
        wait = auth.throttle.wait_s(client) if presented else 0.0
        if wait > 0:  # a guessed password is not even checked while its client waits
            headers = {"retry-after": str(math.ceil(wait))}
            return PlainTextResponse("too many failed sign-ins: try again later", 429, headers=headers)
        if auth.identity(request) is not None:
            return await call_next(request)
        if presented:
            auth.throttle.failed(client)
        wants_page = "text/html" in request.headers.get("accept", "") and "hx-request" not in request.headers
        if request.method == "GET" and wants_page:
            return RedirectResponse("/login", status_code=303)
        headers = {"www-authenticate": 'Basic realm="ticketq"'} if auth.basic else {}
        return PlainTextResponse("sign in first", status_code=401, headers=headers)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return PlainTextResponse(exc.reason, status_code=exc.status, headers=exc.headers)


def create_app(config: Config, client: Client | None = None) -> Starlette:
    client = client or Client.from_url(config.redis_url, config.prefix, socket_connect_timeout=5)
    middleware = [
        Middleware(_Headers),
        Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts), www_redirect=False),
        Middleware(_SignIn),
    ]
    if config.trusted_proxy:  # X-Forwarded-For/-Proto believed from that address only
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        middleware.insert(0, Middleware(ProxyHeadersMiddleware, trusted_hosts=config.trusted_proxy))
    app = Starlette(
        routes=ROUTES, middleware=middleware, lifespan=_lifespan, exception_handlers={Refused: _refused}
    )
    app.state.dash = State(
        config=config, client=client, history=overview.History(), templates=make_templates()
    )
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    st: State = app.state.dash
    with contextlib.suppress(Exception):  # the first sample before the first page; Redis away: pages say so
        await run_in_threadpool(overview.sample, st.client, st.history)
    task = asyncio.create_task(_sample_forever(st.client, st.history, st.config.sample_s))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _sample_forever(client: Client, history: overview.History, every_s: float) -> None:
    """The one writer of ``history``: every page shows what it collected last."""
    while True:
        await asyncio.sleep(every_s)
        with contextlib.suppress(Exception):  # Redis away: the pages say so; the chart just has a gap
            await run_in_threadpool(overview.sample, client, history)
