"""``--dtype auto``: the decision rule on made-up timings, and the measure-once-then-cache flow on the tiny
model with injected timings (no test here depends on how fast this machine is)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from worker.engine import autodtype
from worker.engine.autodtype import DtypeChoice, Trial, pick
from worker.engine.engine import Engine
from worker.engine.model import LoadedModel, ModelError
from worker.engine.task import Task, load_task

LABELS = ("billing", "technical", "account", "billing")


def _trial(dtype: str, seconds: float, labels: tuple[str, ...] = LABELS) -> Trial:
    return Trial(dtype, seconds, labels)


def test_the_fastest_agreeing_dtype_wins() -> None:
    chosen, reason = pick([_trial("float32", 1.0), _trial("bfloat16", 0.5)])
    assert chosen == "bfloat16" and "2.00x" in reason


def test_float32_stays_when_it_is_faster() -> None:
    """The case this machine kind shows: a CPU flag says bfloat16, the measurement says float32."""
    assert pick([_trial("float32", 1.0), _trial("bfloat16", 6.0)])[0] == "float32"


def test_a_faster_dtype_that_flips_a_label_is_rejected() -> None:
    flipped = ("billing", "technical", "account", "account")
    chosen, reason = pick(
        [_trial("float32", 1.0), _trial("bfloat16", 0.3, flipped), _trial("int8", 0.2, flipped)]
    )
    assert chosen == "float32"
    assert "bfloat16 (75% agreement)" in reason and "int8" in reason


def test_within_the_margin_float32_stays() -> None:
    """Noise on a shared machine must not flip the choice: 5% faster is not faster."""
    assert pick([_trial("float32", 1.0), _trial("bfloat16", 0.95)])[0] == "float32"
    assert pick([_trial("float32", 1.0), _trial("bfloat16", 0.85)])[0] == "bfloat16"


def test_cuda_picks_among_half_precisions() -> None:
    trials = [_trial("float32", 1.0), _trial("float16", 0.3), _trial("bfloat16", 0.35)]
    assert pick(trials)[0] == "float16"


def test_no_reference_no_decision() -> None:
    with pytest.raises(ValueError, match="float32"):
        pick([_trial("bfloat16", 0.5)])


def test_decision_round_trips_through_json() -> None:
    d = DtypeChoice("bfloat16", "why", (_trial("float32", 1.0), _trial("bfloat16", 0.5)), {"k": "v"})
    back = DtypeChoice.from_json(json.loads(json.dumps(d.to_json())))
    assert back.chosen == "bfloat16" and back.trials == d.trials and back.cached
    fields = d.log_fields()
    assert fields["dtype_chosen"] == "bfloat16"
    assert fields["dtype_pass_ms"] == {"float32": 1000.0, "bfloat16": 500.0}
    assert fields["dtype_agreement"] == {"float32": 1.0, "bfloat16": 1.0}


Timer = Callable[[str, Callable[[], torch.Tensor]], tuple[float, torch.Tensor]]


def _timer(seconds: dict[str, float], calls: list[str], flip: str | None = None) -> Timer:
    """Made-up timings; ``flip`` makes that dtype's pass decide every ticket differently."""

    def timer(name: str, run: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
        calls.append(name)
        out = run()
        if name == flip:
            n = out.shape[-1]
            out = torch.eye(n)[(out.argmax(-1) + 1) % n] * 1e3  # every label moved one on
        return seconds[name], out

    return timer


def _choose(tiny: LoadedModel, tmp: Path, timer: Timer, **kw):
    task = kw.pop("task", load_task())
    return autodtype.choose(
        tiny, task, lambda m: Engine(m, task), source="tiny", cache_dir=tmp, timer=timer, **kw
    )


def test_measured_once_then_read_from_the_cache(tiny: LoadedModel, tmp_path: Path) -> None:
    calls: list[str] = []
    loaded, first = _choose(tiny, tmp_path, _timer({"float32": 1.0, "bfloat16": 0.4}, calls))
    assert not first.cached and first.chosen == "bfloat16"
    assert loaded.dtype == torch.bfloat16 and next(loaded.model.parameters()).dtype == torch.bfloat16
    assert tiny.dtype == torch.float32 and next(tiny.model.parameters()).dtype == torch.float32  # a copy
    assert calls == ["float32", "bfloat16"]  # far apart: one timed round
    [cached_file] = tmp_path.iterdir()
    assert json.loads(cached_file.read_text())["chosen"] == "bfloat16"
    calls.clear()
    again, second = _choose(tiny, tmp_path, _timer({"float32": 1.0, "bfloat16": 0.4}, calls))
    assert second.cached and second.chosen == "bfloat16" and calls == []
    assert again.dtype == torch.bfloat16


def test_close_timings_get_a_second_round(tiny: LoadedModel, tmp_path: Path) -> None:
    calls: list[str] = []
    _, decision = _choose(tiny, tmp_path, _timer({"float32": 1.0, "bfloat16": 0.95}, calls))
    assert calls == ["float32", "bfloat16", "float32", "bfloat16"]
    assert decision.chosen == "float32"


def test_a_flipping_candidate_is_never_chosen(tiny: LoadedModel, tmp_path: Path) -> None:
    calls: list[str] = []
    loaded, decision = _choose(
        tiny, tmp_path, _timer({"float32": 1.0, "bfloat16": 0.1}, calls, flip="bfloat16")
    )
    assert decision.chosen == "float32" and loaded is tiny
    assert decision.log_fields()["dtype_agreement"]["bfloat16"] == 0.0


def test_another_task_or_a_torn_file_measures_again(tiny: LoadedModel, tmp_path: Path) -> None:
    calls: list[str] = []
    timer = _timer({"float32": 1.0, "bfloat16": 0.4}, calls)
    _choose(tiny, tmp_path, timer)
    [path] = tmp_path.iterdir()
    path.write_text(path.read_text()[:20])  # torn
    calls.clear()
    assert not _choose(tiny, tmp_path, timer)[1].cached and calls
    other = Task(name="x", labels=("a b", "c"), instructions="Pick.")
    calls.clear()
    assert not _choose(tiny, tmp_path, timer, task=other)[1].cached and calls
    assert len(list(tmp_path.iterdir())) == 2


def test_int8_is_measured_only_when_asked_and_held_to_agreement(tiny: LoadedModel, tmp_path: Path) -> None:
    calls: list[str] = []
    timer = _timer({"float32": 1.0, "bfloat16": 2.0, "int8": 0.2}, calls, flip="int8")
    _, decision = _choose(tiny, tmp_path, timer, candidates=("float32", "bfloat16", "int8"))
    assert "int8" in calls and decision.chosen == "float32"
    assert "int8" not in autodtype.candidates_for(torch.device("cpu"))


def test_auto_measures_from_float32_only(tiny: LoadedModel, tmp_path: Path) -> None:
    half = autodtype.convert(tiny, "bfloat16")
    with pytest.raises(ModelError, match="float32"):
        _choose(half, tmp_path, _timer({}, []))


def test_load_measures_only_for_auto(tiny_dir: Path, tmp_path: Path) -> None:
    task = load_task()
    loaded, decision = autodtype.load(
        str(tiny_dir), task, lambda m: Engine(m, task), dtype="float32", cache_dir=tmp_path
    )
    assert decision is None and loaded.dtype == torch.float32 and not list(tmp_path.iterdir())
    loaded, decision = autodtype.load(str(tiny_dir), task, lambda m: Engine(m, task), cache_dir=tmp_path)
    assert decision is not None and loaded.dtype_name == decision.chosen
    assert decision.key["model"] == autodtype.model_digest(str(tiny_dir))


def test_engine_load_logs_what_it_chose(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``worker_start`` logs: the dtype decision (measured, then cached) and the threads rule."""
    from worker.engine.options import EngineOptions

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path))
    before = torch.get_num_threads()
    try:
        first = Engine.load(EngineOptions(model=str(tiny_dir), threads=1)).describe()
        again = Engine.load(EngineOptions(model=str(tiny_dir), threads=1)).describe()
        fixed = Engine.load(EngineOptions(model=str(tiny_dir), dtype="float32", threads=1)).describe()
    finally:
        torch.set_num_threads(before)
    assert first["dtype_chosen"] == first["dtype"] and not first["dtype_cached"]
    assert set(first["dtype_pass_ms"]) == {"float32", "bfloat16"}
    assert again["dtype_cached"] and again["dtype_chosen"] == first["dtype_chosen"]
    assert fixed["dtype_chosen"] == "float32" and "dtype_pass_ms" not in fixed
    assert first["threads"] == 1 and "operator" in first["threads_rule"] and first["processes_suggested"] >= 1
    assert len(list((tmp_path / "dtype").iterdir())) == 1


def test_a_command_without_the_workers_heads_decides_the_dtype_as_they_do(
    tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train (and eval of a question's head file) load no head: judged by zero-shot labels, auto chose
    float32 on a Xeon where the workers, judged by their heads' features, chose bfloat16, so train fitted
    heads to float32 features that the workers then read in bfloat16, and the publish gate retrained the
    task's own head (8 minutes on the banking example) instead of finding the workers' cached one."""
    from worker.engine.options import EngineOptions

    monkeypatch.setenv("TICKETQ_CACHE_DIR", str(tmp_path))
    before = torch.get_num_threads()
    try:
        worker = Engine.load(EngineOptions(model=str(tiny_dir), threads=1)).describe()
        none = EngineOptions(model=str(tiny_dir), head="none", threads=1)
        command = Engine.load(none, questions=False, as_worker=True)
        assert command.head is None  # still no head: only the dtype is decided as for the workers
        trained = command.describe()
        zero_shot = Engine.load(none).describe()
    finally:
        torch.set_num_threads(before)
    assert trained["dtype_cached"] and trained["dtype"] == worker["dtype"]  # the workers' own decision
    assert not zero_shot["dtype_cached"]  # a zero-shot worker's is another, judged on its labels
    assert len(list((tmp_path / "dtype").iterdir())) == 2


def _heads_trial(dtype: str, seconds: float, error: float) -> Trial:
    return Trial(dtype, seconds, (), 0.0, error)


def test_a_head_decided_task_is_judged_on_its_features() -> None:
    """No zero-shot labels to agree on: a candidate whose features stay within the tolerance wins on speed;
    one further off (int8 on SmolLM2: ~45% of the tickets' spread) is rejected, and the reason says why."""
    close, far = autodtype.FEATURE_TOLERANCE / 4, autodtype.FEATURE_TOLERANCE * 4
    chosen, reason = pick([_heads_trial("float32", 1.0, 0.0), _heads_trial("bfloat16", 0.5, close)])
    assert chosen == "bfloat16" and "features agree" in reason
    chosen, reason = pick([_heads_trial("float32", 1.0, 0.0), _heads_trial("int8", 0.2, far)])
    assert chosen == "float32" and "int8 (features 40% off)" in reason
    d = DtypeChoice(
        "bfloat16", "why", (_heads_trial("float32", 1.0, 0.0), _heads_trial("bfloat16", 0.5, close)), {}
    )
    back = DtypeChoice.from_json(json.loads(json.dumps(d.to_json())))
    assert back.trials == d.trials
    assert d.log_fields()["dtype_feature_error"] == {"float32": 0.0, "bfloat16": round(close, 4)}


def test_feature_error_is_relative_to_the_tickets_spread_per_block() -> None:
    ref = torch.tensor([[0.0, 0.0, 100.0, 100.0], [2.0, 0.0, 300.0, 100.0]])
    assert autodtype.feature_error(ref.clone(), ref, 2) == 0.0
    # 0.2 off in the small block (spread 1.41) weighs as much as 20 off in the large one (spread 141)
    small = ref + torch.tensor([[0.2, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    large = ref + torch.tensor([[0.0, 0.0, 20.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert autodtype.feature_error(small, ref, 2) == pytest.approx(autodtype.feature_error(large, ref, 2))
    assert autodtype.feature_error(small, ref, 2) == pytest.approx(0.2 / 2**0.5)


def _noisy_timer(seconds: dict[str, float], noisy: str | None = None) -> Timer:
    """Made-up timings; ``noisy`` gets features as far from float32's as the tickets are from each other."""

    def timer(name: str, run: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
        out = run()
        if name == noisy:
            out = out + torch.randn(out.shape, generator=torch.Generator().manual_seed(0)) * out.std(0)
        return seconds[name], out

    return timer


def test_a_head_decided_task_times_and_judges_the_features_pass(
    tiny: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The features pass is what is timed and compared; the recipes are part of the cached decision's
    key, and a candidate with features far off is never chosen. (The tiny model's random weights put
    bfloat16's features ~17% off float32's, SmolLM2's 2%: the tolerance is raised for it here.)"""
    from worker.engine.recipe import Recipe

    monkeypatch.setattr(autodtype, "FEATURE_TOLERANCE", 0.5)
    recipes = [Recipe.parse("1:mean"), Recipe.parse("1:mean,2:max")]
    fast = {"float32": 1.0, "bfloat16": 0.4}
    _, decision = _choose(tiny, tmp_path, _noisy_timer(fast), recipes=recipes)
    assert decision.chosen == "bfloat16" and not decision.cached, decision.reason
    [trial] = [t for t in decision.trials if t.dtype == "bfloat16"]
    assert trial.labels == () and 0 < (trial.feature_error or 0) < 0.5
    assert decision.key["heads"] == "1:mean;1:mean,2:max"
    assert _choose(tiny, tmp_path, _noisy_timer(fast), recipes=recipes)[1].cached
    assert not _choose(tiny, tmp_path, _noisy_timer(fast))[1].cached  # zero-shot: another decision
    _, noisy = _choose(tiny, tmp_path / "n", _noisy_timer(fast, "bfloat16"), recipes=recipes)
    assert noisy.chosen == "float32" and "bfloat16 (features" in noisy.reason


def test_planned_recipes_are_what_the_heads_will_read(tmp_path: Path) -> None:
    from dataclasses import replace

    from worker.engine.recipe import Preset, Recipe
    from worker.engine.task import Question
    from worker.engine.training import planned_recipes

    task = load_task()  # the built-in task: a head trained from head_data, default recipe
    assert planned_recipes(task, None, 30) == [Recipe.default(30)]
    assert planned_recipes(task, "none", 30) is None  # zero-shot: its label-scoring pass
    assert planned_recipes(replace(task, head_data=None), None, 30) is None
    q = Question("intent", ("a", "b"), head_data="x.csv", recipe=Recipe.parse("8:mean,12:max"))
    asked = replace(task, questions=(q,))
    assert planned_recipes(asked, None, 30) == [Recipe.default(30), Recipe.parse("8:mean,12:max")]
    intents = tuple(f"intent_{i}" for i in range(12))  # a fine-grained question without a recipe
    fine = replace(task, questions=(Question("intent", intents, head_data="x.csv"),))
    assert planned_recipes(fine, None, 30) == [
        Recipe.default(30),
        Recipe.parse("8:mean,12:mean,8:rare,12:rare,8:max,12:max,chars"),
    ]
    accurate = replace(
        task, questions=(Question("intent", intents, head_data="x.csv", recipe=Preset("accurate")),)
    )
    assert planned_recipes(accurate, None, 30) == [
        Recipe.default(30),
        Recipe.parse("8:mean,12:mean,8:rare,12:rare,8:max,12:max,24:echo,28:echo,chars"),
    ]
