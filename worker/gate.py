"""The publish gate: a head trained from corrections is published only if it is not worse than the head the
workers use now, judged on the same held-out evidence.

The evidence is the training set of the candidate (the task's base data plus the corrections, a correction
replacing the base row with its id). Both heads are judged out of fold on it, on the same folds: the
candidate by heads fitted on the other folds (what cross-validation does anyway), the current head by heads
fitted with *its* training rows from the other folds (its base data and the corrections it was trained on,
as recorded in its file), so neither is flattered by rows it learnt. A current head whose training rows are
not known (a head file, or one published by an older ticketq) is judged by its own predictions (``direct``):
honest on the rows it never saw, flattered on those it did, so the gate errs towards refusing.

Refused when the candidate's out-of-fold accuracy is more than :data:`MARGIN` below the current head's, or
when it loses a class: recall at most :data:`LOST_RECALL` where the current head had at least
:data:`HAD_RECALL`, on a label with :data:`LOST_MIN_TICKETS` tickets or more in the evidence (on fewer, one
ticket decides). ``--force`` publishes anyway. The comparison travels with the published head (its
``training["gate"]`` and its ``P:heads`` entry), for the dashboard and ``ticketq-producer heads``.

Each side is refitted by the procedure its head was trained by: the label names where it learnt them, and
self-training on the candidate's unlabelled tickets where it self-trained (the same tickets for both sides,
their labels never read), so a head that self-trains is judged as it ships. A candidate whose training ran
that very procedure out of fold on these folds (``train``'s check of its extras) is judged by those
predictions rather than refitted again.

A head with a nonlinear second reading (:mod:`worker.engine.mlp`) is judged, on either side, by its
linear reading refitted per fold: the MLP is fitted twice per head (on four fifths to be judged on the
fifth left out, then on everything), not once per fold, which would add minutes per fold; ``train`` kept
it only where the blend was no less accurate than the linear reading on that fifth. A current head that
is judged ``direct`` is judged by what it ships, the blend included; one refitted per fold whose
candidate has no MLP (a head published through Redis cannot carry one) is refused (:func:`mlp_lost`):
the comparison of linear readings cannot see what the MLP added.

The verdict is plain Python (testable without torch); :func:`worker.engine.beyond.cross_refit` runs the fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from producer.strictjson import finite_number

if TYPE_CHECKING:
    import torch

    from worker.engine.head import OutOfFold

MARGIN = 0.01  # overall out-of-fold accuracy the candidate may lose and still be published (noise)
LOST_RECALL = 0.1  # a class the candidate recalls this little or less ...
HAD_RECALL = 0.5  # ... where the current head recalled at least this much, is lost
LOST_MIN_TICKETS = 3  # judged only for a label with this many tickets in the evidence
FROM_TRAINING = "its training's own out-of-fold check (the same folds and procedure), not run again"


@dataclass(frozen=True)
class Side:
    """One head's out-of-fold record on the evidence."""

    accuracy: float
    corrections_accuracy: float | None  # on the corrected rows (None: no corrections)
    recall: dict[str, float | None]  # per label; None: the evidence has no ticket of it

    def to_dict(self) -> dict[str, Any]:
        return {
            "accuracy": round(self.accuracy, 4),
            "corrections_accuracy": _round(self.corrections_accuracy),
            "recall": {k: _round(v) for k, v in self.recall.items()},
        }

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Side:
        recall = obj.get("recall") or {}
        return cls(float(obj["accuracy"]), _opt_float(obj.get("corrections_accuracy")), dict(recall))


@dataclass(frozen=True)
class Comparison:
    """Candidate vs the head in use, on ``n`` evidence rows (``corrections`` of them corrected)."""

    n: int
    corrections: int
    candidate: Side
    current: Side
    current_name: str  # "version 3", "the task's head" ...
    method: str  # "refit": the current head's training rows refitted per fold; "direct": its own labels
    reasons: list[str] = field(default_factory=list)  # why it is refused; empty: it may be published
    forced: bool = False
    self_training: list[str] = field(default_factory=list)  # the sides refitted with it: candidate, in use
    # the candidate judged by its own training's out-of-fold check (same folds, same procedure), not refitted
    candidate_from_training: bool = False

    @property
    def refused(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "corrections": self.corrections,
            "candidate": self.candidate.to_dict(),
            "current": self.current.to_dict(),
            "current_name": self.current_name,
            "method": self.method,
            "reasons": self.reasons,
            "forced": self.forced,
            "margin": MARGIN,
            "self_training": self.self_training,
            "candidate_from_training": self.candidate_from_training,
        }

    def summary(self) -> dict[str, Any]:
        """The short form kept in ``P:heads`` (no per-class recall)."""
        return {
            "candidate": round(self.candidate.accuracy, 4),
            "current": round(self.current.accuracy, 4),
            "candidate_corrections": _round(self.candidate.corrections_accuracy),
            "current_corrections": _round(self.current.corrections_accuracy),
            "n": self.n,
            "corrections": self.corrections,
            "forced": self.forced,
        }

    def lines(self) -> list[str]:
        """The comparison as the CLI prints it."""
        if self.method == "none":  # not compared: only why
            verdict = "published anyway (--force)" if self.forced else "refused"
            return [f"publish gate ({self.current_name}): {verdict}: " + "; ".join(self.reasons)]
        how = "refitted on its training rows per fold" if self.method == "refit" else "its own labels"
        shown = [label for label, recall in self.candidate.recall.items() if recall is not None]
        w = max([22, *(len("recall " + label) + 1 for label in shown)])  # long label names stay aligned
        out = [
            f"publish gate: candidate vs the head in use ({self.current_name}; {how}), out of fold on "
            f"{self.n} tickets, {self.corrections} of them corrections",
            *(
                [f"  self-training in every fold, as its head learnt: {' and '.join(self.self_training)}"]
                if self.self_training
                else []
            ),
            *([f"  candidate: {FROM_TRAINING}"] if self.candidate_from_training else []),
            f"  {'':<{w}}{'candidate':>10}{'in use':>10}",
            f"  {'accuracy':<{w}}{_pct(self.candidate.accuracy):>10}{_pct(self.current.accuracy):>10}",
        ]
        if self.corrections:
            cand, cur = self.candidate.corrections_accuracy, self.current.corrections_accuracy
            out.append(f"  {'on the corrections':<{w}}{_pct(cand):>10}{_pct(cur):>10}")
        for label in shown:
            was = self.current.recall.get(label)
            out.append(f"  {'recall ' + label:<{w}}{_pct(self.candidate.recall[label]):>10}{_pct(was):>10}")
        if not self.reasons:
            out.append("  verdict: not worse; published when --publish is given")
        else:
            verdict = "published anyway (--force)" if self.forced else "refused"
            out += [f"  verdict: {verdict}: " + "; ".join(self.reasons)]
        return out


def judge(
    truth: Sequence[str],
    candidate: Sequence[str],
    current: Sequence[str],
    corrected: Collection[int],
    labels: Sequence[str],
    *,
    current_name: str,
    method: str,
    margin: float = MARGIN,
) -> Comparison:
    """Compare two heads' labels for the same evidence rows; ``corrected`` are the corrected rows."""
    if not (len(truth) == len(candidate) == len(current)) or not truth:
        raise ValueError(
            f"judge needs one label per row from each: {len(truth)}, {len(candidate)}, {len(current)}"
        )
    cand, cur = _side(truth, candidate, corrected, labels), _side(truth, current, corrected, labels)
    truth_counts = Counter(truth)
    reasons = []
    if cand.accuracy < cur.accuracy - margin:
        reasons.append(
            f"accuracy {_pct(cand.accuracy)} is below the head in use's {_pct(cur.accuracy)} "
            f"by more than {margin:.0%}"
        )
    for label in labels:
        had, has = cur.recall.get(label), cand.recall.get(label)
        if truth_counts[label] < LOST_MIN_TICKETS:
            continue  # a ticket or two: one of them right or wrong is not a lost label
        if had is not None and has is not None and had >= HAD_RECALL and has <= LOST_RECALL:
            reasons.append(f"it loses {label!r} (recall {_pct(has)}, the head in use {_pct(had)})")
    return Comparison(len(truth), len(corrected), cand, cur, current_name, method, reasons)


def _side(
    truth: Sequence[str], predicted: Sequence[str], corrected: Collection[int], labels: Sequence[str]
) -> Side:
    right = [t == p for t, p in zip(truth, predicted, strict=True)]
    on_corrections = [right[i] for i in corrected]
    recall: dict[str, float | None] = {}
    for label in labels:
        rows = [ok for ok, t in zip(right, truth, strict=True) if t == label]
        recall[label] = sum(rows) / len(rows) if rows else None
    return Side(
        sum(right) / len(right),
        sum(on_corrections) / len(on_corrections) if on_corrections else None,
        recall,
    )


def folds_for(y: Sequence[int], seed: int) -> list[int]:
    """Stratified folds over the evidence, as many as the candidate's own cross-validation deals
    (:func:`worker.engine.fit.fold_count`), so its training's out-of-fold check can stand in for a refit."""
    from worker.engine.fit import fold_count, stratified_folds

    k = fold_count(y)
    if not k:
        raise ValueError("no label has two tickets: too few to compare heads out of fold")
    return stratified_folds(y, k, seed)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _opt_float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


@dataclass
class InUse:
    """The head the workers use now, which evidence rows it was trained on (None: not known) and with what
    weight each (None: all 1)."""

    head: Any  # worker.engine.head.Head
    name: str
    trained_on: list[bool] | None = None
    weights: list[float] | None = None


def head_in_use(
    engine: Any, published: tuple[str, bytes] | None, good: tuple[str, bytes] | None = None
) -> tuple[Any, str, bool] | None:
    """(head, name, from_head_data) the workers decide with: the published head (``P:head``) when it fits
    this engine, else the last good one (``P:head:good``, ``good``) when it does, else the task's own (its
    ``head`` file, or the one trained from its ``head_data``, which ``from_head_data`` says); None:
    zero-shot."""
    from worker.engine.head import Head, HeadError
    from worker.engine.training import cached_head

    refused = ""
    if published is not None:
        version, data = published
        try:
            head = Head.from_bytes(data, version=version)
            head.check(engine.identity)
            return head, f"version {version}", False
        except HeadError as exc:
            # Workers refuse it too (head_rejected) and serve the last good head (worker.headwatch):
            # compare with that one, else with the task's, and say so.
            refused = f" (published version {version} is refused: {str(exc)[:200]})"
        if good is not None and good[0] != version:
            try:
                head = Head.from_bytes(good[1], version=good[0])
                head.check(engine.identity)
                return head, f"version {good[0]}, the last good head" + refused, False
            except HeadError:
                pass
    task = engine.task
    if task.head:
        return Head.load(task.head), "the task's head file" + refused, False
    if task.head_data:
        head = cached_head(engine, task.head_data, auto_accuracy=task.auto_accuracy)  # the workers' own
        return head, "the task's head (head_data)" + refused, True
    return None


def rows_trained_on(
    training: dict[str, Any],
    ids: Sequence[str],
    corrected: Collection[int],
    base_sha256: str | None,
    *,
    own: bool,
) -> list[bool] | None:
    """Which evidence rows a head was trained on, from the ``data`` record its training wrote (``own``:
    the head was trained on exactly the evidence's base rows: the task's head, when the base is its
    ``head_data``). None when that cannot be told."""
    is_base = [i not in corrected for i in range(len(ids))]
    if own:
        return is_base if base_sha256 is not None else None
    data = training.get("data")
    if not isinstance(data, dict):
        return None
    used_base = data.get("base_sha256")
    if used_base is not None and used_base != base_sha256:
        return None  # trained on other base data than the evidence's
    known = set(data.get("corrections") or [])
    return [
        (used_base is not None and is_base[i]) or (i in corrected and tid in known)
        for i, tid in enumerate(ids)
    ]


def correction_weights(
    training: dict[str, Any], ids: Sequence[str], corrected: Collection[int]
) -> list[float] | None:
    """The weight a head gave each evidence row when it learnt it, from its ``data`` record: its
    ``correction_weight`` on the corrections it learnt, 1 elsewhere (None: all 1, as before weights)."""
    data = training.get("data")
    weight = data.get("correction_weight") if isinstance(data, dict) else None
    if not isinstance(weight, (int, float)) or weight == 1:
        return None
    known = set(data.get("corrections") or []) if isinstance(data, dict) else set()
    return [float(weight) if i in corrected and tid in known else 1.0 for i, tid in enumerate(ids)]


def as_learnt(
    training: dict[str, Any], y: Sequence[int], rows: Sequence[bool] | None, weights: Sequence[float] | None
) -> list[float] | None:
    """The weight each evidence row (label ``y``) had in the fits of a head whose ``training`` record this
    is, trained on ``rows`` (None: all) with ``weights`` (its corrections'; None: all 1): those, balanced
    over the rows it learnt when it weighed its labels equally (``training["balance"]``,
    :func:`worker.engine.fit.balanced`; rows it did not learn keep theirs, unread)."""
    from worker.engine.fit import balanced

    if not training.get("balance"):
        return None if weights is None else list(weights)
    learnt = [i for i in range(len(y)) if rows is None or rows[i]]
    out = [1.0] * len(y) if weights is None else [float(w) for w in weights]
    even = balanced([y[i] for i in learnt], [out[i] for i in learnt])
    for i, w in zip(learnt, even, strict=True):
        out[i] = w
    return out


def learnt_names(training: dict[str, Any]) -> bool:
    """Whether a head learnt its label names as examples: its ``training["beyond"]`` record says they were
    added, and train's out-of-fold check kept them (no ``used``: too few tickets to check, learnt as is)."""
    beyond = training.get("beyond")
    return isinstance(beyond, dict) and bool(beyond.get("label_names")) and beyond.get("used", True) is True


def self_trained(training: dict[str, Any]) -> bool:
    """Whether a head self-trained on unlabelled tickets: its ``training["beyond"]`` record says it was
    offered some and train's out-of-fold check kept them (no ``used``: too few tickets to check)."""
    beyond = training.get("beyond")
    return isinstance(beyond, dict) and bool(beyond.get("unlabeled")) and beyond.get("used", True) is True


def self_training_lost(in_use: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why a candidate cannot be judged like for like when the head in use self-trained on unlabelled
    tickets and the candidate was offered none (their ``training`` records): without unlabelled tickets
    the comparison refits the head in use from its labelled tickets and names only, so it cannot see what
    the candidate loses (on the banking example, 2.4 points held out that the gate had called better).
    None when nothing is lost that way; a candidate that was offered them and had them dropped by its
    out-of-fold check lost nothing by omission (and the head in use self-trains on them in its folds)."""
    offered = candidate.get("beyond")
    if not self_trained(in_use) or (isinstance(offered, dict) and offered.get("unlabeled")):
        return None
    return (
        f"the head in use also self-trained on {in_use['beyond']['unlabeled']} unlabelled tickets and the "
        "candidate on "
        "none, which this comparison (labelled tickets and names) cannot see: give --unlabeled FILE (or the "
        "task's unlabeled_data), or let the workers keep ticket texts (--keep-text-s) for --stream-tickets"
    )


def mlp_lost(
    in_use: bool, candidate: bool, method: str, record: Any = None, tried: bool = False
) -> str | None:
    """Why a candidate without an MLP cannot be judged like for like with a head in use that blends one
    (``in_use``, ``candidate``: whether each head, as loaded and checked, has an MLP), when the head in use
    was refitted per fold (``method`` "refit"): both sides are then judged by their linear reading, so what
    the MLP added (half a point to 0.65 on Banking77's full split) is invisible, and a head published from
    corrections cannot carry one. None when nothing is lost that way (the head in use judged ``direct`` is
    judged with its MLP). ``record``: the head in use's ``training["mlp"]`` (anyone's JSON once published:
    its fold figures are shown only when they are numbers); ``tried``: the candidate fitted an MLP that its
    held-out fold did not keep."""
    if method != "refit" or not in_use or candidate:
        return None
    fold = mlp_fold(record)
    seen = "" if fold is None else f" ({fold[0]:.1%} linear, {fold[1]:.1%} blended on its held-out fold)"
    way = (
        "this candidate's own MLP did not add on its held-out fold: --force, or keep the head in use"
        if tried
        else "train with --mlp --out FILE (not --publish) and serve that file, or --force"
    )
    return (
        f"the head in use blends an MLP with its linear reading{seen}, which this comparison of linear "
        f"readings cannot see and a head published through Redis cannot carry: {way}"
    )


def mlp_fold(record: Any) -> tuple[float, float] | None:
    """(linear, blended) accuracy on the held-out fold an MLP was judged on, from a head's
    ``training["mlp"]`` record (blended at its kept share; the linear again when it was dropped), or None
    where the record holds no such numbers (anyone's JSON once published)."""
    if not isinstance(record, dict) or not isinstance(record.get("accuracy_by_share"), dict):
        return None
    by, share = record["accuracy_by_share"], finite_number(record.get("share"))
    if share is None:
        return None
    linear, blended = finite_number(by.get("0")), finite_number(by.get(f"{share:g}"))
    return (linear, blended) if linear is not None and blended is not None else None


def lost_unseen(in_use: Any, candidate: Any, method: str) -> list[str]:
    """What the candidate loses that the comparison cannot see (its reasons to refuse), of two loaded heads
    (their ``training`` records and ``mlp``): the head in use's self-training (:func:`self_training_lost`)
    or its MLP (:func:`mlp_lost`)."""
    tried = isinstance(candidate.training.get("mlp"), dict)
    found = (
        self_training_lost(in_use.training, candidate.training),
        mlp_lost(
            in_use.mlp is not None, candidate.mlp is not None, method, in_use.training.get("mlp"), tried
        ),
    )
    return [why for why in found if why]


def compare_with(
    in_use: InUse,
    engine: Any,
    texts: Sequence[str],
    features: torch.Tensor,
    recipe: Any,
    truth: Sequence[str],
    corrected: Collection[int],
    *,
    candidate_rows: Sequence[bool] | None = None,
    candidate_weights: Sequence[float] | None = None,
    l2: float,
    seed: int,
    candidate: dict[str, Any] | None = None,
    names: torch.Tensor | None = None,
    unlabeled: torch.Tensor | None = None,
    candidate_out_of_fold: OutOfFold | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Comparison:
    """Judge the candidate (trained on ``candidate_rows`` of the evidence, every row when None, weighted
    by ``candidate_weights``, at ``l2``) against ``in_use`` on the same folds. Weights change what each
    side learns, never how it is judged: accuracy counts rows; a side whose record says it balanced its
    labels is refitted balanced over the rows it learnt (:func:`as_learnt`). Each side's folds learn what
    its head learnt beside its tickets, as its ``training`` record says (``candidate``: the candidate's; None:
    nothing) (:func:`worker.engine.beyond.cross_refit`): ``names``, the features of the task's label names
    in its order (:func:`worker.engine.training.extras_features`), where :func:`learnt_names`; ``unlabeled``,
    the features of the tickets nobody labelled, self-trained on where :func:`self_trained`. Neither names
    nor unlabelled tickets are evidence: no row is judged by a head that saw it. ``progress(done, total)``
    after each fold's fits, both sides'.

    ``candidate_out_of_fold``: the candidate's training's own out-of-fold predictions, when that training
    learnt every evidence row with these weights, names and unlabelled tickets at ``l2`` (``train``'s
    check of its extras, :func:`worker.engine.beyond.cross_refit`): on the same folds, with every label in
    the evidence, they are what refitting the candidate would give, and are used instead (on the banking
    example, half the gate's cost when both sides self-train)."""
    from worker.engine.beyond import cross_refit

    labels = list(engine.task.labels)
    y = [labels.index(t) for t in truth]
    fold = folds_for(y, seed)
    rows = in_use.trained_on
    refits_in_use = rows is not None and any(rows)  # else it is judged by its own labels
    reused = (
        candidate_out_of_fold
        if candidate_out_of_fold is not None
        and (candidate_rows is None or all(candidate_rows))
        and len(set(y)) == len(labels)
        and candidate_out_of_fold.folds == tuple(fold)
        else None
    )
    parts, sides = len(set(fold)), (reused is None) + refits_in_use
    done = 0

    def step(_done: int, _total: int) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, parts * sides)

    has_free = unlabeled is not None and len(unlabeled) > 0
    self_training: list[str] = []

    def refit(side: str, training: dict[str, Any], train: Any, weights: Any, penalty: float) -> list[int]:
        free = has_free and self_trained(training)
        logits = cross_refit(
            features,
            y,
            len(labels),
            penalty,
            fold=fold,
            train=train,
            row_weight=as_learnt(training, y, train, weights),
            names=names if learnt_names(training) else None,
            unlabeled=unlabeled if free else None,
            progress=step,
        )
        if free:  # after the fits: a side they could not refit is judged by its own labels
            self_training.append(side)
        return logits.argmax(1).tolist()

    if reused is not None:
        predicted = list(reused.predicted)
        if has_free and self_trained(candidate or {}):
            self_training.append("candidate")
    else:
        predicted = refit("candidate", candidate or {}, candidate_rows, candidate_weights, l2)
    method, current = "direct", None
    if refits_in_use:
        own = in_use.head.training
        try:
            current = refit("in use", own, rows, in_use.weights, float(own.get("l2") or l2))
            method = "refit"
        except ValueError:
            current = None  # a fold without its training rows: judge it by its own labels
    if current is None:
        same = in_use.head.recipe == recipe
        x = features if same else engine.features(list(texts), in_use.head.recipe)[0]
        current = in_use.head.logits(x).argmax(1).tolist()
    comparison = judge(
        truth,
        [labels[i] for i in predicted],
        [labels[i] for i in current],
        corrected,
        labels,
        current_name=in_use.name,
        method=method,
    )
    return replace(comparison, self_training=self_training, candidate_from_training=reused is not None)
