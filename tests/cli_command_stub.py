"""A stand-in for worker.verify / worker.bench / worker.evaluate in tests of ticketq-worker's dispatch."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--answer", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    return int(args.answer)
