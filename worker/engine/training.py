"""Train a head: labelled tickets through the engine's own pass, then a cross-validated linear fit."""

from __future__ import annotations

import hashlib
import importlib.metadata
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from . import beyond
from . import mlp as nonlinear
from .calibration import ece, fit_temperature, risk_coverage, threshold_for_accuracy
from .fit import FOLDS, L2_GRID, Fit, balanced, confusion, fit, placed, stratified_folds
from .head import Head, HeadError, Identity, OutOfFold, digest
from .model import LoadedModel, cache_root
from .options import is_no_head
from .recipe import Preset, Recipe, resolve
from .task import Task, wants_balance, wants_mlp, wants_names
from .types import BatchStats


class Engine(Protocol):
    """What training needs of an engine (:class:`worker.engine.engine.Engine` is one): a protocol, so
    that this module does not import the engine, which imports it to resolve its head."""

    loaded: LoadedModel
    task: Task

    @property
    def identity(self) -> Identity: ...

    @property
    def n_layers(self) -> int: ...

    def use_head(self, head: Head | None) -> None: ...

    def features(
        self,
        texts: Sequence[str],
        recipe: Recipe | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        on_pass: Callable[[BatchStats], None] | None = None,
    ) -> tuple[torch.Tensor, list[BatchStats]]: ...


# progress(stage, done, total): stage is "features" (tickets), "fit" (cross-validation fits), "extras"
# (folds of the cross-validation with label names or unlabelled tickets) or "mlp" (the MLP's epochs)
Progress = Callable[[str, int, int], None]
# How heads are trained, in the cache key: a cached head from an older way is trained again (2: a
# temperature fitted on out-of-fold logits, so cached heads from before carry calibrated scores too).
TRAINING = 2


class TrainingError(HeadError):
    """Training data that cannot make a head (unknown labels, too few classes); one line."""


def check_training_labels(labels: Sequence[str], task_labels: Sequence[str]) -> None:
    if not labels:
        raise TrainingError("no labelled tickets to train on")
    unknown = Counter(lab for lab in labels if lab not in task_labels)
    if unknown:
        found = ", ".join(f"{lab!r} ({n})" for lab, n in unknown.most_common())
        raise TrainingError(
            f"labels not in the task: {found}; the task's labels are {', '.join(task_labels)}"
        )
    present = set(labels)
    if len(present) < 2:
        raise TrainingError(
            f"all {len(labels)} tickets are labelled {next(iter(present))!r}; "
            "a head needs at least two labels"
        )


def train_head(
    engine: Engine,
    texts: list[str],
    labels: list[str],
    *,
    seed: int = 0,
    progress: Progress | None = None,
    recipe: Recipe | Preset | None = None,
    corrected: Mapping[int, str | None] | None = None,
    features: torch.Tensor | None = None,
    auto_accuracy: float | None = None,
    row_weight: Sequence[float] | None = None,
    l2: float | None = None,
    names: torch.Tensor | None = None,
    unlabeled: torch.Tensor | None = None,
    balance: bool = False,
    mlp: bool = False,
) -> Head:
    """A head for ``engine``'s model and task from labelled ``texts``. Deterministic for given inputs.

    Every label must be one of the task's, and at least two must occur. A task label with no ticket gets
    a head row that never wins (and ``training["missing"]`` names it). ``corrected`` maps the rows that are
    people's corrections to the label the worker had given (None: unknown); the head then records how
    often those labels were right before (the worker's) and after (the new head, out of fold). ``features``:
    the texts' features at ``recipe`` (default :func:`recipe_for`), when the caller has them already (the
    publish gate reuses them).

    The temperature is fitted on the out-of-fold logits (tickets each fold did not train on), so the
    head's scores are calibrated probabilities; ``training["calibration"]`` records the out-of-fold ECE
    and risk-coverage at it. With ``auto_accuracy`` the head's ``review_below`` is the lowest confidence
    whose auto-routed out-of-fold tickets reach that accuracy (``training["expected_coverage"]``).
    ``row_weight``: one weight per ticket for the fit (:func:`.fit.fit`; None: all 1). ``l2``: the penalty,
    instead of the one cross-validation chooses (the folds still give the out-of-fold numbers).
    ``balance``: every label's tickets weigh as much in all as the mean label's (:func:`.fit.balanced`,
    on top of ``row_weight``), in every fit, the folds' included; ``training["balance"]`` records it.

    ``names`` (features of :func:`.beyond.name_texts` of the task's labels, in the task's order) and
    ``unlabeled`` (features of tickets without labels) are learnt from at the penalty the labelled
    cross-validation chose (:mod:`.beyond`), and only if the same procedure run inside every fold is at
    least as accurate out of fold as the labelled tickets alone; the out-of-fold numbers, the temperature
    and ``review_below`` are then that procedure's. ``training["beyond"]`` records both accuracies, whether
    the extras were used, and what they added.

    ``mlp``: also fit a nonlinear reading of the features (:mod:`.mlp`), first on four fifths of the
    tickets to judge it on the fold left out (the linear head's out-of-fold logits there come from the
    same four fifths), where the blend's weight is chosen (:func:`.mlp.choose_share`; 0, no MLP, unless
    it adds); then, if kept, again on every ticket. The temperature and ``review_below`` of a head with an
    MLP are fitted on that held-out fold's blended predictions; ``training["mlp"]`` records the fold's
    accuracy at every weight. ``cv_accuracy``, the confusion and the out-of-fold predictions the publish
    gate reads stay the linear reading's, over every fold."""
    if auto_accuracy is not None and not 0.0 < auto_accuracy <= 1.0:
        raise TrainingError(f"auto_accuracy must lie in (0, 1], got {auto_accuracy!r}")
    if len(texts) != len(labels):
        raise TrainingError(f"{len(texts)} texts but {len(labels)} labels")
    task_labels = list(engine.task.labels)
    check_training_labels(labels, task_labels)
    recipe = recipe_for(engine, recipe)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress("features", done, len(texts))

    x = features if features is not None else engine.features(texts, recipe, progress=step)[0]
    present = [lab for lab in task_labels if lab in set(labels)]
    y = [present.index(lab) for lab in labels]
    if balance:
        row_weight = balanced(y, row_weight)
    result = fit(
        x,
        y,
        len(present),
        seed=seed,
        progress=(lambda d, t: progress("fit", d, t)) if progress else None,
        grid=L2_GRID if l2 is None else (l2,),
        row_weight=row_weight,
    )
    rows = torch.tensor([task_labels.index(lab) for lab in present])
    out = Outcome.of(result)
    if names is not None or unlabeled is not None:
        kept = None if names is None else beyond.names_of(names, len(task_labels), rows.tolist())
        extras = {"names": kept, "unlabeled": unlabeled}
        folds = stratified_folds(y, result.folds, seed) if result.cv_logits is not None else None
        stage = (lambda d, t: progress("extras", d, t)) if progress else None
        out = checked_extras(x, y, len(present), result.l2, out, folds, row_weight, extras, stage)
    learnt, bias_learnt, beyond_info = out.weight, out.bias, out.beyond
    cv_logits, cv_predicted, cv_accuracy, cv_confusion = (
        out.logits,
        out.predicted,
        out.accuracy,
        out.confusion,
    )
    second: Second | None = None  # the MLP's judgement, kept or not; ``blended``: when kept
    if mlp and cv_logits is not None:
        folds = out.folds or stratified_folds(y, result.folds, seed)
        stage = (lambda d, t: progress("mlp", d, t)) if progress else None
        second = second_reading(x, y, len(present), cv_logits, folds, seed, row_weight, stage)
    blended = second if second is not None and second.net is not None else None
    temperature, review_below, calibration = 1.0, None, {}
    if cv_logits is not None:
        # calibrated on what the head ships: the linear reading out of fold, or the blend on its fold
        judged, truth = (cv_logits, y) if blended is None else (blended.logits, blended.truth)
        temperature = fit_temperature(judged, truth)
        probs = torch.softmax(judged / temperature, -1)
        confidence = probs.max(1).values.tolist()
        correct = (probs.argmax(1) == torch.tensor(truth)).tolist()
        calibration = _calibration(confidence, correct, temperature, judged, truth)
        if auto_accuracy is not None:
            threshold, coverage = threshold_for_accuracy(confidence, correct, auto_accuracy)
            calibration["auto_accuracy"] = auto_accuracy
            calibration["expected_coverage"] = None if coverage is None else round(coverage, 4)
            # unreachable: everything goes to review (a threshold above any probability)
            review_below = 1.0 if threshold is None else threshold
    elif auto_accuracy is not None:
        raise TrainingError("auto_accuracy needs cross-validation: a label with two tickets or more")
    weight, bias = placed(learnt, bias_learnt, rows.tolist(), len(task_labels))
    ident = engine.identity
    counts = Counter(labels)
    net = (
        None
        if blended is None or blended.net is None
        else blended.net.placed(rows.tolist(), len(task_labels))
    )
    checked = None
    if out.folds is not None and cv_predicted is not None:
        task_rows = rows.tolist()
        checked = OutOfFold(tuple(out.folds), tuple(task_rows[p] for p in cv_predicted))
    return Head(
        labels=tuple(task_labels),
        weight=weight,
        bias=bias,
        recipe=recipe,
        model=ident.model,
        model_digest=ident.model_digest,
        prompt_digest=ident.prompt_digest,
        temperature=temperature,
        review_below=review_below,
        mlp=net,
        mlp_share=0.0 if blended is None else blended.share,
        training={
            "n": len(labels),
            "counts": {lab: counts.get(lab, 0) for lab in task_labels},
            "missing": [lab for lab in task_labels if lab not in counts],
            "cv_accuracy": None if cv_accuracy is None else round(cv_accuracy, 4),
            "cv_folds": result.folds,
            "cv_labels": present,
            "cv_confusion": cv_confusion,
            "l2": result.l2,
            "seed": seed,
            **({"balance": True} if balance else {}),
            "dtype": engine.loaded.dtype_name,
            "ticketq_version": _version(),
            **_on_corrections(corrected or {}, labels, present, cv_predicted),
            **calibration,
            **({"beyond": beyond_info} if beyond_info else {}),
            **({"mlp": second.record} if second is not None else {}),
        },
        out_of_fold=checked,
    )


@dataclass
class Second:
    """The MLP beside the linear head, as :func:`second_reading` judged it on one held-out fold."""

    share: float  # its weight in the blend; 0: dropped
    net: nonlinear.Mlp | None  # fitted on every ticket (None: dropped)
    logits: torch.Tensor  # the held-out fold's blended log-probabilities, at ``share``
    truth: list[int]  # their labels
    record: dict[str, Any]


def second_reading(
    x: torch.Tensor,
    y: list[int],
    classes: int,
    linear_cv: torch.Tensor,
    folds: Sequence[int],
    seed: int,
    row_weight: Sequence[float] | None,
    progress: Callable[[int, int], None] | None,
) -> Second:
    """Fit the MLP on every fold but the first, choose its share of the blend on the first (with the
    linear head's out-of-fold logits there, ``linear_cv``, fitted on the same other folds), and, if it is
    kept, fit it again on every ticket."""
    start = time.perf_counter()
    held = [i for i, f in enumerate(folds) if f == 0]
    rest = [i for i, f in enumerate(folds) if f != 0]
    kept = [row_weight[i] for i in rest] if row_weight is not None else None
    epochs = nonlinear.EPOCHS * nonlinear.SEEDS
    total, done = 2 * epochs, 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    part = nonlinear.fit_mlp(
        x[rest], [y[i] for i in rest], classes, seed=seed, row_weight=kept, progress=step
    )
    truth = [y[i] for i in held]
    linear, other = linear_cv[held], part.logits(x[held])
    share, by_share = nonlinear.choose_share(linear, other, truth)
    net = None
    if share > 0:
        net = nonlinear.fit_mlp(x, y, classes, seed=seed, row_weight=row_weight, progress=step)
    if progress:
        progress(total, total)
    record = {
        "share": share,
        "held_out": len(held),
        "accuracy_by_share": by_share,
        "hidden": nonlinear.HIDDEN * nonlinear.SEEDS,
        "epochs": nonlinear.EPOCHS,
        "seconds": round(time.perf_counter() - start, 1),
    }
    return Second(share, net, nonlinear.blend(linear, other, share), truth, record)


@dataclass
class Outcome:
    """A head's weights and the out-of-fold numbers that describe them."""

    weight: torch.Tensor
    bias: torch.Tensor
    logits: torch.Tensor | None
    predicted: list[int] | None
    accuracy: float | None
    confusion: list[list[int]] | None = None
    beyond: dict[str, Any] = field(default_factory=dict)
    folds: list[int] | None = None  # where the out-of-fold numbers are :func:`.beyond.cross_refit`'s

    @classmethod
    def of(cls, result: Fit) -> Outcome:
        """The labelled tickets' own head, as :func:`.fit.fit` cross-validated it."""
        return cls(
            result.weight,
            result.bias,
            result.cv_logits,
            result.cv_predicted,
            result.cv_accuracy,
            result.cv_confusion,
        )


def checked_extras(
    x: torch.Tensor,
    y: list[int],
    classes: int,
    l2: float,
    plain: Outcome,
    folds: list[int] | None,
    row_weight: Sequence[float] | None,
    extras: dict[str, Any],
    progress: Callable[[int, int], None] | None,
) -> Outcome:
    """The labelled-only head ``plain``, or the one that also learnt from ``extras`` (label names,
    unlabelled tickets) if the whole procedure, cross-validated on ``folds``, is no less accurate; without
    folds (too few tickets to cross-validate) the extras are learnt from unchecked."""
    first = (plain.weight, plain.bias)
    if folds is None:
        weight, bias, info = beyond.refit(x, y, classes, l2, first=first, row_weight=row_weight, **extras)
        return replace(plain, weight=weight, bias=bias, beyond=info)
    tried = beyond.cross_refit(
        x, y, classes, l2, fold=folds, row_weight=row_weight, progress=progress, **extras
    )
    predicted = tried.argmax(1).tolist()
    with_extras = sum(p == t for p, t in zip(predicted, y, strict=True)) / len(y)
    checked = {
        "used": plain.accuracy is not None and with_extras >= plain.accuracy,
        "cv_accuracy_with": round(with_extras, 4),
        "cv_accuracy_without": None if plain.accuracy is None else round(plain.accuracy, 4),
    }
    if not checked["used"]:
        unused: dict[str, Any] = {"label_names": classes} if extras["names"] is not None else {}
        if extras["unlabeled"] is not None:
            unused["unlabeled"] = len(extras["unlabeled"])
        return replace(plain, beyond={**unused, **checked})
    weight, bias, info = beyond.refit(x, y, classes, l2, first=first, row_weight=row_weight, **extras)
    return Outcome(
        weight,
        bias,
        tried,
        predicted,
        with_extras,
        confusion(y, predicted, classes),
        {**info, **checked},
        folds,
    )


def _calibration(
    confidence: list[float], correct: list[bool], temperature: float, logits: torch.Tensor, y: list[int]
) -> dict[str, Any]:
    """What the out-of-fold predictions say about the scores, for the file and ``train``'s report."""
    raw = torch.softmax(logits, -1).max(1).values.tolist()
    rc = risk_coverage(confidence, correct)
    return {
        "temperature": temperature,
        "cv_ece": round(ece(confidence, correct), 4),
        "cv_ece_uncalibrated": round(ece(raw, correct), 4),
        "cv_accuracy_at": {f"{f:g}": None if a is None else round(a, 4) for f, a in rc.accuracy_at.items()},
        "cv_coverage_for": {
            f"{c.target:g}": None
            if c.coverage is None
            else {"coverage": round(c.coverage, 4), "threshold": round(c.threshold or 0.0, 4)}
            for c in rc.coverage_for
        },
    }


def _on_corrections(
    corrected: Mapping[int, str | None], labels: list[str], present: list[str], out_of_fold: list[int] | None
) -> dict[str, Any]:
    """Accuracy on the corrected rows: the worker's labels (before) and the new head's out-of-fold
    predictions (after: each row predicted by a head that did not train on it, so not flattered)."""
    if not corrected:
        return {}
    out: dict[str, Any] = {"corrections_n": len(corrected)}
    known = [(row, was) for row, was in corrected.items() if was is not None]
    if known:
        right = sum(was == labels[row] for row, was in known)
        out["corrections_accuracy_before"] = round(right / len(known), 4)
    if out_of_fold is not None:
        right = sum(present[out_of_fold[row]] == labels[row] for row in corrected)
        out["corrections_accuracy_after"] = round(right / len(corrected), 4)
    return out


def _version() -> str:
    try:
        return importlib.metadata.version("ticketq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _rows(raw: bytes, name: str) -> list[dict[str, Any]]:
    """The rows of a tickets file the task names, read and checked as ``train --tickets`` reads its file
    (:func:`worker.bench.data.read_items`: id optional, texts non-empty, ids unique); one line
    (TrainingError) when they cannot be used."""
    from producer.files import ITEM_COLUMNS, FileError, items_of, parse

    try:
        items = items_of(parse(raw.decode("utf-8"), name=name, columns=ITEM_COLUMNS), name)
    except FileError as exc:  # its message names the file and the line
        raise TrainingError(str(exc)) from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TrainingError(f"{name}: line {line}: not UTF-8 (byte {exc.start})") from None
    return [{"id": it.id, "text": it.text, "label": it.label or ""} for it in items]


def extras_features(
    engine: Engine,
    recipe: Recipe,
    label_names: bool,
    unlabeled: Sequence[str] | None,
    progress: Callable[[int], None] | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """What :func:`train_head` takes as ``names`` and ``unlabeled``: the features of every task label's
    name (:func:`.beyond.name_texts`, in the task's order) when ``label_names``, and of the ``unlabeled``
    texts when there are any (``progress(n)`` after each pass over them)."""
    names = None
    if label_names:
        names = engine.features(beyond.name_texts(engine.task.labels), recipe)[0]
    free = engine.features(unlabeled, recipe, progress=progress)[0] if unlabeled else None
    return names, free


def recipe_for(engine: Engine, given: Recipe | Preset | None = None) -> Recipe:
    """The recipe a head for ``engine`` is trained with: ``given`` (``train --recipe``), else its task's
    (``recipe`` in the task file or the question's table), else :meth:`Recipe.default` for its labels; a
    preset (``accurate``) resolved for the model's layers.
    TrainingError (one line) when the model lacks a layer it reads."""
    task = engine.task
    recipe = resolve(given or task.recipe, engine.n_layers, len(task.labels))
    try:
        recipe.check(engine.n_layers)
    except ValueError as exc:
        raise TrainingError(str(exc)) from None
    return recipe


def planned_recipes(task: Task, spec: str | None, n_layers: int) -> list[Recipe] | None:
    """What the heads :func:`resolve_head` and each question's will give a task read, known before any
    is trained: a head file's own recipe, else the task's ``recipe`` or the default. None when the
    primary is decided by zero-shot label scoring (its pass is then the label scoring's, whatever the
    questions read). ``--dtype auto`` times and judges that pass."""
    if is_no_head(spec):
        return None
    if spec:
        primary = Head.load(spec).recipe
    elif task.head or task.head_data:
        primary = _planned(task.head, task.recipe, n_layers, len(task.labels))
    else:
        return None
    return [primary, *(_planned(q.head, q.recipe, n_layers, len(q.labels)) for q in task.questions)]


def _planned(head: str | None, recipe: Recipe | Preset | None, n_layers: int, n_labels: int) -> Recipe:
    """The recipe a task's head will read: its file's, else (no file named, or none there yet: ``train``
    is about to write it) the one ``train`` would use. A worker still refuses a named file that is missing,
    when it loads its heads."""
    if head and Path(head).exists():
        return Head.load(head).recipe
    return resolve(recipe, n_layers, n_labels)


def resolve_head(engine: Engine, spec: str | None, log: Callable[..., None] | None = None) -> Head | None:
    """The head an engine should decide with, checked against it (raises HeadError).

    ``spec``: a head file, ``none`` (zero-shot), or ``None`` for the task's own: the file its TOML names
    (``head``), else one trained from the labelled tickets it names (``head_data``) on first use and
    cached, else none."""
    task = engine.task
    head: Head | None = None
    if is_no_head(spec):
        pass
    elif spec or task.head:
        head = Head.load(spec or task.head or "")
    elif task.head_data:
        head = cached_head(engine, task.head_data, log, auto_accuracy=task.auto_accuracy)
    engine.use_head(head)
    return head


def head_cache_key(
    ident: Identity,
    dtype: str,
    recipe: Recipe,
    data: bytes,
    labels: Sequence[str],
    *,
    auto_accuracy: float | None,
    label_names: bool,
    unlabeled: bytes | None,
    balance: bool,
    mlp: bool = False,
) -> str:
    """The cache entry of a head trained on first use: a digest of everything it depends on (the model's
    weights, the prompt, the task's labels, the data and its ``labels``, the dtype, the recipe, the way
    heads are trained, the ticketq version, and what :func:`cached_head` describes). A part added since
    heads were first cached joins only when set, so the heads cached before it still match."""
    # what the head also learns from (label names, unlabelled tickets)
    beyond_key: dict[str, Any] = {
        **({"label_names": list(beyond.NAME_PHRASES)} if label_names else {}),
        **({"unlabeled": hashlib.sha256(unlabeled).hexdigest()} if unlabeled is not None else {}),
    }
    if beyond_key:  # extras judged and calibrated out of fold (beyond.cross_refit): not the heads before
        beyond_key["cross_fitted"] = True
    if unlabeled is not None:  # how the kept tickets are learnt from: a head self-trained otherwise retrains
        beyond_key["self_training"] = beyond.self_training()
    # a label with fewer tickets than folds: heads cached before fold_count had fewer folds or none, and
    # retrain once; data without one keeps its key
    few = {"folds": "most frequent label"} if min(Counter(labels).values(), default=FOLDS) < FOLDS else None
    return digest(
        ident.model_digest,
        ident.prompt_digest,
        list(ident.labels),
        hashlib.sha256(data).hexdigest(),
        dtype,
        recipe.to_dict(),
        TRAINING,
        _version(),
        *([] if auto_accuracy is None else [{"auto_accuracy": auto_accuracy}]),
        *([beyond_key] if beyond_key else []),
        *([few] if few else []),
        *([{"balance": True}] if balance else []),  # labels weighed equally; data without stays keyed
        *([{"mlp": nonlinear.version()}] if mlp else []),  # a second reading; heads without keep their key
    )[:24]


def cached_head(
    engine: Engine,
    data: str | Path,
    log: Callable[..., None] | None = None,
    *,
    auto_accuracy: float | None = None,
) -> Head:
    """The head trained from labelled ``data`` for this engine, from the cache or trained now and cached
    under :func:`head_cache_key`: a change to anything the head depends on trains a new one. With
    ``auto_accuracy`` (the task's or question's) the head stores the review threshold its out-of-fold
    predictions give."""

    task = engine.task
    try:
        raw = Path(data).read_bytes()
        free_raw = Path(task.unlabeled_data).read_bytes() if task.unlabeled_data else None
    except OSError as exc:  # one line, like any head that cannot be had (HeadError), not a traceback
        raise TrainingError(
            f"cannot read the task's training data: {exc.strerror or exc}: {exc.filename}"
        ) from None
    ident = engine.identity
    recipe = recipe_for(engine)
    rows = _rows(raw, str(data))
    texts, labels = [str(r.get("text") or "") for r in rows], [str(r.get("label") or "") for r in rows]
    label_names = wants_names(task.label_names, labels, len(task.labels))
    balance = wants_balance(task.balance, labels)
    mlp = wants_mlp(task.mlp, labels, len(task.labels))
    key = head_cache_key(
        ident,
        engine.loaded.dtype_name,
        recipe,
        raw,
        labels,
        auto_accuracy=auto_accuracy,
        label_names=label_names,
        unlabeled=free_raw,
        balance=balance,
        mlp=mlp,
    )
    path = cache_root() / "heads" / f"{key}.safetensors"
    if path.exists():
        try:
            head = Head.load(path)
            if log:
                log("head_cached", path=str(path), head=head.id)
            return head
        except HeadError:
            pass  # a damaged cache entry: train again and overwrite it
    start = time.perf_counter()
    if log:
        log("head_training", data=str(data), tickets=len(rows), cache=str(path))
    free_texts = None
    if free_raw is not None:
        free_texts = [str(r.get("text") or "") for r in _rows(free_raw, str(task.unlabeled_data))]
    names, free = extras_features(engine, recipe, label_names, free_texts)
    head = train_head(
        engine,
        texts,
        labels,
        recipe=recipe,
        auto_accuracy=auto_accuracy,
        names=names,
        unlabeled=free,
        balance=balance,
        mlp=mlp,
    )
    head.save(path)
    if log:
        log(
            "head_trained",
            head=head.id,
            cv_accuracy=head.training.get("cv_accuracy"),
            seconds=round(time.perf_counter() - start, 1),
            path=str(path),
        )
    return head
