"""Every setting declared once: a dataclass field carrying its type, default, help, variable and rule.

A command's settings are a frozen dataclass whose fields are made with :func:`setting`; a field made with
:func:`group` embeds another such dataclass (the worker's settings embed the engine's). From that one
declaration come:

- the flags (:func:`add_arguments`): ``--name-with-dashes``, its type from the annotation, its help ending
  with the default (generated, never typed by hand) and the ``TICKETQ_*`` variable it falls back to;
- the values (:func:`resolve`): a flag given on the command line wins over the variable, which wins over
  the default; a variable that cannot be read is a :class:`SettingError` naming the flag;
- the checks (:func:`problems`): choices and ranges, as one-line messages naming the flag, for the
  dataclass's ``__post_init__`` to raise (cross-field rules stay in the class);
- the README's flag tables (:func:`markdown`), which ``tests/unit/test_config.py`` compares with README.md.

Why argparse and not click or pydantic-settings: the light package (what a producer installs) depends on
redis and structlog only; argparse is in the standard library and already builds every command's parser,
sub-commands included. click's ``envvar=`` would replace all of them and still leave the checks and the
README tables to us; pydantic-settings brings pydantic and its compiled core into every producer's
environment for what is here about 200 lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
from typing import Any, TypeVar

ENV_PREFIX = "TICKETQ_"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
_SPEC = "ticketq.setting"
_GROUP = "ticketq.group"
_GIVEN = "_given_"  # namespace attribute prefix: this flag was on the command line

T = TypeVar("T")


class SettingError(ValueError):
    """A value that cannot be read (a variable that is not a number, say); the message names the flag."""


@dataclass(frozen=True)
class Check:
    """A rule a value must follow (``None``, "not set", always passes), and how to say it."""

    ok: Callable[[Any], bool]
    rule: str  # "must be 1..100000"


def between(lo: float, hi: float, note: str = "") -> Check:
    return Check(lambda v: lo <= v <= hi, f"must be {_num(lo)}..{_num(hi)}" + (f" {note}" if note else ""))


def at_least(lo: float, note: str = "") -> Check:
    return Check(lambda v: v >= lo, f"must be >= {_num(lo)}" + (f" {note}" if note else ""))


@dataclass(frozen=True)
class Spec:
    """What a field declares beyond its type and default."""

    help: str
    flag: str  # without the dashes
    env: str | None  # the variable; None: flags only
    shown: str  # the default as the help and README show it; "": the value itself
    choices: tuple[str, ...]
    check: Check | None
    metavar: str | None
    repeat: Callable[[list[str]], Any] | None  # repeatable flag: its values -> the setting


def setting(
    default: Any = MISSING,
    *,
    help: str,
    default_factory: Callable[[], Any] | Any = MISSING,
    flag: str = "",
    env: str | bool = True,
    shown: str = "",
    choices: Sequence[str] = (),
    check: Check | None = None,
    metavar: str | None = None,
    repeat: Callable[[list[str]], Any] | None = None,
) -> Any:
    """A dataclass field that is a setting. ``flag`` defaults to the field name with dashes; ``env`` to
    ``TICKETQ_`` + the flag in capitals (a string names another variable, ``False`` reads none);
    ``shown`` is how the help shows a default whose value would mislead (``None``, computed ones);
    ``repeat`` makes the flag repeatable (the variable then holds a comma-separated list) and turns the
    list of values into the setting."""
    spec = {
        "help": help,
        "flag": flag,
        "env": env,
        "shown": shown,
        "choices": tuple(choices),
        "check": check,
        "metavar": metavar,
        "repeat": repeat,
    }
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata={_SPEC: spec})
    return field(default=default, metadata={_SPEC: spec})


def group(default_factory: Callable[[], Any], title: str) -> Any:
    """A field holding another settings dataclass; its flags are added as an argument group."""
    return field(default_factory=default_factory, metadata={_GROUP: title})


@dataclass(frozen=True)
class Declared:
    name: str  # the field
    kind: type  # str, int, float or bool (the annotation without ``| None``)
    spec: Spec
    default: Any  # the value a fresh instance has (a default_factory's is called)

    @property
    def option(self) -> str:
        return "--" + self.spec.flag

    def shown(self) -> str:
        if self.spec.shown:
            return self.spec.shown
        return show(self.default)


def declared(cls: type, defaults: Any = None, *, nested: bool = True) -> list[Declared]:
    """The settings of ``cls`` in declaration order, its groups' flattened in (``nested=False``: its
    own only); ``defaults`` (an instance) supplies other defaults (``verify`` runs in float32)."""
    hints = typing.get_type_hints(cls)
    base = defaults if defaults is not None else cls()
    out: list[Declared] = []
    for f in dataclasses.fields(cls):
        if _GROUP in f.metadata and nested:
            out += declared(_kind(hints[f.name]), getattr(base, f.name))
        elif _SPEC in f.metadata:
            raw = dict(f.metadata[_SPEC])
            raw["flag"] = raw["flag"] or f.name.replace("_", "-")
            env = raw["env"]
            raw["env"] = None if env is False else env if isinstance(env, str) else _env_name(raw["flag"])
            out.append(Declared(f.name, _kind(hints[f.name]), Spec(**raw), getattr(base, f.name)))
    return out


def _groups(cls: type) -> list[tuple[str, str, type]]:
    """(field, title, class) of each group field of ``cls``."""
    hints = typing.get_type_hints(cls)
    return [
        (f.name, f.metadata[_GROUP], _kind(hints[f.name]))
        for f in dataclasses.fields(cls)
        if _GROUP in f.metadata
    ]


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    defaults: Any = None,
    *,
    env: bool = True,
) -> None:
    """A flag per setting of ``cls`` (and of its groups, each in an argument group). ``env=False``: the
    command reads no variables (:func:`resolve` is then called without ``environ``) and the help names
    none. The namespace holds the defaults; :func:`resolve` layers the variables over them."""
    base = defaults if defaults is not None else cls()
    for d in declared(cls, base, nested=False):
        _add(parser, d, env)
    for name, title, kind in _groups(cls):
        target = parser.add_argument_group(title) if isinstance(parser, argparse.ArgumentParser) else parser
        add_arguments(target, kind, getattr(base, name), env=env)


def resolve(cls: type[T], args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> T:
    """The settings: a flag given wins, then its variable in ``environ`` (``None``: none read), then the
    default. Raises :class:`SettingError` for a variable that cannot be read, and whatever the class's own
    checks raise (``ValueError`` or a subclass) for a value it refuses."""
    values: dict[str, Any] = {name: resolve(kind, args, environ) for name, _, kind in _groups(cls)}
    for d in declared(cls, nested=False):
        raw = environ.get(d.spec.env) if environ is not None and d.spec.env else None
        given = getattr(args, _GIVEN + d.name, False)
        try:
            if given or (raw in (None, "") and hasattr(args, d.name)):
                value = getattr(args, d.name)
                if d.spec.repeat is not None:
                    value = d.spec.repeat(list(value or []))
                values[d.name] = value
            elif raw not in (None, ""):
                values[d.name] = from_text(d, raw)
        except ValueError as exc:
            raise SettingError(f"{d.spec.flag}: {exc}") from None
    return cls(**values)


def problems(obj: Any) -> list[str]:
    """The declared rules ``obj`` breaks (choices and checks of its own fields, not its groups'), one
    message each, naming the flag."""
    out = []
    for d in declared(type(obj), obj, nested=False):
        if d.default is None:
            continue
        if d.spec.choices and d.default not in d.spec.choices:
            out.append(f"{d.spec.flag}: one of {', '.join(d.spec.choices)}")
        elif d.spec.check is not None and not d.spec.check.ok(d.default):
            out.append(f"{d.spec.flag}: {d.spec.check.rule}")
    return out


def from_text(d: Declared, raw: str) -> Any:
    """A variable's text as the setting's type (a repeatable setting's: a comma-separated list)."""
    if d.spec.repeat is not None:
        return d.spec.repeat([p.strip() for p in raw.split(",") if p.strip()])
    if d.kind is bool:
        word = raw.strip().lower()
        if word in TRUE_WORDS or word in FALSE_WORDS:
            return word in TRUE_WORDS
        raise ValueError(f"not a boolean: {raw!r} (use one of {', '.join(TRUE_WORDS + FALSE_WORDS)})")
    return d.kind(raw)


def env_flag(name: str) -> bool:
    """A boolean variable outside any settings class: 1, true, yes or on (any case) is true."""
    return os.environ.get(name, "").strip().lower() in TRUE_WORDS


def show(value: Any) -> str:
    """A default as the help shows it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == ():
        return "none"
    if isinstance(value, float):
        return _num(value)
    return str(value)


def help_text(d: Declared, env: bool = True) -> str:
    text = f"{d.spec.help} (default {d.shown()})"
    if env and d.spec.env:
        text += f" [env {d.spec.env}]"
    return text


def markdown(cls: type, defaults: Any = None, *, env: bool = True) -> str:
    """The README table of ``cls``'s settings: flag, variable, default, what."""
    head = "| flag | environment | default | what |" if env else "| flag | default | what |"
    rows = [head, "|---|---|---|---|" if env else "|---|---|---|"]
    for d in declared(cls, defaults):
        flag = f"`{d.option}{' ' + d.spec.metavar if d.spec.metavar else ''}`"
        shown = d.shown() if d.spec.shown or not isinstance(d.default, str) else f"`{d.default}`"
        what = d.spec.help.replace("|", "\\|")
        if env:
            var = f"`{d.spec.env}`" if d.spec.env else ""
            rows.append(f"| {flag} | {var} | {shown} | {what} |")
        else:
            rows.append(f"| {flag} | {shown} | {what} |")
    return "\n".join(rows)


def _add(parser: argparse.ArgumentParser | argparse._ArgumentGroup, d: Declared, env: bool) -> None:
    text = help_text(d, env).replace("%", "%%")
    metavar = d.spec.metavar or ("{" + ",".join(d.spec.choices) + "}" if d.spec.choices else None)
    if metavar is None and d.kind in (int, float):
        metavar = "N"
    if d.kind is bool and d.spec.repeat is None:
        parser.add_argument(d.option, dest=d.name, action=_StoreTrue, default=d.default, help=text)
    elif d.spec.repeat is not None:
        parser.add_argument(d.option, dest=d.name, action=_Append, default=None, metavar=metavar, help=text)
    else:
        parser.add_argument(
            d.option, dest=d.name, action=_Store, type=d.kind, default=d.default, metavar=metavar, help=text
        )


def _marking(base: type[argparse.Action]) -> type[argparse.Action]:
    """``base`` that also records, on the namespace, that its flag was given (so a variable does not win
    over a flag that happens to repeat the default)."""

    class Marked(base):  # type: ignore[valid-type,misc]
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            super().__call__(parser, namespace, values, option_string)
            setattr(namespace, _GIVEN + self.dest, True)

    return Marked


_Store = _marking(argparse._StoreAction)
_StoreTrue = _marking(argparse._StoreTrueAction)
_Append = _marking(argparse._AppendAction)


def _kind(hint: Any) -> type:
    """``int | None`` -> int; ``tuple[...]`` -> tuple."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _kind(args[0])
    origin = typing.get_origin(hint)
    return origin if isinstance(origin, type) else hint


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.upper().replace("-", "_")


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
