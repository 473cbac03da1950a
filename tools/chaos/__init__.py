"""Chaos testing for ticketq: a throwaway Redis, a fleet of real worker processes, and an audit.

``python -m tools.chaos`` pushes tickets (good ones and malformed ones whose
reasons are known) while it SIGKILLs and SIGTERMs workers mid-batch, kills their connections from the
server side and restarts Redis, then checks the promise: every ticket ends with a result or in the
dead list with its reason, nothing stays in flight, and the workers keep serving.

Modules: :mod:`~tools.redis_server` (redis-server on a free loopback port, AOF on),
:mod:`~tools.chaos.fleet` (worker processes), :mod:`~tools.chaos.feed` (what is pushed, and by whom),
:mod:`~tools.chaos.audit` (the verdict), :mod:`~tools.chaos.run` (the chaos loop) and
:mod:`~tools.chaos.cli` (flags and the printed summary). Standard library, redis-py and the project only.
"""
