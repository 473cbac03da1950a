"""ticketq's worker: the Redis service around the classification engine."""
