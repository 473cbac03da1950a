"""``python -m worker`` is ``ticketq-worker``."""

from worker.cli import main

raise SystemExit(main())
