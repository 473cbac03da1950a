"""The web dashboard (``ticketq-dashboard``, extra ``dashboard``): the queue live, recent results, one-click
label corrections and dead-letter replay. Reads and writes Redis only through :mod:`producer.client` and
the key names of :mod:`producer.protocol`; never imports torch or the worker."""
