"""``python -m tools.chaos``: see :mod:`tools.chaos.cli`."""

from tools.chaos.cli import main

raise SystemExit(main())
