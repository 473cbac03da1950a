"""Who may act, and proof that a POST came from the dashboard's own page.

Read-only unless the dashboard was started with a token or basic-auth credentials. Actions (correct a
label, replay dead letters) then need one of:

- the session cookie that ``POST /login`` sets after the token was typed in (HttpOnly, SameSite=Strict);
- HTTP basic auth, which the browser asks for at ``/login`` and then sends by itself;
- ``Authorization: Bearer <token>`` from a script.

Cookies and basic auth are sent by the browser on its own, so a POST carrying them must also carry the
CSRF token that only the dashboard's pages contain (an HMAC of the identity under a per-process key),
and an ``Origin``, when the browser sends one, of this very host. A bearer token is never sent by a
browser on its own, so it needs neither.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from starlette.requests import Request

SESSION_COOKIE = "ticketq_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class Refused(Exception):
    """An action that is not allowed: ``status`` is 401 (who are you?) or 403 (not from here / read-only)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Auth:
    token: str | None = None
    basic: tuple[str, str] | None = None  # (user, password)
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __repr__(self) -> str:  # never the secrets
        return f"Auth(token={'***' if self.token else None}, basic={'***' if self.basic else None})"

    @property
    def enabled(self) -> bool:
        """Whether actions exist at all; without credentials the dashboard is read-only."""
        return bool(self.token or self.basic)

    def _mac(self, *parts: str) -> str:
        return hmac.new(self.key, "\0".join(parts).encode(), hashlib.sha256).hexdigest()

    def session_value(self) -> str:
        """The cookie a correct token earns. Derived, so the token itself never sits in the browser."""
        return self._mac("session", self.token or "")

    def check_token(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def identity(self, request: Request) -> str | None:
        """Who is asking: ``bearer``, ``session`` or ``basic:<user>``; None when nobody proved anything."""
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
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if self.token and cookie and hmac.compare_digest(cookie, self.session_value()):
            return "session"
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
        if not given or not hmac.compare_digest(given, self.csrf_token(who)):
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
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    ok_user = hmac.compare_digest(user.encode(), expected[0].encode())
    ok_password = hmac.compare_digest(password.encode(), expected[1].encode())
    return user if sep and ok_user and ok_password else None
