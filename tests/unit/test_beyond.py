"""Learning beyond the labelled tickets (worker.engine.beyond): label names as examples, self-training."""

from __future__ import annotations

import pytest
import torch

from worker.engine import beyond
from worker.engine.beyond import (
    KEEP,
    NAME_PHRASES,
    PSEUDO_WEIGHT,
    added_penalty,
    cross_refit,
    name_labels,
    name_text,
    name_texts,
    names_of,
    refit,
)
from worker.engine.fit import fit, fit_at, stratified_folds


def test_a_label_name_reads_as_text() -> None:
    assert name_text("card_arrival") == "card arrival"
    assert name_text("Refund_not_showing_up") == "Refund not showing up"
    assert name_text("top-up__failed ") == "top up failed"
    assert name_text("billing") == "billing"


def clusters(n: int, seed: int, spread: float = 1.0) -> tuple[torch.Tensor, list[int]]:
    """Three Gaussian blobs in 8 dimensions, ``n`` points each."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[3.0] + [0.0] * 7, [0.0, 3.0] + [0.0] * 6, [0.0, 0.0, 3.0] + [0.0] * 5])
    x = torch.cat([c + spread * torch.randn(n, 8, generator=g) for c in centres])
    return x, [c for c in range(3) for _ in range(n)]


def accuracy(x: torch.Tensor, y: list[int], w: torch.Tensor, b: torch.Tensor) -> float:
    return float(((x @ w.T + b).argmax(1) == torch.tensor(y)).double().mean())


def test_without_extras_refit_is_the_labelled_fit_itself() -> None:
    x, y = clusters(4, 0)
    first = fit_at(x, y, 3, 1e-2)
    w, b, info = refit(x, y, 3, 1e-2, first=first)
    assert w is first[0] and b is first[1] and info == {}


def test_label_names_join_as_one_example_each() -> None:
    x, y = clusters(3, 1)
    names = torch.tensor([[6.0] + [0.0] * 7, [0.0, 6.0] + [0.0] * 6, [0.0, 0.0, 6.0] + [0.0] * 5])
    first = fit_at(x, y, 3, 1e-2)
    w, b, info = refit(x, y, 3, 1e-2, first=first, names=names)
    assert info == {"label_names": 3, "name_rows": 3}
    # exactly the fit on the rows with the names appended, started from the labelled rows' fit ...
    w2, b2 = fit_at(torch.cat([x, names]), [*y, 0, 1, 2], 3, 1e-2, start=first)
    torch.testing.assert_close(w, w2)
    torch.testing.assert_close(b, b2)
    # ... which is where a fit from zeros goes too: the problem is convex, the start only saves steps
    w3, b3 = fit_at(torch.cat([x, names]), [*y, 0, 1, 2], 3, 1e-2)
    torch.testing.assert_close(w, w3, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(b, b3, atol=1e-3, rtol=1e-3)
    assert not torch.equal(w, first[0])
    assert ((names @ w.T + b).argmax(1) == torch.arange(3)).all()


def test_self_training_learns_from_tickets_nobody_labelled() -> None:
    """Three labelled tickets per label, 600 unlabelled: over 20 draws the self-trained head is better on
    average and in most draws (on one draw either can win: the pseudo-labels are the head's own guesses)."""
    gains = []
    for seed in range(20):
        x, y = clusters(3, 10 * seed)
        free, _ = clusters(200, 10 * seed + 1)  # its labels are never read
        test, truth = clusters(300, 10 * seed + 2)
        first = fit_at(x, y, 3, 1e-2)
        w, b, info = refit(x, y, 3, 1e-2, first=first, unlabeled=free)
        assert info["unlabeled"] == 600 and info["rounds"] == len(KEEP)
        assert abs(info["pseudo_labelled"] - KEEP[-1] * 600) <= 2  # the last round's share (ties aside)
        gains.append(accuracy(test, truth, w, b) - accuracy(test, truth, *first))
    assert sum(gains) / len(gains) > 0.02 and sum(g > 0 for g in gains) >= 14, gains
    again = refit(x, y, 3, 1e-2, first=first, unlabeled=free)
    assert torch.equal(again[0], w)  # deterministic


def test_names_must_cover_every_label() -> None:
    x, y = clusters(3, 5)
    for rows in (2, 4, 0):
        with pytest.raises(ValueError, match=f"{rows} label-name rows for 3 labels"):
            refit(x, y, 3, 1e-2, first=fit_at(x, y, 3, 1e-2), names=torch.zeros(rows, 8))


def test_each_name_is_read_in_every_phrasing_phrase_by_phrase() -> None:
    """name_texts lays the phrasings out phrase by phrase; name_labels and names_of read that layout, and
    refit learns every row as an example of its label."""
    texts = name_texts(["card_arrival", "lost-or-stolen"])
    assert len(texts) == 2 * len(NAME_PHRASES) and texts[:2] == ["card arrival", "lost or stolen"]
    assert texts[2:4] == [NAME_PHRASES[1].format("card arrival"), NAME_PHRASES[1].format("lost or stolen")]
    assert name_labels(6, 3) == [0, 1, 2, 0, 1, 2]
    rows = torch.arange(12.0)[:, None]  # 4 phrasings x 3 classes
    assert names_of(rows, 3, [2, 0]).flatten().tolist() == [2.0, 0.0, 5.0, 3.0, 8.0, 6.0, 11.0, 9.0]
    x, y = clusters(3, 1)
    centres = torch.tensor([[6.0] + [0.0] * 7, [0.0, 6.0] + [0.0] * 6, [0.0, 0.0, 6.0] + [0.0] * 5])
    names = torch.cat([centres, 0.9 * centres])
    first = fit_at(x, y, 3, 1e-2)
    w, b, info = refit(x, y, 3, 1e-2, first=first, names=names)
    assert info == {"label_names": 3, "name_rows": 6}
    w2, b2 = fit_at(torch.cat([x, names]), [*y, 0, 1, 2, 0, 1, 2], 3, 1e-2, start=first)
    torch.testing.assert_close(w, w2)
    torch.testing.assert_close(b, b2)


def test_cross_refit_without_extras_is_the_cross_validation_itself() -> None:
    """Same folds, same penalty, nothing added: the logits fit's own cross-validation gives."""
    x, y = clusters(10, 3, spread=2.0)
    cv = fit(x, y, 3, grid=(1e-2,), seed=5)
    got = cross_refit(x, y, 3, 1e-2, fold=stratified_folds(y, cv.folds, 5))
    assert cv.cv_logits is not None
    torch.testing.assert_close(got, cv.cv_logits, atol=1e-4, rtol=1e-4)


def test_cross_refit_scores_each_row_without_its_own_label() -> None:
    """Out of fold: relabelling one row changes the logits of every fold but its own."""
    x, y = clusters(6, 4, spread=2.0)
    free, _ = clusters(40, 5)
    names = torch.eye(3, 8) * 3.0
    fold = stratified_folds(y, 3, 0)
    seen: list[int] = []
    base = cross_refit(
        x, y, 3, 1e-2, fold=fold, names=names, unlabeled=free, progress=lambda d, t: seen.append(d)
    )
    assert seen == [1, 2, 3]
    flipped = list(y)
    flipped[0] = (y[0] + 1) % 3
    again = cross_refit(x, flipped, 3, 1e-2, fold=fold, names=names, unlabeled=free)
    own = torch.tensor(fold) == fold[0]
    assert torch.equal(again[own], base[own])
    assert not torch.equal(again[~own], base[~own])


def test_kept_tickets_add_to_the_known_rows_loss_instead_of_diluting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fit's loss is its rows' weighted mean plus l2 |W|^2: as the kept tickets' weight joins, the penalty
    shrinks by their share, so the labelled rows and names weigh against it as they did alone."""
    assert added_penalty(1e-2, 100.0, 0.0) == 1e-2
    assert added_penalty(1e-2, 100.0, 300.0) == pytest.approx(2.5e-3)
    monkeypatch.setattr(beyond, "KEEP", (1.0,))  # one round, every ticket kept: reproducible by hand
    x, y = clusters(4, 3)
    free, _ = clusters(50, 4)
    first = fit_at(x, y, 3, 1e-1)
    w, b, info = refit(x, y, 3, 1e-1, first=first, unlabeled=free)
    assert info["pseudo_labelled"] == len(free) and info["rounds"] == 1
    confidence, guessed = torch.softmax(free @ first[0].T + first[1], -1).max(1)
    guess = guessed.tolist()
    kept = [PSEUDO_WEIGHT * float(c) for c in confidence]  # each kept ticket by the head's confidence
    l2 = added_penalty(1e-1, float(len(y)), sum(kept))
    rows, weights = torch.cat([x, free]), [1.0] * len(y) + kept
    expected = fit_at(rows, [*y, *guess], 3, l2, weights, start=first)  # each round starts from the last
    torch.testing.assert_close(w, expected[0])
    torch.testing.assert_close(b, expected[1])
    diluted = fit_at(rows, [*y, *guess], 3, 1e-1, weights)  # the penalty as the labelled rows chose it
    assert float(w.norm()) > float(diluted[0].norm())


def test_a_kept_ticket_counts_by_the_heads_confidence_in_its_guess() -> None:
    """A guess the head was sure of teaches more than one it barely kept; a certain one counts what every
    kept ticket counted before (PSEUDO_WEIGHT), so no new constant."""
    weights = beyond.kept_weights(torch.tensor([1.0, 0.9, 0.2]))
    assert weights == pytest.approx([PSEUDO_WEIGHT, 0.9 * PSEUDO_WEIGHT, 0.2 * PSEUDO_WEIGHT])
