"""Benchmark the engine against its baselines and end to end through Redis, all in one run.

Modes, in the order they run (``--modes`` picks a subset):

=================  ===========================================================================
naive              item by item, the whole prompt once per label, full-vocabulary logits
per-item           item by item, constrained label scoring, no prefix cache (published baseline)
bucketed           length-sorted batches of 32, padded, no prefix cache (published method)
per-item-cached    item by item with the prefix cache
engine             the default engine: packed rows, prefix cache, label tree
end-to-end         the real worker service through Redis, from first push to last result
=================  ===========================================================================

All modes share one loaded model, dtype and thread count. The machine may be shared: for every mode the
bench measures the share of CPU other processes took meanwhile (``others``), and a mode they disturbed
is run again once the machine is quiet (``--noise-limit``, ``--retries``), keeping the quietest run.
``naive`` and ``per-item`` run on a length-stratified subset (``--baseline-n``); items/s stays comparable
and agreement is computed on the tickets both modes ran.

    ticketq-worker bench --json docs/bench.json --plot docs/bench.png
    ticketq-worker bench --modes engine,end-to-end --workers 1,2
"""

from worker.bench.cli import add_arguments, run

__all__ = ["add_arguments", "run"]
