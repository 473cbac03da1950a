"""``python -m producer`` is ``ticketq-producer``."""

from producer.cli import main

raise SystemExit(main())
