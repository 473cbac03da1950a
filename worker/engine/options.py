"""Every engine default, in one place, declared with its flag, help and variable. No torch: cheap to check.

:class:`EngineOptions` is what every command that runs the engine takes (``run``, ``verify``, ``eval``,
``bench``, ``train``); the worker's :class:`~worker.settings.Settings` embeds one as ``settings.engine``.
Its flags come from :mod:`producer.config` (``add_arguments(parser, EngineOptions)``), help texts and
defaults from the declarations below. A command that wants another default (``verify`` checks in
float32) passes its own ``EngineOptions`` as the defaults, and its help says so.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from producer.config import Check, at_least, problems, setting

EMBEDDED = "smollm2"  # the model that ships with ticketq (see worker.engine.model)
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
DEVICES = ("auto", "cpu", "cuda", "mps")
NO_HEAD = "none"  # --head none / TICKETQ_HEAD=none: zero-shot label scoring even when the task ships a head


def is_no_head(spec: str | None) -> bool:
    """``--head none`` (any case): decide by zero-shot label scoring."""
    return spec is not None and spec.strip().lower() == NO_HEAD


def _device_ok(device: str) -> bool:
    name, _, index = device.partition(":")
    return name in DEVICES and (not index or (name == "cuda" and index.isdigit()))


@dataclass(frozen=True)
class EngineOptions:
    model: str = setting(
        EMBEDDED,
        help="the embedded model, a `.gguf` file, a local directory or a Hugging Face id",
        check=Check(bool, "must not be empty"),
    )
    task: str | None = setting(
        None,
        help="task TOML: labels, instructions, question, examples, routes",
        shown="the built-in support-ticket task",
    )
    dtype: str = setting(
        "auto",
        help="`auto`: measured at the first start on this machine (one timed pass per candidate: float32 and "
        "bfloat16 on a CPU, float32/float16/bfloat16 on a GPU), the fastest that decides as float32 does on "
        "the task's calibration tickets: the same zero-shot labels, or, where trained heads answer every "
        "question, the features they read within 10% of float32's (timed on their features pass); cached "
        "in `~/.cache/ticketq/dtype/`. Or `float32`, `bfloat16`, "
        "`float16`, `int8` (opt-in, CPU: dynamic int8 linear layers; flips many labels on SmolLM2, see "
        "docs/bench.md)",
        choices=DTYPES,
    )
    device: str = setting(
        "auto",
        help="`auto` (CUDA when present), `cpu`, `cuda` (or `cuda:N`), `mps`",
        check=Check(_device_ok, f"one of {', '.join(DEVICES)} (or cuda:N)"),
    )
    threads: int | None = setting(
        None,
        help="torch CPU threads; by default all usable cores up to 4, then processes of 4 (5-16 cores) or 8 "
        "(17-64) threads each (`worker/engine/threads.py`; `worker_start` logs the choice and the suggested "
        "process count)",
        shown="the rule",
        check=at_least(1),
    )
    batch_size: int = setting(
        32, help="most tickets in one forward pass (`1`: item by item)", check=at_least(1)
    )
    max_batch_tokens: int = setting(
        8192,
        help="token budget of one forward pass (rows x row length; a ticket longer than it runs alone)",
        check=at_least(64),
    )
    max_row_len: int = setting(
        128,
        help="widest packed row, in tokens (attention within a row grows with its width)",
        check=at_least(16),
    )
    max_ticket_tokens: int = setting(512, help="longer tickets keep their first tokens", check=at_least(1))
    head: str | None = setting(
        None,
        help="trained head file (`ticketq-worker train`) deciding labels; `none`: zero-shot label scoring",
        shown="the task's own (the built-in task trains one on first use), else zero-shot",
    )

    def __post_init__(self) -> None:
        found = problems(self)
        if found:
            raise ValueError("; ".join(found))

    def to_flags(self) -> list[str]:
        """The flags that give a worker process these options (those that are set)."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out += ["--" + f.name.replace("_", "-"), str(value)]
        return out
