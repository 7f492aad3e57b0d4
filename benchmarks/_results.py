"""Writes a benchmark's table as Markdown (``--markdown PATH``) for the documentation site.

The site includes ``benchmarks/results/*.md`` as they are: rerun a script with ``--markdown`` to
refresh its page. The file records the command and the machine it was measured on.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import shlex
import sys
from collections.abc import Sequence

import torch


def add_markdown_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help="also write the table as Markdown to PATH "
                             "(the documentation includes benchmarks/results/*.md)")


def _cpu() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |",
            "| " + " | ".join("---" for _ in columns) + " |",
            *("| " + " | ".join(row) + " |" for row in rows)]


def write_markdown(path: str, columns: list[str], rows: list[list[str]],
                   more: Sequence[tuple[str, list[str], list[list[str]]]] = ()) -> None:
    """Writes ``rows`` under ``columns`` with the command line and the machine above them.

    ``more`` holds further ``(paragraph, columns, rows)`` tables, each after its paragraph.
    """
    command = shlex.join(["python", *(arg.replace(os.sep, "/") for arg in sys.argv)])
    lines = [
        f"Measured with `{command}` on {datetime.date.today().isoformat()}: "
        f"{_cpu()} ({os.cpu_count()} logical CPUs), torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, Python {platform.python_version()}.",
        "",
        *_table(columns, rows),
    ]
    for paragraph, more_columns, more_rows in more:
        lines += ["", paragraph, "", *_table(more_columns, more_rows)]
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
