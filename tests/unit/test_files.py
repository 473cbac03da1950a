"""producer/files.py: the one reader of ticket files, for ticketq-producer and for bench, eval and verify."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from producer.cli import read_tickets
from producer.files import ITEM_COLUMNS, FileError, items_of, parse, read_file
from worker.bench.data import read_items


def test_the_format_is_asked_for_else_told_by_the_suffix_else_by_the_first_character() -> None:
    jsonl, csv = '{"id": "a", "text": "hi"}\n', "id,text\na,hi\n"
    assert parse(jsonl) == [(1, {"id": "a", "text": "hi"})]
    assert parse(csv) == [(2, {"id": "a", "text": "hi"})]
    assert parse(jsonl, name="t.txt") == [(1, {"id": "a", "text": "hi"})]
    with pytest.raises(FileError, match=r"t\.csv: the CSV header needs id and text columns; missing"):
        parse(jsonl, name="t.csv")
    with pytest.raises(FileError, match="line 1: not JSON"):
        parse(csv, fmt="jsonl")


def test_a_spreadsheets_byte_order_mark_is_dropped_for_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes('\ufeffid,text,label\nx,"one, two",billing\n'.encode())
    assert read_file(path) == [(2, {"id": "x", "text": "one, two", "label": "billing"})]
    assert [(it.id, it.label) for it in read_items(path)] == [("x", "billing")]
    with path.open(encoding="utf-8", newline="") as fh:
        assert read_tickets(fh, name=str(path)) == [{"id": "x", "text": "one, two", "label": "billing"}]


def test_rows_that_do_not_fit_name_their_line() -> None:
    with pytest.raises(FileError, match="line 3: more values than header columns"):
        parse("id,text\na,b\nc,d,e\n")
    with pytest.raises(FileError, match="line 2: not a JSON object"):
        parse('{"id": "a", "text": "b"}\n[1]\n')
    with pytest.raises(FileError, match="line 2: empty field"):
        read_tickets(io.StringIO('{"id": "a", "text": "ok"}\n{"id": "b", "text": ""}\n'))


def test_jsonl_splits_on_newline_only_so_a_line_separator_inside_a_text_is_kept() -> None:
    text = '{"id": "a", "text": "one\u2028two\u0085three"}\r\n{"id": "b", "text": "x"}\n'
    rows = parse(text, "jsonl")
    assert [(n, r["id"]) for n, r in rows] == [(1, "a"), (2, "b")]
    assert rows[0][1]["text"] == "one\u2028two\u0085three"


def test_over_deep_json_and_oversized_csv_fields_are_file_errors_with_their_line() -> None:
    deep = '{"id": "a", "text": "x"}\n{"id": "b", "text": "x", "d": ' + "[" * 50_000 + "]" * 50_000 + "}\n"
    with pytest.raises(FileError, match="line 2: nested too deeply"):
        parse(deep, "jsonl")
    huge = "id,text\na,ok\nb," + "x" * 200_000 + "\n"
    with pytest.raises(FileError, match="line 3: field larger than field limit"):
        parse(huge, "csv")
    with pytest.raises(FileError, match="line 1: field larger"):
        parse("id," + "y" * 200_000 + "\n", "csv")


def test_the_workers_files_need_no_id_column_but_tickets_to_push_do(tmp_path: Path) -> None:
    """train, eval, verify and bench read labelled files as spreadsheets export them (``text,label``):
    a row without an id is named by its line; ``push`` still needs ids (results are keyed by them)."""
    path = tmp_path / "t.csv"
    path.write_text('text,label\n"one, two",billing\nthree,account\n')
    assert [(it.id, it.text, it.label) for it in read_items(path)] == [
        ("line 2", "one, two", "billing"),
        ("line 3", "three", "account"),
    ]
    with pytest.raises(FileError, match=r"needs id and text columns; missing \['id'\]"), path.open() as fh:
        read_tickets(fh, name=str(path))
    path.write_text("query,label\nhello,billing\n")
    with pytest.raises(
        FileError, match=r"needs text column; missing \['text'\] \(it has \['query', 'label'\]\)"
    ):
        read_items(path)
    mixed = tmp_path / "m.jsonl"  # ids where given, lines elsewhere; a clash is still a duplicate
    mixed.write_text('{"id": "a", "text": "x"}\n{"text": "y"}\n{"id": "line 2", "text": "z"}\n')
    with pytest.raises(FileError, match="duplicate id 'line 2'"):
        read_items(mixed)


def test_a_quote_never_closed_is_an_error_at_its_row_not_every_later_row_read_as_one_text() -> None:
    """Found by hand: csv's lenient mode read everything after a stray opening quote into that one field,
    so ``push`` sent one ticket where the file held many (and ``train`` learnt one long text). Strict
    parsing names the row the quote opened in; a quote inside an unquoted field is still text."""
    with pytest.raises(FileError, match="line 3: a quote opened in this row is never closed"):
        parse('id,text\na,ok\nb,"never closed\nc,lost\nd,lost too\n', "csv")
    with pytest.raises(FileError, match="line 4: ',' expected after '\"'"):
        parse('id,text\na,"two\nlines"\nc,"q"z\n', "csv")
    assert parse('id,text\na,x"y\nb,"fine, ""quoted"""\n', "csv") == [
        (2, {"id": "a", "text": 'x"y'}),
        (3, {"id": "b", "text": 'fine, "quoted"'}),
    ]


def test_a_repeated_csv_column_or_json_key_is_refused_not_read_as_its_last_value() -> None:
    with pytest.raises(FileError, match=r"the CSV header names \['label'\] more than once"):
        parse("text,label,id,label\nhello,a,1,b\n", "csv", "x.csv")
    with pytest.raises(FileError, match=r"line 2: not JSON: duplicate key 'text'"):
        parse('{"id": "1", "text": "a"}\n{"id": "2", "text": "a", "text": "b"}\n', "jsonl", "x.jsonl")


def test_a_tasks_training_file_is_read_as_train_reads_its_tickets() -> None:
    """head_data: id optional (a spreadsheet's text,label), texts non-empty, ids unique."""
    rows = items_of(parse("text,label\n hello ,a\nbye,b\n", "csv", "d.csv", columns=ITEM_COLUMNS), "d.csv")
    assert [(it.id, it.text, it.label) for it in rows] == [("line 2", "hello", "a"), ("line 3", "bye", "b")]
    with pytest.raises(FileError, match=r"d.csv: line 3: missing or empty text"):
        items_of(parse("text,label\nhello,a\n ,b\n", "csv", "d.csv", columns=ITEM_COLUMNS), "d.csv")
    with pytest.raises(FileError, match=r"d.csv: duplicate id '7'"):
        items_of(parse("id,text,label\n7,a,x\n7,b,y\n", "csv", "d.csv", columns=ITEM_COLUMNS), "d.csv")
