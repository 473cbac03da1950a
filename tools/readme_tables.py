"""README.md's generated tables: ``python -m tools.readme_tables`` rewrites them, the tests compare them.

A table is generated between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; NAME is one of
:data:`TABLES`. Everything else in README.md is written by hand.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from producer import config

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(<!-- generated: ([\w .-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _worker_run() -> str:
    from worker.settings import Settings

    return config.markdown(Settings)


TABLES: dict[str, Callable[[], str]] = {
    "worker run flags": _worker_run,
}


def render(text: str) -> str:
    """``text`` with every generated table regenerated; an unknown NAME raises ``KeyError``."""
    return BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + "\n" + m.group(4), text)


def names(text: str) -> list[str]:
    return [m.group(2) for m in BLOCK.finditer(text)]


def main() -> int:
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if new != text:
        README.write_text(new, encoding="utf-8")
        print(f"rewrote {', '.join(names(text))} in {README}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
