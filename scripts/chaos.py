#!/usr/bin/env python3
"""Chaos run: kill workers, their connections and Redis while tickets flow, then prove none was lost.

    scripts/chaos.py --tickets 5000 --workers 4 --kills 36 --client-kills 6 --redis-restarts 3 --duration 60

The harness lives in worker/chaos/ (``python -m worker.chaos`` is the same); see docs/chaos.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, installed or not

from worker.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main())
