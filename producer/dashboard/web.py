"""What every handler shares: the app's state (``request.app.state.dash``) and the page renderer.

Handlers are module-level functions of the request (:mod:`producer.dashboard.pages` for reads,
:mod:`producer.dashboard.actions` for POSTs); everything they need hangs off :class:`State`, built once by
:func:`producer.dashboard.app.create_app`. A new page is a handler, a template and a line in the route table.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from producer.client import Client, mask_url
from producer.dashboard import data
from producer.dashboard.security import CSRF_FIELD, Auth

HERE = Path(__file__).parent
LOW_CONFIDENCE = 0.6


@dataclass
class Config:
    redis_url: str
    prefix: str
    auth: Auth = field(default_factory=Auth)
    sample_s: float = 2.0  # how often the chart takes a sample, and the pages poll
    low_confidence: float = LOW_CONFIDENCE

    def __repr__(self) -> str:  # the Redis password never leaves in clear
        return (
            f"Config(redis_url={mask_url(self.redis_url)!r}, prefix={self.prefix!r}, auth={self.auth!r}, "
            f"sample_s={self.sample_s}, low_confidence={self.low_confidence})"
        )


@dataclass
class State:
    """The app's one state object: its configuration, the Redis client and the sampler's history."""

    config: Config
    client: Client
    history: data.History
    templates: Jinja2Templates

    @property
    def auth(self) -> Auth:
        return self.config.auth


def state(request: Request) -> State:
    st: State = request.app.state.dash
    return st


def make_templates() -> Jinja2Templates:
    # Autoescaping on for every template, whatever its name: ticket text and ids are untrusted input.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    templates = Jinja2Templates(env=env)
    templates.env.filters["age"] = age
    templates.env.filters["pct"] = lambda v: f"{100 * v:.0f}%"
    templates.env.filters["when"] = lambda t: time.strftime("%H:%M:%S", time.localtime(t)) if t else ""
    return templates


def render(request: Request, name: str, status: int = 200, **context: Any) -> Response:
    st = state(request)
    who = st.auth.identity(request)
    context.update(
        request=request,
        can_act=who is not None,
        auth_enabled=st.auth.enabled,
        csrf=st.auth.csrf_token(who),
        csrf_field=CSRF_FIELD,
        redis=mask_url(st.config.redis_url),
        prefix=st.config.prefix,
        poll_s=st.config.sample_s,
    )
    return st.templates.TemplateResponse(request, name, context, status_code=status)


def form_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def age(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
