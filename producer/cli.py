"""``ticketq-producer``: push tickets (JSONL or CSV), wait for and read results, stats, dead letters;
record corrections (``label``, ``corrections``) and manage published heads (``heads``, ``publish-head``).

Input for ``push``: JSON Lines (one ticket object per line) or CSV with a header that has ``id`` and
``text`` (other columns are passed through to the result as ``fields``), read by :mod:`producer.files`.
Every ticket is validated before any is pushed, so a bad line fails the command with its line number and
pushes nothing.

Exit codes: :mod:`producer.exitcodes` (``FAILED``: ``push --wait`` or ``get`` did not find a result for
every ticket).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import redis

from producer import config, review
from producer.client import Client, LabelError, encode, mask_url
from producer.config import Check, at_least, between, option
from producer.exitcodes import Exit, epilog, for_redis_error
from producer.files import FORMATS, FileError, parse, read_text
from producer.learning import MAX_HEAD_BYTES
from producer.options import QuestionOptions, RedisOptions
from producer.protocol import BadTicket
from producer.strictjson import encodable


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if bad := _not_utf8(args):  # bytes a shell variable or a file name passed: named before any command
        print(f"ticketq-producer: argument {bad} is not UTF-8 text", file=sys.stderr)
        return Exit.CONFIG
    # a lone surrogate in a record written by hand is printed as \udxxx, never a crash
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        where = config.resolve(RedisOptions, args, os.environ)
        client = Client.from_url(
            where.redis_url, where.prefix, cluster=where.cluster, socket_connect_timeout=5
        )
        return int(args.func(client, args))
    except (FileError, LabelError) as exc:
        print(f"ticketq-producer: {exc}", file=sys.stderr)
        return Exit.CONFIG
    except ValueError as exc:  # a malformed --redis-url, a bad --limit
        print(f"ticketq-producer: {exc}", file=sys.stderr)
        return Exit.CONFIG
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException) as exc:
        print(f"ticketq-producer: cannot reach Redis: {type(exc).__name__}: {exc}", file=sys.stderr)
        return for_redis_error(exc)
    except redis.exceptions.InvalidResponse as exc:  # an HTTP server, a proxy, another protocol
        print(f"ticketq-producer: the server does not answer as Redis does: {exc}"[:300], file=sys.stderr)
        return Exit.REDIS_ACCESS
    except redis.ResponseError as exc:
        print(f"ticketq-producer: Redis refused a command: {exc}", file=sys.stderr)
        return for_redis_error(exc)


def _not_utf8(args: argparse.Namespace) -> str:
    """The first argument sent to Redis that is not UTF-8 (Python holds its bytes as lone surrogates), as
    ``--name 'T-\\udcff'``; "" when all are. Otherwise each command failed at its first use of it, with
    "'utf-8' codec can't encode character '\\udcff'", naming neither the argument nor its value."""
    for name, value in vars(args).items():
        if name == "file":  # a path: open() takes a name of any bytes, and it is never sent to Redis
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not encodable(item):
                shown = mask_url(item) if name == "redis_url" else item
                return f"{name.replace('_', '-')} {ascii(shown)[:120]}"
    return ""


def _by_default() -> str | None:
    return os.environ.get("USER") or None


@dataclass(frozen=True)
class PushOptions:
    format: str = option(
        "auto", help="input format (auto: by the file's suffix, else its content)", choices=FORMATS
    )
    wait: bool = option(False, help="wait for the results and print them as JSONL")
    timeout: float = option(
        60.0, help="seconds to wait with --wait (at most a day)", check=between(0, 86_400)
    )

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class TableOptions:
    json: bool = option(False, help="JSON instead of a table")


@dataclass(frozen=True)
class DeadOptions:
    limit: int = option(20, help="newest dead letters to print", check=at_least(1))

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class ReviewOptions:
    limit: int = option(100, help="tickets to print, smallest margin first", check=at_least(1))

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class RequeueOptions:
    reason: str | None = option(None, help="only letters whose reason starts with this (e.g. 'engine error')")
    limit: int | None = option(None, help="at most this many, oldest first", shown="all", check=at_least(1))
    ticket_id: str | None = option(
        None,
        help="only the letter(s) of this ticket id",
        flag="id",
        shown="any",
        check=Check(bool, "must be a ticket id, not empty (leave --id out for any)"),
    )
    poison: bool = option(False, help="poison letters too (else only with `--reason poison` or `--id`)")

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class ByOptions:
    by: str | None = option(
        default_factory=_by_default, help="who made the change (recorded with it)", shown="$USER"
    )


def _check(obj: object) -> None:
    found = config.problems(obj)
    if found:
        raise ValueError("; ".join(found))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ticketq-producer",
        description="Feed tickets to ticketq and read what it made of them.",
        epilog=epilog(),
    )
    config.add_arguments(parser, RedisOptions)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    push = sub.add_parser("push", help="push tickets from a JSONL or CSV file ('-' reads stdin)")
    push.add_argument("file", metavar="FILE|-")
    config.add_arguments(push, PushOptions)
    push.set_defaults(func=cmd_push)
    get = sub.add_parser("get", help="print the results of ticket ids as JSONL")
    get.add_argument("ids", nargs="+", metavar="ID")
    get.set_defaults(func=cmd_get)
    stats = sub.add_parser("stats", help="queue depth, in-flight per worker, done, dead")
    config.add_arguments(stats, TableOptions)
    stats.set_defaults(func=cmd_stats)
    dead = sub.add_parser("dead", help="the newest dead letters as JSONL")
    config.add_arguments(dead, DeadOptions)
    dead.set_defaults(func=cmd_dead)
    requeue = sub.add_parser(
        "requeue-dead", help="move dead letters back onto the queue, oldest first, in short atomic steps"
    )
    config.add_arguments(requeue, RequeueOptions)
    requeue.set_defaults(func=cmd_requeue_dead)
    label = sub.add_parser("label", help="record the right label of a ticket a worker has labelled")
    label.add_argument("id", metavar="ID")
    label.add_argument("label", metavar="LABEL")
    config.add_arguments(label, ByOptions)
    config.add_arguments(label, QuestionOptions)
    label.set_defaults(func=cmd_label)
    unlabel = sub.add_parser("unlabel", help="withdraw a ticket's correction (train no longer learns it)")
    unlabel.add_argument("id", metavar="ID")
    config.add_arguments(unlabel, QuestionOptions)
    unlabel.set_defaults(func=cmd_unlabel)
    corrections = sub.add_parser("corrections", help="the recorded corrections as JSONL")
    config.add_arguments(corrections, QuestionOptions, env=False)
    corrections.set_defaults(func=cmd_corrections)
    unsure = sub.add_parser("review", help="tickets that need review, smallest margin first, as JSONL")
    config.add_arguments(unsure, ReviewOptions, env=False)
    config.add_arguments(unsure, QuestionOptions, env=False)
    unsure.set_defaults(func=cmd_review)
    heads = sub.add_parser("heads", help="the published heads, newest first (the first is current)")
    config.add_arguments(heads, TableOptions)
    config.add_arguments(heads, QuestionOptions)
    heads.set_defaults(func=cmd_heads)
    publish = sub.add_parser("publish-head", help="publish a head file to every worker (e.g. to roll back)")
    publish.add_argument("file", metavar="FILE")
    config.add_arguments(publish, ByOptions)
    config.add_arguments(publish, QuestionOptions)
    publish.set_defaults(func=cmd_publish_head)
    return parser


def read_tickets(stream: TextIO, fmt: str = "auto", name: str = "") -> list[dict[str, Any]]:
    """Every ticket in the input (see :mod:`producer.files`), validated by the protocol's own rules;
    :class:`FileError` names the first bad line."""
    tickets = []
    where = f"{name}: " if name else ""
    first: dict[str, int] = {}  # id -> the line it was first given on
    for line, row in parse(stream.read(), fmt, name):
        try:
            encode(row)
        except BadTicket as exc:
            raise FileError(f"{where}line {line}: {exc.reason}") from None
        tid = str(row["id"])
        if tid in first:  # pushed, it would end as a result and a "duplicate id" dead letter
            raise FileError(f"{where}line {line}: id {tid!r:.80} repeats line {first[tid]}")
        first[tid] = line
        tickets.append(row)
    return tickets


def cmd_push(client: Client, args: argparse.Namespace) -> int:
    opts = config.resolve(PushOptions, args)
    stdin = args.file == "-"
    text = read_text(sys.stdin.buffer, "stdin") if stdin else read_text(args.file)
    tickets = read_tickets(io.StringIO(text, newline=""), opts.format, "" if stdin else args.file)
    if not opts.wait:
        print(f"pushed {len(client.push(tickets))} tickets", file=sys.stderr)
        return 0
    ids = [str(t["id"]) for t in tickets]
    print(f"pushing {len(ids)} tickets and waiting up to {opts.timeout:g} s", file=sys.stderr)
    waited = client.push_and_wait(tickets, timeout=opts.timeout)
    for tid in dict.fromkeys(ids):
        if tid in waited.results:
            print(waited.results[tid].to_json())
        elif tid in waited.dead:
            print(json.dumps({"id": tid, "dead": waited.dead[tid]}, ensure_ascii=False))
        else:
            print(json.dumps({"id": tid, "pending": True}))
    if waited.pending:
        print(f"{len(waited.pending)} tickets still pending after {opts.timeout:g} s", file=sys.stderr)
    return Exit.OK if len(waited.results) == len(set(ids)) else Exit.FAILED


def cmd_get(client: Client, args: argparse.Namespace) -> int:
    unreadable: dict[str, str] = {}
    found = client.get_many(args.ids, unreadable=unreadable)
    for tid in args.ids:
        if tid in found:
            print(found[tid].to_json())
        elif tid in unreadable:  # a record no worker wrote: named, the others still printed
            print(f"result for {tid} is unreadable: {unreadable[tid]}", file=sys.stderr)
        else:
            print(f"no result for {tid}", file=sys.stderr)
    return Exit.OK if len(found) == len(set(args.ids)) else Exit.FAILED


def cmd_stats(client: Client, args: argparse.Namespace) -> int:
    stats = client.stats()
    if config.resolve(TableOptions, args).json:
        print(json.dumps({**asdict(stats), "inflight": stats.inflight, "alive": stats.alive}))
        return 0
    print(f"waiting    {stats.waiting}")
    print(f"in flight  {stats.inflight}")
    print(f"done       {stats.done}")
    print(f"dead       {stats.dead}")
    print(f"workers    {stats.alive} alive of {len(stats.workers)}")
    if stats.workers:
        width = max(len("WORKER"), *(len(w.id) for w in stats.workers))
        # HEAD: the published head version each serves (-: its task's own, or none): a fleet that
        # disagrees after a publish shows it here
        print(f"  {'WORKER':<{width}}  {'ALIVE':<5}  {'IN-FLIGHT':>9}  {'HEAD':>5}  MODEL")
        for w in stats.workers:
            alive = "yes" if w.alive else "no"
            head = str(w.info.get("head_version") or "-")
            print(f"  {w.id:<{width}}  {alive:<5}  {w.inflight:>9}  {head:>5}  {w.info.get('model', '')}")
    for w in stats.workers:  # keys made by hand: named, every other worker still shown
        if w.problem:
            print(f"ticketq-producer: worker {w.id}: {w.problem}", file=sys.stderr)
    return 0


def cmd_dead(client: Client, args: argparse.Namespace) -> int:
    for letter in client.dead(config.resolve(DeadOptions, args).limit):
        print(letter.to_json())
    return 0


def cmd_requeue_dead(client: Client, args: argparse.Namespace) -> int:
    opts = config.resolve(RequeueOptions, args)
    ids = client.requeue_dead(
        reason=opts.reason, limit=opts.limit, ticket_id=opts.ticket_id, poison=opts.poison
    )
    for tid in ids:
        print(tid)
    print(f"requeued {len(ids)} dead letters", file=sys.stderr)
    return 0


def cmd_label(client: Client, args: argparse.Namespace) -> int:
    question = config.resolve(QuestionOptions, args).question
    correction = client.label(args.id, args.label, by=config.resolve(ByOptions, args).by, question=question)
    was = f" (was {correction.was})" if correction.was is not None else ""
    print(f"{args.id}: {correction.label}{was}", file=sys.stderr)
    return 0


def cmd_unlabel(client: Client, args: argparse.Namespace) -> int:
    gone = client.unlabel(args.id, config.resolve(QuestionOptions, args).question)
    what = f" {gone.label}" if gone.label else ""
    print(f"{args.id}: correction{what} withdrawn", file=sys.stderr)
    return 0


def cmd_corrections(client: Client, args: argparse.Namespace) -> int:
    for c in sorted(
        client.correction_records(config.resolve(QuestionOptions, args).question), key=lambda c: (c.at, c.id)
    ):
        print(json.dumps({"id": c.id, **json.loads(c.to_json())}, ensure_ascii=False))
    return 0


def cmd_review(client: Client, args: argparse.Namespace) -> int:
    """One JSON object a line: id, confidence, label, top (labels with p), text, at, head. Confirm or correct
    one with ``label ID LABEL``: that records a correction and takes it off the queue. ``--question NAME``:
    the tickets whose answer to NAME needs review (``question`` in each line; label them with ``label ID
    LABEL --question NAME``)."""
    question = config.resolve(QuestionOptions, args).question
    for item in review.read_all(client, config.resolve(ReviewOptions, args).limit, question):
        print(json.dumps(item.to_dict(), ensure_ascii=False))
    return 0


def cmd_heads(client: Client, args: argparse.Namespace) -> int:
    versions = client.head_versions(config.resolve(QuestionOptions, args).question)
    if config.resolve(TableOptions, args).json:
        for v in versions:
            print(v.to_json())
        return 0
    if not versions:
        print("no head published", file=sys.stderr)
        return 0
    print(f"{'VERSION':>7}  {'PUBLISHED (UTC)':<19}  {'BYTES':>9}  {'SHA256':<12}  {'BY':<10}  GATE")
    for v in versions:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(v.at))
        g = v.gate or {}
        gate = f"{g['candidate']:.1%} vs {g['current']:.1%}" if "candidate" in g else ""
        gate += " (forced)" if g.get("forced") else ""
        print(f"{v.version:>7}  {when:<19}  {v.size:>9}  {v.sha256[:12]:<12}  {v.by or '':<10}  {gate}")
    return 0


def cmd_publish_head(client: Client, args: argparse.Namespace) -> int:
    try:
        with open(args.file, "rb") as f:
            data = f.read(MAX_HEAD_BYTES + 1)  # one byte past the bound: refused, not read on (/dev/zero)
    except OSError as exc:
        raise FileError(f"{args.file}: {exc.strerror}") from None
    try:
        question = config.resolve(QuestionOptions, args).question
        version = client.publish_head(data, by=config.resolve(ByOptions, args).by, question=question)
    except ValueError as exc:
        raise FileError(f"{args.file}: {exc}") from None
    print(f"published {args.file} as head version {version}", file=sys.stderr)
    return 0
