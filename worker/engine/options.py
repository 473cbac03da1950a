"""Every engine default, in one place, and the flags that set them. No torch: checking flags is cheap.

:class:`EngineOptions` is what every command that runs the engine takes (``run``, ``verify``, ``eval``,
``bench``, ``train``); the worker's :class:`~worker.settings.Settings` embeds one as ``settings.engine``.
:func:`add_engine_arguments` turns it into flags whose help texts are generated from the defaults, so a
default is written once, here. A command that wants another default (``verify`` checks in float32) passes
its own ``EngineOptions`` as the defaults, and its help says so.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace

EMBEDDED = "smollm2"  # the model that ships with ticketq (see worker.engine.model)
DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda", "mps")
NO_HEAD = "none"  # --head none / TICKETQ_HEAD=none: zero-shot label scoring even when the task ships a head


def is_no_head(spec: str | None) -> bool:
    """``--head none`` (any case): decide by zero-shot label scoring."""
    return spec is not None and spec.strip().lower() == NO_HEAD


@dataclass(frozen=True)
class EngineOptions:
    model: str = EMBEDDED
    task: str | None = None  # task TOML; None: the built-in support-ticket task
    dtype: str = "auto"
    device: str = "auto"
    threads: int | None = None  # torch CPU threads; None: worker/engine/threads.py's rule
    batch_size: int = 32  # most tickets in one forward pass
    max_batch_tokens: int = 8192  # token budget of one pass (rows x row length)
    max_row_len: int = 128  # packing: widest row (attention within a row grows with its width)
    max_ticket_tokens: int = 512  # longer tickets keep their first tokens
    head: str | None = None  # trained head file; "none": zero-shot; None: the task's head, if it has one

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        checks = [
            (bool(self.model), "model: empty"),
            (self.dtype in DTYPES, f"dtype: one of {', '.join(DTYPES)}"),
            (_device_ok(self.device), f"device: one of {', '.join(DEVICES)} (or cuda:N)"),
            (self.threads is None or self.threads >= 1, "threads: must be >= 1"),
            (self.batch_size >= 1, "batch-size: must be >= 1"),
            (self.max_batch_tokens >= 64, "max-batch-tokens: must be >= 64"),
            (self.max_row_len >= 16, "max-row-len: must be >= 16"),
            (self.max_ticket_tokens >= 1, "max-ticket-tokens: must be >= 1"),
        ]
        return [problem for ok, problem in checks if not ok]

    @classmethod
    def from_args(cls, args: argparse.Namespace, defaults: EngineOptions | None = None) -> EngineOptions:
        """The flags :func:`add_engine_arguments` added, over ``defaults``. Raises ``ValueError``."""
        given = {name: getattr(args, name, None) for name in FLAGS}
        return replace(defaults or cls(), **{k: v for k, v in given.items() if v is not None})

    def to_flags(self) -> list[str]:
        """The flags that give a worker process these options (those that are set)."""
        out: list[str] = []
        for name in FLAGS:
            value = getattr(self, name)
            if value is not None:
                out += ["--" + name.replace("_", "-"), str(value)]
        return out


def _device_ok(device: str) -> bool:
    name, _, index = device.partition(":")
    return name in DEVICES and (not index or (name == "cuda" and index.isdigit()))


# field -> (type, help). The flag is the field's name with dashes: batch_size -> --batch-size.
FLAGS: dict[str, tuple[type, str]] = {
    "model": (str, "the embedded model's name, a .gguf file, a directory or a Hugging Face id"),
    "task": (str, "task TOML: labels, instructions, examples, routes"),
    "dtype": (
        str,
        "auto (measured once per machine and model: the fastest that agrees with float32), float32, "
        "bfloat16, float16, int8 (opt-in: dynamic int8 linear layers, CPU)",
    ),
    "device": (str, "auto, cpu, cuda, mps"),
    "threads": (int, "torch CPU threads"),
    "batch_size": (int, "most tickets in one forward pass"),
    "max_batch_tokens": (int, "token budget of one forward pass (rows x row length)"),
    "max_row_len": (int, "widest packed row, in tokens"),
    "max_ticket_tokens": (int, "longer tickets keep their first tokens"),
    "head": (str, "trained head file (ticketq-worker train) deciding labels; 'none': zero-shot scoring"),
}
# What a None default means, for the help text.
_NONE = {
    "task": "the built-in support-ticket task",
    "threads": "all usable cores up to 4, then 4 or 8 per process (worker/engine/threads.py)",
    "head": "the task's own (the built-in task trains one on first use), else zero-shot",
}


def add_engine_arguments(
    parser: argparse.ArgumentParser,
    defaults: EngineOptions | None = None,
    *,
    env: bool = False,
) -> None:
    """Add a flag per engine option, its help ending with the default taken from ``defaults``.

    With ``env`` (the worker's ``run``) every flag defaults to ``None`` so that the caller can tell "not
    given" and fall back to the ``TICKETQ_<NAME>`` variable the help names."""
    base = defaults or EngineOptions()
    group = parser.add_argument_group("engine")
    for f in fields(EngineOptions):
        if f.name not in FLAGS:
            continue
        kind, text = FLAGS[f.name]
        value = getattr(base, f.name)
        shown = _NONE.get(f.name, "none") if value is None else value
        help_text = f"{text} (default {shown})"
        if env:
            help_text += f" [env TICKETQ_{f.name.upper()}]"
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=kind,
            default=None if env else value,
            help=help_text,
        )
