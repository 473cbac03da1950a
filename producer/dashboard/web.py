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
from urllib.parse import parse_qsl, quote

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from producer.client import Client, mask_url
from producer.dashboard import overview
from producer.dashboard.security import CSRF_FIELD, Auth, Refused
from producer.protocol import Keys
from producer.strictjson import count, finite_number

HERE = Path(__file__).parent
LOW_CONFIDENCE = 0.6
SAMPLE_S = 2.0  # how often the chart takes a sample, and the pages poll
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
MAX_FORM_BYTES = 16 * 1024  # the actions' forms are a few hundred bytes
MAX_FORM_FIELDS = 16


@dataclass
class Config:
    redis_url: str
    prefix: str
    auth: Auth = field(default_factory=Auth)
    sample_s: float = SAMPLE_S
    low_confidence: float = LOW_CONFIDENCE
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES  # Host headers answered; anything else is refused
    secure_cookies: bool = False  # served behind HTTPS: the session cookie gets Secure
    trusted_proxy: str | None = None  # the proxy whose X-Forwarded-For/-Proto are believed

    def __repr__(self) -> str:  # the Redis password never leaves in clear
        return (
            f"Config(redis_url={mask_url(self.redis_url)!r}, prefix={self.prefix!r}, auth={self.auth!r}, "
            f"sample_s={self.sample_s}, low_confidence={self.low_confidence}, "
            f"allowed_hosts={self.allowed_hosts!r}, secure_cookies={self.secure_cookies}, "
            f"trusted_proxy={self.trusted_proxy!r})"
        )


@dataclass
class State:
    """The app's one state object: its configuration, the Redis client and the sampler's history."""

    config: Config
    client: Client
    history: overview.History
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
    templates.env.filters["pct"] = pct
    templates.env.filters["when"] = when
    # a ticket id as one path segment: "/" escaped, so a link opens that ticket and no other page (the ids
    # "." and "..", which browsers resolve away whatever the escaping, are refused by decode_ticket)
    templates.env.filters["segment"] = lambda v: quote(str(v), safe="")
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


async def read_form(request: Request) -> dict[str, str]:
    """A POSTed form, urlencoded, at most :data:`MAX_FORM_BYTES`: anything else is :class:`Refused`
    (415, 413 or 400), never a 500 and never an unbounded read."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "send the form as application/x-www-form-urlencoded")
    length = request.headers.get("content-length", "0")
    size = count(length)
    if size is None or size > MAX_FORM_BYTES:
        raise Refused(413, f"form too large: at most {MAX_FORM_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, f"form too large: at most {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qsl(
            body.decode("ascii"), keep_blank_values=True, errors="strict", max_num_fields=MAX_FORM_FIELDS
        )
    except ValueError:  # not ASCII, bad percent-encoded UTF-8, too many fields
        raise Refused(400, "malformed form") from None
    return dict(pairs)


def question_of(value: str | None) -> str | None:
    """A ``question`` query or form value: a further question's name, or None (empty: the primary);
    anything that cannot name one is :class:`Refused` (400), never echoed."""
    if not value:
        return None
    if len(value) > overview.MAX_QUESTION_CHARS or not value.isprintable():
        raise Refused(400, "question: a question's name, at most 64 characters")
    try:
        Keys().asking(value)
    except ValueError:
        raise Refused(400, "question: a question's name, without ':'") from None
    return value


def client_of(request: Request) -> str:
    """The address sign-in failures are counted against (the real client's, behind a trusted proxy)."""
    return request.client.host if request.client else "unknown"


def pct(v: Any) -> str:
    """A share as a whole percent; "–" for what is not a number (a head's metadata is anyone's JSON)."""
    share = finite_number(v)  # math.isfinite of a 400-digit integer raises: a 500 page
    return "–" if share is None else f"{100 * share:.0f}%"


def when(t: float | None) -> str:
    """A record's time of day ("" without one; "–" for a time no clock reads, e.g. 1e308 in a letter
    written by hand, which made ``localtime`` raise and the whole page a 500)."""
    if not t:
        return ""
    try:
        return time.strftime("%H:%M:%S", time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "–"


def age(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
