"""The throughput benchmark, ``ticketq-worker bench`` (see :mod:`worker.bench.cli`)."""
