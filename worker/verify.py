"""Check the fast path against the plain item-by-item reference on the same tickets.

Runs :class:`worker.engine.reference.ReferenceScorer` (whole prompt, no cache, no batching, full
vocabulary) and the engine (prefix cache, packing, label tree, label rows only) on the same tickets,
then prints the agreement, the largest log-probability difference and every ticket whose label
differs, with the reference's top-two margin. Exit status 1 if any label differs in float32, where
the two must agree exactly; in bfloat16 near-ties may flip, and the report says how close they were.

With a head, its decisions on the engine's features are checked against the same head on features
computed the plain way (every part of its recipe). ``--question NAME`` checks that further question's
head instead (zero-shot label scoring answers the primary question only, so there is nothing else to
check for it).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

from producer import config
from producer.config import at_least, group, option
from producer.exitcodes import Exit
from producer.options import QuestionOptions
from worker.bench.data import SAMPLE, read_items
from worker.engine.options import EngineOptions


def _float32() -> EngineOptions:
    """float32: the two paths must then agree exactly; in bfloat16 near-ties may flip."""
    return EngineOptions(dtype="float32")


@dataclass(frozen=True)
class VerifyOptions:
    tickets: str = option(
        str(SAMPLE), help="JSONL or CSV (text; id optional) file", shown="the bundled sample"
    )
    limit: int = option(100, help="most tickets to check", check=at_least(1))
    engine: EngineOptions = group(_float32, "engine", env=False)
    asked: QuestionOptions = group(QuestionOptions, "question", env=False)

    def __post_init__(self) -> None:
        found = config.problems(self)
        if found:
            raise ValueError("; ".join(found))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, VerifyOptions)


def run(ns: argparse.Namespace) -> int:
    import torch

    from worker.engine.prompt import markup
    from worker.engine.reference import ReferenceScorer
    from worker.engine.task import load_task

    try:
        args = config.resolve(VerifyOptions, ns)
        options = args.engine
        question = args.asked.question
        load_task(options.task).get_question(question)  # TaskError (a ValueError) for an unknown one
        texts = [it.text for it in read_items(args.tickets)][: args.limit]
    except ValueError as exc:  # bad engine options or task, or a tickets file that cannot be used
        print(f"ticketq-worker verify: {exc}", file=sys.stderr)
        return Exit.CONFIG
    from worker.evaluate import load_asking, load_engine

    asked = None
    if question is None:
        engine = load_engine("verify", options, questions=False)
    else:
        loaded = load_asking("verify", options, question)
        if isinstance(loaded, int):
            return loaded
        engine, asked = loaded
    if isinstance(engine, int):
        return engine
    loaded, task = engine.loaded, engine.task
    # the primary task renders the prompt every question's head reads (a question's task has no examples)
    reference = ReferenceScorer(loaded.model, loaded.tokenizer, task, engine.prompt)
    print(
        f"verify: {len(texts)} tickets, model {loaded.name}, {loaded.dtype_name}, "
        f"{torch.get_num_threads()} threads"
    )
    marked = {t: m for t in texts if (m := markup(loaded.tokenizer, t)) is not None}
    if marked:
        texts = [t for t in texts if t not in marked]
        print(
            f"set aside {len(marked)} ticket{'' if len(marked) == 1 else 's'} containing the tokenizer's "
            f"special-token strings (such as {next(iter(marked.values()))!r}): the engine reads them as "
            "text, the reference as markup, so the two are not compared there"
        )
        if not texts:
            print("ticketq-worker verify: no ticket left to compare", file=sys.stderr)
            return Exit.CONFIG
    exact = loaded.dtype == torch.float32
    if asked is not None:
        print(f"question {question}: its head only (zero-shot scoring answers the primary question)")
        if _verify_head(asked, reference, texts, exact):
            return Exit.FAILED
        print("OK" if exact else "reported (bfloat16: near-ties may flip)")
        return 0

    start = time.perf_counter()
    ref = torch.tensor([reference.score_one(t) for t in _progress(texts, "reference")])
    ref_s = time.perf_counter() - start
    start = time.perf_counter()
    fast, stats = engine.logprobs(texts)
    fast_s = time.perf_counter() - start

    ref_prior, fast_prior = reference.prior(), engine.prior
    if ref_prior is not None and fast_prior is not None:  # decide as the engine does: calibrated
        ref, fast = ref - ref_prior, fast - fast_prior
    report = compare(list(task.labels), texts, ref, fast)
    padded = sum(s.padded_tokens for s in stats)
    real = sum(s.real_tokens for s in stats)
    print(f"reference: {len(texts) / ref_s:8.1f} items/s   engine: {len(texts) / fast_s:8.1f} items/s")
    print(f"engine passes: {len(stats)}, padding overhead {1 - real / padded if padded else 0:.2%}")
    print(f"agreement: {report['agree']}/{len(texts)} ({report['agreement']:.2%})")
    print(f"largest log-probability difference: {report['max_diff']:.3g}")
    for flip in report["flips"]:
        print(
            f"  differs: {flip['text']!r}: reference {flip['reference']} (margin {flip['margin']:.4f}), "
            f"engine {flip['engine']}"
        )
    failed = _failed(report, exact, 1e-4, "log-probabilities")
    if engine.head is not None:
        failed |= _verify_head(engine, reference, texts, exact)
    if failed:
        return Exit.FAILED
    print("OK" if exact else "reported (bfloat16: near-ties may flip)")
    return 0


def _failed(report: dict[str, Any], exact: bool, tolerance: float, what: str) -> bool:
    if exact and report["flips"]:
        print(f"FAIL: labels differ in float32 ({what})", file=sys.stderr)
        return True
    if exact and report["max_diff"] > tolerance:
        print(f"FAIL: {what} differ by more than {tolerance:g} in float32", file=sys.stderr)
        return True
    return False


def _verify_head(engine: Any, reference: Any, texts: list[str], exact: bool) -> bool:
    """The head's decisions from the engine's feature pass (packed, cached, stopped early) against the
    same head on features computed the plain way (whole prompt, full model, one ticket at a time)."""
    import torch

    head = engine.head
    recipe = head.recipe
    start = time.perf_counter()
    plain = torch.stack([reference.features_one(t, recipe) for t in _progress(texts, "head")])
    ref = head.log_probs(plain)
    ref_s = time.perf_counter() - start
    start = time.perf_counter()
    fast = engine.decision_logprobs(texts)[0]  # the head's log-softmax over the engine's features pass
    fast_s = time.perf_counter() - start
    report = compare(list(head.labels), texts, ref, fast)
    print(
        f"head {head.id} (recipe {recipe}): reference {len(texts) / ref_s:.1f} items/s, "
        f"engine {len(texts) / fast_s:.1f} items/s; agreement {report['agree']}/{len(texts)}, "
        f"largest log-probability difference {report['max_diff']:.3g}"
    )
    for flip in report["flips"]:
        print(f"  differs: {flip['text']!r}: reference {flip['reference']}, engine {flip['engine']}")
    return _failed(report, exact, 1e-3, "head log-probabilities")


def compare(labels: list[str], texts: list[str], ref: Any, fast: Any) -> dict[str, Any]:
    """Agreement between two (tickets, labels) log-probability tensors, with every flip's margin."""
    from worker.engine.decide import decide

    reference, engine = decide(ref), decide(fast)
    flips = [
        {"text": texts[i][:80], "reference": labels[r], "engine": labels[f], "margin": reference.margins[i]}
        for i, (r, f) in enumerate(zip(reference.best, engine.best, strict=True))
        if r != f
    ]
    agree = len(texts) - len(flips)
    return {
        "agree": agree,
        "agreement": agree / len(texts) if texts else 1.0,
        "max_diff": float((ref - fast).abs().max()) if texts else 0.0,
        "flips": flips,
    }


def _progress(items: list[str], desc: str) -> Any:
    if not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="ticket")
