"""The `gamengen` command: one verb per pipeline stage (README.md), one module per stage."""

from __future__ import annotations

import sys

import typer

from ..errors import UserError
from .common import app  # first: it sets OMP_WAIT_POLICY before anything loads torch
# each registers its commands on `app`; this order is the order `gamengen --help` lists them in
from . import record, train, play, evaluate, model, bench, curate, clip  # noqa: E402

__all__ = ["app", "main", "bench", "clip", "curate", "evaluate", "model", "play", "record", "train"]


def main() -> None:
    try:
        app()
    except UserError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted; re-run the same command to resume", err=True)
        sys.exit(130)
