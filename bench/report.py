"""What every benchmark shares: the ``--output`` option and writing its JSON report.

A default run prints its table and writes nothing, so the work tree stays clean; ``--output``
alone writes to the benchmark's file under ``bench/results/``, ``--output PATH`` elsewhere.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"


def add_output_option(parser: argparse.ArgumentParser, default_path: Path) -> None:
    parser.add_argument(
        "--output",
        type=Path,
        nargs="?",
        const=default_path,
        default=None,
        help=f"write the JSON report (default path {default_path.relative_to(ROOT)}); "
        "none without it",
    )


def write_report(path: Path | None, report: dict[str, Any]) -> None:
    """Write ``report`` as JSON to ``path`` (nothing when ``--output`` was not given)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    print(f"\nwritten to {shown}")
