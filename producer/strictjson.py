"""Strict JSON and text: the parser every payload goes through, the encoder of every record written.

Stricter than ``json`` where other languages would read the same bytes differently, or where a record built
from them could not be written back as strict JSON (each rule is in the README's wire protocol).
The character rules of ids and texts live here too. Standard library only, like :mod:`producer.protocol`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any

MAX_PAYLOAD_BYTES = 64 * 1024  # checked before JSON parsing, so a 10 MB payload is refused undecoded
MAX_DEPTH = 32  # levels of nesting a payload may have ({"id": .., "x": [..]} is 2)
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how a lone surrogate can get into valid UTF-8 JSON
TEXT_CONTROLS = frozenset({"\t", "\n", "\r"})
# Characters an id may not hold: they reorder (bidi overrides: the "Trojan Source" trick), hide, or break
# (line and paragraph separators) what a person reads in a log line or on the dashboard.
_ID_FORBIDDEN = {
    **{chr(c): "bidi control" for c in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F))},
    **{chr(c): "bidi control" for c in range(0x2066, 0x206A)},
    "\u2028": "line separator",
    "\u2029": "paragraph separator",
    "\ufeff": "byte-order mark",
    "\u200b": "zero-width space",
}


class BadTicket(ValueError):
    """A payload that can never be classified. It is dead-lettered with ``reason``; never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def encodable(value: str) -> bool:
    """Whether ``value`` can be written as UTF-8: no lone surrogate (from undecodable bytes in an
    argument or environment variable, or a ``\\ud800`` escape in JSON)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def may_hold_surrogate(raw: bytes | str) -> bool:
    """Whether JSON text has a ``\\ud800``-style escape, the one way a lone surrogate gets into valid UTF-8
    JSON (a pair is fine; the caller checks what it decoded)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return _SURROGATE_ESCAPE.search(text) is not None


def loads_strict(raw: bytes) -> Any:
    """Parse a payload the way every ticketq reader must, or raise :class:`BadTicket` with the reason.

    Stricter than ``json.loads`` where other languages would read the bytes differently or a record built
    from them could not be written back as strict JSON (each rule is in the README's wire protocol):
    no byte-order mark, UTF-8 only, no ``NaN``/``Infinity``, no number that overflows (``1e999``, an
    integer outside 64 bits), no duplicate keys, at most :data:`MAX_DEPTH` levels of nesting, and no lone
    surrogate (a ``\\ud800`` escape) in any key or string at any depth.

    Linear in the payload's size: ``json``'s C scanner parses it (deeper nesting than Python's recursion
    limit raises ``RecursionError`` there, refused as too deep), then iterative walks check its depth and
    its strings. No pass may restart a scan per quote: a regex that skipped strings before parsing took 25 s
    on a 64 KiB payload of escaped quotes (``"\\"\\"...``), holding the GIL.
    """
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise BadTicket(f"payload too large: {len(raw)} bytes > {MAX_PAYLOAD_BYTES}")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise BadTicket("byte-order mark before the JSON: send UTF-8 without one (RFC 8259, section 8.1)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadTicket(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        obj = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:  # deeper than Python's recursion limit, so far deeper than MAX_DEPTH
        raise BadTicket(f"nested too deeply: more than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        if isinstance(exc, BadTicket):
            raise
        raise BadTicket(f"not JSON: {exc}") from None
    _check_depth(obj)
    if _SURROGATE_ESCAPE.search(text):  # UTF-8 cannot encode one: only an escape can put one in a string
        _check_strings(obj)
    return obj


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float when it is a JSON number that is one, else None; never raises. For
    numbers read from records that bypassed :func:`loads_strict` (an integer of 400 digits is a JSON
    number, and ``float`` of it raises OverflowError: it once killed a worker's queue gauge)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _refuse_constant(name: str) -> Any:
    raise BadTicket(f"not strict JSON: {name} is not a JSON number")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) <= 19:
        value = int(digits)
        if _INT_MIN <= value <= _INT_MAX:
            return value
    raise BadTicket(f"number out of range: {_shown(digits, 24)} (integers must fit in 64 bits)")


def _finite_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise BadTicket(f"number out of range: {_shown(digits, 24)} overflows a 64-bit float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadTicket(f"duplicate key: {_shown(key)}")
            seen.add(key)
    return out


def _check_depth(obj: Any) -> None:
    """Nesting depth of a parsed payload (a list or object is one level more than what holds it), counted
    without recursion: at most :data:`MAX_DEPTH`."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise BadTicket(f"nested too deeply: more than {MAX_DEPTH} levels")
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))


def _check_strings(obj: Any) -> None:
    """Every key and string, at any depth: a lone surrogate cannot be written as UTF-8 (iterative walk)."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            _no_surrogate(value, path or "payload")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = _shown(key)
                _no_surrogate(key, f"a key in {path}" if path else "a key")
                top = name if name in ("id", "text") else f"field {name}"
                stack.append((item, f"{path}.{name}" if path else top))
        elif isinstance(value, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(value))


def _no_surrogate(value: str, where: str) -> None:
    for ch in value:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise BadTicket(f"lone surrogate U+{ord(ch):04X} in {where}")


def _shown(value: str, most: int = 40) -> str:
    """A name or number for a reason: printable characters as they are, others escaped, bounded."""
    out = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in value[:most])
    return out + ("..." if len(value) > most else "")


def clean(value: str) -> str:
    """``value`` with lone surrogates replaced by U+FFFD: what a record that must always be written
    (a dead letter, an event) does with text that came from a payload or an exception."""
    return _SURROGATE.sub("\ufffd", value)


class Unwritable(ValueError):
    """A record that is not strict JSON in UTF-8 (NaN, a lone surrogate, too deep): never sent to Redis."""


def dumps_strict(obj: Any) -> str:
    """The one JSON encoder of records ticketq writes: strict JSON that encodes as UTF-8, or
    :class:`Unwritable`. Checked before the transaction that writes it, so one bad record cannot fail it."""
    try:
        out = json.dumps(obj, ensure_ascii=False, allow_nan=False)
        out.encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        raise Unwritable(_shown(f"{type(exc).__name__}: {exc}", 200)) from None
    return out


def digits(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes "²" and other digits that ``int`` refuses."""
    return text.isascii() and text.isdigit()


def count(text: str, most_digits: int = 18) -> int | None:
    """``text`` as a non-negative integer when it is ASCII digits, at most ``most_digits`` of them; else
    None. ``int`` of 5,000 digits raises ValueError (Python's limit is 4,300): from a URL or a key written
    by hand, that was a 500 page."""
    return int(text) if digits(text) and len(text) <= most_digits else None


def check_chars(value: str, name: str, allowed: frozenset[str]) -> None:
    for ch in value:
        code = ord(ch)
        if (code < 32 or 127 <= code <= 159) and ch not in allowed:
            raise BadTicket(f"control character U+{code:04X} in {name}")
        if 0xD800 <= code <= 0xDFFF:
            raise BadTicket(f"lone surrogate U+{code:04X} in {name}")


def check_id_chars(value: str) -> None:
    """No invisible format character (Unicode category Cf) in an id: "T-1" and "T-\u200d1" look the same
    in logs and on the dashboard, which lets a producer squat a look-alike of another's id (an audit
    found 149 such characters accepted besides the ones named in ``_ID_FORBIDDEN``)."""
    for ch in value:
        if ch in _ID_FORBIDDEN:
            raise BadTicket(f"format character U+{ord(ch):04X} in id ({_ID_FORBIDDEN[ch]})")
        if unicodedata.category(ch) == "Cf":
            raise BadTicket(f"format character U+{ord(ch):04X} in id (invisible)")
