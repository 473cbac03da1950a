"""The producer side: Client (on fakeredis where no worker is needed) and ticketq-producer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fakeredis
import pytest
from support import run_producer_cli as run_cli

from producer import files
from producer.client import Client
from producer.exitcodes import Exit
from producer.protocol import BadTicket, DeadLetter, Keys, Ticket


def test_importing_the_producer_never_imports_the_worker_or_torch() -> None:
    code = (
        "import sys, producer, producer.protocol, producer.client, producer.cli\n"
        "banned = {'torch', 'transformers', 'worker', 'rq'}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_push_validates_everything_before_pushing_anything(fake_redis: fakeredis.FakeRedis) -> None:
    client = Client(fake_redis, "p")
    with pytest.raises(BadTicket, match=r"ticket #1: missing field: text"):
        client.push([{"id": "a", "text": "fine"}, {"id": "b"}])
    assert fake_redis.llen("p:tickets") == 0


def test_push_lpushes_in_order_so_the_first_is_served_first(fake_redis: fakeredis.FakeRedis) -> None:
    client = Client(fake_redis, "p")
    ids = client.push([Ticket("a", "one"), {"id": "b", "text": "two", "customer": "acme"}])
    assert ids == ["a", "b"]
    oldest = json.loads(fake_redis.lindex("p:tickets", -1))  # type: ignore[arg-type]
    assert oldest["id"] == "a"
    assert json.loads(fake_redis.lindex("p:tickets", 0))["customer"] == "acme"  # type: ignore[arg-type]


def test_wait_times_out_with_the_pending_ids(fake_redis: fakeredis.FakeRedis) -> None:
    waited = Client(fake_redis, "p").wait(["nope"], timeout=0.2)
    assert waited.pending == {"nope"} and not waited.complete


def test_wait_finds_tickets_that_died_before_it_began(fake_redis: fakeredis.FakeRedis) -> None:
    fake_redis.lpush("p:dead", DeadLetter("duplicate id", b"{}", id="x").to_json())
    waited = Client(fake_redis, "p").wait(["x"], timeout=5)
    assert waited.dead == {"x": "duplicate id"} and waited.complete


def test_an_unreachable_redis_is_one_line_and_exit_3(keys: Keys) -> None:
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "stats")
    assert code == 3 and "cannot reach Redis" in err


def test_push_refuses_a_file_it_cannot_read_or_whose_ids_repeat(tmp_path: Path) -> None:
    keys = Keys("p")
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", str(tmp_path / "nope.csv"))
    assert code == Exit.CONFIG and "nope.csv: cannot read: No such file or directory" in err
    latin = tmp_path / "latin.csv"
    latin.write_bytes("id,text\nA1,ok\nA2,caf\xe9\n".encode("latin-1"))
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", str(latin))
    assert code == Exit.CONFIG and "latin.csv: line 3: not UTF-8" in err
    twice = tmp_path / "twice.csv"
    twice.write_text("id,text\nA1,hello\nA2,hi\nA1,again\n")
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", str(twice))
    assert code == Exit.CONFIG and "twice.csv: line 4: id 'A1' repeats line 2" in err


def test_push_reads_no_more_than_its_bound_of_an_endless_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``push /dev/zero`` read until the machine ran out of memory (the file is read whole: a push is all or
    nothing). Now at most MAX_FILE_BYTES of a file or of stdin, then one line and exit 2; the bad-byte line
    number holds for stdin too."""
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2**20)
    keys = Keys("p")
    big = tmp_path / "big.csv"
    big.write_bytes(b"id,text\n" + b"a" * 2**20)
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", str(big))
    assert code == Exit.CONFIG and "big.csv: larger than 1 MiB: split it" in err
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", "/dev/zero")
    assert code == Exit.CONFIG and "/dev/zero: larger than 1 MiB: split it" in err
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", "-", stdin="id,text\n" + "a" * 2**20)
    assert code == Exit.CONFIG and "stdin: larger than 1 MiB" in err
    code, _, err = run_cli("redis://127.0.0.1:1/0", keys, "push", "-", stdin="id,text\nA1,\udcff\n")
    assert code == Exit.CONFIG and "stdin: line 2: not UTF-8" in err


def test_an_argument_that_is_not_utf8_is_named_before_any_command_runs() -> None:
    """Bytes that are not UTF-8 (a shell variable, a file name) reach Python as lone surrogates: each
    command failed at its first use with "'utf-8' codec can't encode character", naming nothing."""
    keys = Keys("p")
    for args, named in (
        (("get", "T-\udcff"), "argument ids 'T-\\udcff'"),
        (("review", "--question", "q\udcff"), "argument question 'q\\udcff'"),
        (("label", "T-1", "billing", "--by", "\udcff"), "argument by '\\udcff'"),
    ):
        code, _, err = run_cli("redis://127.0.0.1:1/0", keys, *args)
        assert code == Exit.CONFIG and err == f"ticketq-producer: {named} is not UTF-8 text\n"
    code, _, err = run_cli("redis://u:s3cret\udcff@127.0.0.1:1/0", keys, "stats")
    assert code == Exit.CONFIG and "argument redis-url" in err and "s3cret" not in err


def test_a_file_name_that_is_not_utf8_is_pushed_as_before(tmp_path: Path) -> None:
    """A path is never sent to Redis, and open() takes a name of any bytes (review: the check above
    refused a Latin-1 file name that push had read)."""
    name = os.fsencode(tmp_path) + b"/caf\xe9.jsonl"
    with open(name, "wb") as fh:
        fh.write(b'{"id": "a", "text": ""}\n')
    code, _, err = run_cli("redis://127.0.0.1:1/0", Keys("p"), "push", os.fsdecode(name))
    assert code == Exit.CONFIG and "line 1: empty field: text" in err  # read and checked, not refused
