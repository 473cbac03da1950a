"""Operations, without Redis or torch: metrics, the watchdog, settings checked before the model loads,
the enqueue stamp, logs that carry the worker id and swallow the standard library's records."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading
import time
import urllib.request
from typing import Any

import pytest
import structlog

from producer.client import encode
from producer.protocol import BadTicket, Result, cluster_prefix, decode_ticket
from worker import cli, logs, wiring
from worker.engine.options import EngineOptions
from worker.errors import ConfigError
from worker.heartbeat import Heartbeat
from worker.metrics import Metrics
from worker.preflight import check
from worker.settings import Settings

# -- metrics -----------------------------------------------------------------------------------------


def test_metrics_count_answers_per_question_and_name_each_questions_head() -> None:
    m = Metrics()

    class Head:
        id, version = "h1", "3"

    m.set_question_heads({"intent": Head(), "urgency": None})
    m.observe_answers(
        [
            {"intent": {"label": "lost_card"}},
            {"intent": {"label": "lost_card"}, "urgency": {"label": "high"}},
            {},
        ]
    )
    text = m.render().decode()
    for line in (
        'ticketq_answers_total{label="lost_card",question="intent"} 2.0',
        'ticketq_answers_total{label="high",question="urgency"} 1.0',
        'ticketq_question_head_info{id="h1",question="intent",version="3"} 1.0',
        'ticketq_question_head_info{id="",question="urgency",version=""} 1.0',
    ):
        assert line in text, line


def test_metrics_render_the_documented_names_and_serve_them_over_http() -> None:
    m = Metrics()
    m.set_worker_info("w1", {"model": "m", "dtype": "float32", "device": "cpu"})
    m.set_head_info(head_id="abc123", version="7", model="m")
    m.observe_pass(0.02, real_tokens=80, padded_tokens=100)
    m.observe_drain(
        0.05, ["billing", "billing", "account"], ["not JSON: Expecting value"], 1, [(0.02, 80, 100)]
    )
    m.queue_wait.observe(1.5)
    text = m.render().decode()
    for line in (
        'ticketq_tickets_total{outcome="labelled"} 3.0',
        'ticketq_tickets_total{outcome="dead"} 1.0',
        'ticketq_labels_total{label="billing"} 2.0',
        'ticketq_dead_letters_total{reason="not JSON"} 1.0',
        "ticketq_padding_ratio 0.2",
        "ticketq_tokens_per_second 4000.0",
        'ticketq_head_info{id="abc123",method="head",model="m",version="7"} 1.0',
        "ticketq_pass_seconds_count 1.0",
        "ticketq_drain_seconds_count 1.0",
        "ticketq_queue_wait_seconds_count 1.0",
    ):
        assert line in text, line
    server = m.serve(0, addr="127.0.0.1")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b"ticketq_tickets_total" in resp.read()
    finally:
        server.shutdown()
        server.server_close()


# -- the watchdog ----------------------------------------------------------------------------------


class _BeatQueue:
    worker_id = "w1"

    def __init__(self) -> None:
        self.beats = 0
        self.dropped = False

    def beat(self, info: dict[str, Any], ttl_s: float) -> None:
        self.beats += 1

    def drop_heartbeat(self) -> None:
        self.dropped = True


def test_the_heartbeat_renews_only_while_the_loop_makes_progress() -> None:
    q = _BeatQueue()
    stalled = threading.Event()
    hb = Heartbeat(q, 1.0, 0.02, {}, stall_timeout_s=0.3, on_stall=lambda idle: stalled.set())  # type: ignore[arg-type]
    hb.start()
    try:
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:  # the loop is busy and moving
            hb.progress()
            time.sleep(0.01)
        assert not stalled.is_set() and q.beats > 5
        assert stalled.wait(2), "no progress for the stall timeout: the watchdog must fire"
        beats = q.beats
        time.sleep(0.1)
        assert q.beats == beats and q.dropped  # no more beats, and the key is dropped for peers
    finally:
        hb.stop()


def test_the_stall_timeout_defaults_from_the_batch_budget() -> None:
    assert Settings().stall_timeout == 8192 / 10
    assert Settings(engine=EngineOptions(max_batch_tokens=512)).stall_timeout == 60.0
    assert Settings(stall_timeout_s=5).stall_timeout == 5


# -- settings errors before the model loads --------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dtype", "float8"], "dtype: one of"),
        (["--device", "tpu"], "device: one of"),
        (["--task", "/no/such/task.toml"], "task: task file not found"),
        (["--model", "/no/such/model.gguf"], "model: no such file"),
        (["--model", "fake:a,b"], "model: 'fake:a,b' is neither"),  # the fake is tools/, not the wheel
        (["--route", "nosuch=q"], "route: unknown label(s) nosuch"),
        (["--redis-url", "redis://host:port"], "redis-url:"),
        (["--cluster", "--route", "billing=q"], "route: RQ routing needs a plain Redis"),
        (["--metrics-port", "70000"], "metrics-port"),
    ],
)
def test_every_settings_error_exits_2_before_any_model_loads(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_serve(_: Any) -> Any:
        raise AssertionError("the model must not load")

    monkeypatch.setattr(wiring, "serve", no_serve)
    torch_before = "torch" in sys.modules
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert ("torch" in sys.modules) == torch_before


def test_preflight_accepts_the_default_task_and_hub_ids() -> None:
    assert "billing" in check(Settings())
    assert "billing" in check(Settings(engine=EngineOptions(model="Qwen/Qwen2.5-0.5B-Instruct")))
    with pytest.raises(ConfigError, match="model:"):
        check(Settings(engine=EngineOptions(model="not a hub id!")))


# -- the enqueue stamp -------------------------------------------------------------------------------


def test_producers_stamp_enqueued_at_and_the_decoder_checks_it() -> None:
    raw, ticket = encode({"id": "a", "text": "hi"}, stamp=1000.5)
    assert json.loads(raw)["enqueued_at"] == 1000.5 and ticket.enqueued_at == 1000.5
    assert "enqueued_at" not in ticket.fields
    _, own = encode({"id": "a", "text": "hi", "enqueued_at": 7}, stamp=1000.5)
    assert own.enqueued_at == 7.0  # a producer's own stamp is kept
    with pytest.raises(BadTicket, match="enqueued_at must be a number"):
        decode_ticket(b'{"id": "a", "text": "hi", "enqueued_at": "yesterday"}')
    assert decode_ticket(b'{"id": "a", "text": "hi"}').enqueued_at is None
    r = Result(id="a", label="x", scores={"x": 1.0}, model="m", digest="d", queued_s=1.23456, took_s=0.5)
    back = Result.from_json(r.to_json())
    assert (back.queued_s, back.took_s) == (1.235, 0.5)


def test_cluster_prefixes_get_one_hash_tag() -> None:
    assert cluster_prefix("ticketq") == "{ticketq}"
    assert cluster_prefix("{ticketq}") == "{ticketq}"
    assert cluster_prefix("app:{q1}") == "app:{q1}"
    assert cluster_prefix("a{}b") == "{a{}b}"


# -- logs --------------------------------------------------------------------------------------------


def test_every_event_and_every_stdlib_record_is_one_json_line_with_the_worker_id() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        logs.configure("json", "info", stream=out, bind={"worker_id": "w-9"}, stdlib=True)
        logs.get_logger("worker.test").info("hello", n=1)
        threading.Thread(target=lambda: logs.get_logger("t").warning("from_thread")).start()
        time.sleep(0.05)
        logging.getLogger("transformers.modeling_utils").warning("Some weights were not used")
        logging.getLogger("redis").info("chatter below warning is dropped")
        logs.get_logger("worker.test").info("secret", url="redis://u:hunter2@h:6379/0")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
        structlog.reset_defaults()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["hello", "from_thread", "Some weights were not used", "secret"]
    assert all(e["worker_id"] == "w-9" for e in lines)
    assert lines[2]["logger"] == "transformers.modeling_utils" and lines[2]["level"] == "warning"
    assert "hunter2" not in out.getvalue()
