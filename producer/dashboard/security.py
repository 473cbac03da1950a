"""Who may read and act, and proof that a POST came from the dashboard's own page.

Without credentials the dashboard is read-only, and the command line keeps it on this machine
(``--public-read-only`` to serve it further). With a token or basic-auth credentials, every page, fragment
and ``/api/*`` route needs one of (``/healthz``, ``/login`` and ``/static`` excepted):

- the session cookie that ``POST /login`` sets after the token was typed in: a random value whose hash
  the server keeps until it expires (``--session-hours``) or ``POST /logout`` revokes it (HttpOnly,
  SameSite=Strict, Secure behind HTTPS);
- HTTP basic auth, which the browser asks for at ``/login`` and then sends by itself;
- ``Authorization: Bearer <token>`` from a script.

Cookies and basic auth are sent by the browser on its own, so a POST carrying them must also carry the
CSRF token that only the dashboard's pages contain (an HMAC of the identity, per session, under a
per-process key), and an ``Origin``, when the browser sends one, of this very host. A bearer token is never
sent by a browser on its own, so it needs neither. Failed sign-ins are throttled per client.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from starlette.requests import Request

SESSION_COOKIE = "ticketq_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"
SESSION_HOURS = 12.0  # a session's lifetime from sign-in; then the token is asked again
MAX_SESSIONS = 1000  # live sessions kept; signing in beyond that ends the oldest
FAILURES_ALLOWED = 5  # failed sign-ins per client within FAILURE_WINDOW_S before it must wait
FAILURE_WINDOW_S = 300.0
MAX_CLIENTS_TRACKED = 10_000  # clients whose failures are remembered; the oldest are forgotten


class Refused(Exception):
    """A request that is not allowed: ``status`` is 4xx and ``reason`` a fixed text (never echoed input)."""

    def __init__(self, status: int, reason: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers or {}


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """Signed-in browsers, server-side: the hash of each cookie value and when it expires."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._expires: dict[str, float] = {}  # sha256 of the cookie value -> expiry (unix seconds)

    def open(self, lifetime_s: float, now: float | None = None) -> str:
        now = time.time() if now is None else now
        value = secrets.token_urlsafe(32)
        with self._lock:
            for key in [k for k, until in self._expires.items() if until <= now]:
                del self._expires[key]
            while len(self._expires) >= MAX_SESSIONS:
                del self._expires[min(self._expires, key=self._expires.__getitem__)]
            self._expires[_digest(value)] = now + lifetime_s
        return value

    def check(self, value: str, now: float | None = None) -> str | None:
        """The session's name (a prefix of its hash) while it is live, else None."""
        if not value:
            return None
        key = _digest(value)
        with self._lock:
            until = self._expires.get(key)
            if until is None:
                return None
            if until <= (time.time() if now is None else now):
                del self._expires[key]
                return None
        return key[:16]

    def close(self, value: str) -> None:
        with self._lock:
            self._expires.pop(_digest(value), None)


class Throttle:
    """Failed sign-ins per client: after :data:`FAILURES_ALLOWED` within :data:`FAILURE_WINDOW_S`, the
    client waits until the oldest failure leaves the window."""

    def __init__(self, allowed: int = FAILURES_ALLOWED, window_s: float = FAILURE_WINDOW_S) -> None:
        self.allowed = allowed
        self.window_s = window_s
        self._lock = threading.Lock()
        self._failures: dict[str, deque[float]] = {}

    def wait_s(self, client: str, now: float | None = None) -> float:
        """Seconds this client must wait before trying again; 0 when it may try now."""
        now = time.time() if now is None else now
        with self._lock:
            seen = self._failures.get(client)
            if seen is None:
                return 0.0
            while seen and seen[0] <= now - self.window_s:
                seen.popleft()
            if not seen:
                del self._failures[client]
                return 0.0
            return seen[0] + self.window_s - now if len(seen) >= self.allowed else 0.0

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            if client not in self._failures and len(self._failures) >= MAX_CLIENTS_TRACKED:
                del self._failures[next(iter(self._failures))]
            self._failures.setdefault(client, deque(maxlen=self.allowed)).append(now)


@dataclass(frozen=True)
class Auth:
    token: str | None = None
    basic: tuple[str, str] | None = None  # (user, password)
    session_s: float = SESSION_HOURS * 3600
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    sessions: Sessions = field(default_factory=Sessions, repr=False, compare=False)
    throttle: Throttle = field(default_factory=Throttle, repr=False, compare=False)

    def __repr__(self) -> str:  # never the secrets
        return f"Auth(token={'***' if self.token else None}, basic={'***' if self.basic else None})"

    @property
    def enabled(self) -> bool:
        """Whether sign-in exists at all; without credentials the dashboard is read-only."""
        return bool(self.token or self.basic)

    def _mac(self, *parts: str) -> str:
        return hmac.new(self.key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def check_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(
            given.encode("utf-8", "replace"), self.token.encode()
        )

    def identity(self, request: Request) -> str | None:
        """Who is asking: ``bearer``, ``session:<name>`` or ``basic:<user>``; None when nobody proved
        anything. Never raises on malformed headers or cookies."""
        if not self.enabled:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.token and scheme.lower() == "bearer" and self.check_token(value.strip()):
            return "bearer"
        if self.basic and scheme.lower() == "basic":
            user = _basic_user(value.strip(), self.basic)
            if user is not None:
                return f"basic:{user}"
        if self.token:
            name = self.sessions.check(request.cookies.get(SESSION_COOKIE, ""))
            if name is not None:
                return f"session:{name}"
        return None

    def csrf_token(self, identity: str | None) -> str:
        return self._mac("csrf", identity) if identity else ""

    def check_action(self, request: Request, form_token: str | None) -> str:
        """The identity allowed to act, or :class:`Refused` saying why not."""
        if not self.enabled:
            raise Refused(403, "read-only: start ticketq-dashboard with --token or --basic-auth to act")
        who = self.identity(request)
        if who is None:
            raise Refused(401, "sign in first")
        if who == "bearer":
            return who
        check_origin(request)
        given = form_token or request.headers.get(CSRF_HEADER, "")
        expected = self.csrf_token(who).encode()
        if not given or not hmac.compare_digest(given.encode("utf-8", "replace"), expected):
            raise Refused(403, "missing or stale CSRF token: reload the page")
        return who


def check_origin(request: Request) -> None:
    """A cross-site POST carries its own site in Origin; refuse anything but this host."""
    origin = request.headers.get("origin")
    if origin is None or (origin == "null" and request.headers.get("sec-fetch-site") == "same-origin"):
        return
    host = request.headers.get("host", "")
    if origin.split("://", 1)[-1] != host:
        raise Refused(403, "cross-site request refused")


def _basic_user(value: str, expected: tuple[str, str]) -> str | None:
    try:  # non-ASCII (ValueError), bad base64 (binascii.Error, a ValueError) or not UTF-8: nobody
        user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
    except ValueError:
        return None
    ok_user = hmac.compare_digest(user.encode(), expected[0].encode())
    ok_password = hmac.compare_digest(password.encode(), expected[1].encode())
    return user if sep and ok_user and ok_password else None
