"""The banking example (examples/banking: team + 77 intents) through the real worker service and Redis,
on the embedded SmolLM2: every result answers both questions, each as the question asked alone would.
A small subset (one training row per intent, eight tickets) keeps it quick; the model is the session's."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from producer.protocol import Keys, Result
from worker.connection import connect
from worker.engine import Engine
from worker.engine.hierarchy import consistent
from worker.engine.model import LoadedModel
from worker.engine.task import load_task
from worker.engine.types import Answer
from worker.queue import RedisQueue
from worker.service import Service
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "banking"
CANDIDATES = [
    ROOT.parent / "shared" / "data" / "banking77",
    ROOT.parents[1] / "shared" / "data" / "banking77",
]
BANKING77 = Path(
    os.environ.get("TICKETQ_BANKING77_DIR") or next((c for c in CANDIDATES if c.is_dir()), CANDIDATES[0])
)
pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not (BANKING77 / "train.csv").is_file(), reason=f"Banking77 not at {BANKING77}"),
]


def builder() -> object:
    spec = importlib.util.spec_from_file_location("banking_build", EXAMPLE / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_task_names_every_banking77_intent_and_team() -> None:
    task = load_task(EXAMPLE / "task.toml")
    teams = json.loads((BANKING77 / "routing_map.json").read_text())
    assert set(task.labels) == set(teams.values())
    assert set(task.labels_of("intent")) == set(teams)
    assert dict(task.questions[0].parent) == teams  # the taxonomy the team labels were made from


def test_the_example_answers_team_and_intent_through_the_worker(
    smollm2_f32: LoadedModel, tmp_path: Path, redis_url: str, keys: Keys
) -> None:
    shutil.copy(EXAMPLE / "task.toml", tmp_path / "task.toml")
    build = builder().build  # type: ignore[attr-defined]
    counts = build(BANKING77, tmp_path / "data", per_intent=1, seed=21, test_limit=1, unlabeled_limit=1)
    assert counts == {"train": 77, "test": 77, "unlabeled": 77, "intents": 77}
    engine = Engine(smollm2_f32, load_task(tmp_path / "task.toml"))
    engine.resolve_heads()  # both heads trained from the example's head_data (then cached)
    assert engine.head is not None and set(engine.answer_heads) == {"intent"}
    # the intent head learnt the 77 names and self-trained on the unlabelled rows, as task.toml declares
    assert engine.answer_heads["intent"].training["beyond"]["label_names"] == 77
    assert engine.answer_heads["intent"].training["beyond"]["unlabeled"] == 77
    rows = (tmp_path / "data" / "intent_test.csv").read_text().splitlines()[1:9]
    texts = [row.split(",", 1)[1].rsplit(",", 1)[0].strip('"') for row in rows]
    r = connect(redis_url)
    for i, text in enumerate(texts):
        r.lpush(keys.tickets, json.dumps({"id": f"b-{i}", "text": text}))
    settings = Settings(redis_url=redis_url, prefix=keys.prefix, worker_id="w1", burst=True)
    with capture_logs():
        assert Service(settings, RedisQueue(r, keys, "w1"), engine).run() == 0
    results = [Result.from_json(r.hget(keys.results, f"b-{i}") or b"") for i in range(len(texts))]
    team_alone = engine.asking(None).classify(texts)[0]
    intent_alone = engine.asking("intent").classify(texts)[0]
    parents = engine.task.parents
    for result, team, intent in zip(results, team_alone, intent_alone, strict=True):
        # each question asked alone, then the taxonomy's rule (worker/engine/hierarchy.py) over the two
        want = consistent(replace(team, answers={"intent": Answer(intent.label, intent.scores)}), parents)
        assert result.label == want.label and result.label in engine.task.labels
        answer = result.answers["intent"]
        assert answer["label"] == want.answers["intent"].label and len(answer["scores"]) == 77
        assert parents["intent"][1][answer["label"]] == result.label  # consistent
        assert answer["scores"] == pytest.approx(intent.scores, abs=1e-5)  # the intent head's own
        assert answer["head"] == engine.answer_heads["intent"].name
