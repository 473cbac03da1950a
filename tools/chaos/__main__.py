"""``python -m worker.chaos``: see :mod:`worker.chaos.cli`."""

from worker.chaos.cli import main

raise SystemExit(main())
