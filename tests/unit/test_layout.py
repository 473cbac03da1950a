"""The package boundaries, checked: what each runtime module may import, and what the wheel contains.

Read from the source (``ast``), not by importing, so the check is fast and needs no torch or Redis.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("worker", "producer")  # what the wheel ships
TOOLING = ("tools", "tests", "support", "conftest", "tinymodel")
HUGE_LINES = 1000


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> set[str]:
    """Every module ``module`` imports, anywhere in the file (lazy imports inside functions included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


GRAPH = {mod: _imports(mod, path) for package in RUNTIME for mod, path in _modules(package)}


def _top(name: str) -> str:
    return name.split(".")[0]


def _reach(start: str, graph: dict[str, set[str]]) -> set[str]:
    """Every module reachable from ``start`` through the runtime's own modules (third-party leaves)."""
    seen, todo = set(), [start]
    while todo:
        mod = todo.pop()
        for dep in graph.get(mod, ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_no_runtime_module_imports_tooling_or_tests() -> None:
    bad = {mod: sorted(d for d in deps if _top(d) in TOOLING) for mod, deps in GRAPH.items()}
    assert not {m: d for m, d in bad.items() if d}


def test_the_producer_never_imports_torch_or_the_worker() -> None:
    for mod in (m for m in GRAPH if _top(m) == "producer"):
        reached = {_top(d) for d in _reach(mod, GRAPH)}
        assert not reached & {"worker", "torch", "transformers", "numpy"}, mod


def test_the_engine_never_imports_redis_and_the_queue_never_imports_torch() -> None:
    for mod in (m for m in GRAPH if m.startswith("worker.engine")):
        reached = _reach(mod, GRAPH)
        assert not {_top(d) for d in reached} & {"redis", "rq"}, mod
        assert not [d for d in reached if _top(d) == "worker" and not d.startswith("worker.engine")], mod
    for mod in ("worker.queue", "worker.service", "worker.stage", "worker.contract", "worker.settings"):
        assert not {_top(d) for d in _reach(mod, GRAPH)} & {"torch", "transformers"}, mod


def test_no_import_cycles() -> None:
    """Modules import one way (lazy imports inside functions count too): a cycle means two modules hold
    one concept between them, or one should take a protocol instead of the other's class. Package
    ``__init__`` modules, which only gather names, are left out."""
    packages = {mod for package in RUNTIME for mod, path in _modules(package) if path.name == "__init__.py"}
    graph = {m: {d for d in deps if d in GRAPH and d not in packages} for m, deps in GRAPH.items()}
    cycles = sorted(m for m in graph if m not in packages and m in _reach(m, graph))
    assert not cycles


def test_no_module_is_huge() -> None:
    """Modules are split by concept, never to pass a line count; this only flags a file grown past what
    anyone reads in one sitting (RQ's job.py, the counter-example in STYLE.md, is 1,700)."""
    huge = {}
    for package in (*RUNTIME, "tools"):
        for mod, path in _modules(package):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > HUGE_LINES:
                huge[mod] = n
    assert not huge


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Build the wheel from a copy of the tree (tools/ and tests/ included, so leaving them out is tested)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    skip = shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "build", "dist", "out", "__pycache__", ".*cache"
    )
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for name in (*RUNTIME, "tools", "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        str(tmp),
        str(src),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = tmp.glob("ticketq-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_ships_the_runtime_only(wheel_files: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_files if not name.split("/")[0].endswith(".dist-info")}
    assert tops == set(RUNTIME)
    banned = ("tools/", "tests/", "chaos", "synthetic", "fake", "demo", "conftest", "with_redis")
    assert not [name for name in wheel_files if any(b in name for b in banned)]
    assert (
        "worker/data/sample_tickets.jsonl" in wheel_files and "worker/engine/default_task.toml" in wheel_files
    )
    scripts = {p for p in (ROOT / "worker").glob("*.lua")} | {p for p in (ROOT / "producer").glob("*.lua")}
    assert len(scripts) == 9  # every server-side script is a file, and every one ships
    assert {f"{p.parent.name}/{p.name}" for p in scripts} <= set(wheel_files)


def test_the_readme_map_names_every_module_and_nothing_else() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("### Map of the code", 1)[1].split("```", 2)[1]
    names = set(re.findall(r"\w+(?=\.py\b)|(?<=[ ,(])[a-z0-9_]+(?=[,)]|\s|$)", block))
    missing = []
    for package in (*RUNTIME, "tools"):
        for mod, path in _modules(package):
            stem = path.stem if path.name != "__init__.py" else path.parent.name
            if stem not in ("__init__", "__main__") and stem not in names and f"{stem}/" not in block:
                missing.append(mod)
    assert not missing, f"README's map of the code does not mention {missing}"
    for ref in re.findall(r"\b([a-z_]+/(?:[a-z_]+/)?[a-z0-9_]+\.py)\b", block):
        assert any((ROOT / top / ref).exists() for top in ("", "worker", "producer", "tools")), ref
