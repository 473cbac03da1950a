"""Chaos testing for ticketq: a throwaway Redis, a fleet of real worker processes, and an audit.

``python -m worker.chaos`` (or ``scripts/chaos.py``) pushes tickets (good ones and malformed ones whose
reasons are known) while it SIGKILLs and SIGTERMs workers mid-batch, kills their connections from the
server side and restarts Redis, then checks the promise: every ticket ends with a result or in the
dead list with its reason, nothing stays in flight, and the workers keep serving.

Modules: :mod:`~worker.chaos.server` (redis-server on a free loopback port, AOF on),
:mod:`~worker.chaos.fleet` (worker processes), :mod:`~worker.chaos.feed` (what is pushed, and by whom),
:mod:`~worker.chaos.audit` (the verdict), :mod:`~worker.chaos.run` (the chaos loop) and
:mod:`~worker.chaos.cli` (flags and the printed summary). Standard library, redis-py and the project only.
"""
