"""Model folders: `model upgrade` converts a folder of an older format (models/world_model.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import app

model_app = typer.Typer(no_args_is_help=True, help="Look after world model folders.")
app.add_typer(model_app, name="model")


@model_app.command("upgrade")
def upgrade_cmd(
    folder: Path = typer.Argument(..., help="A world model folder of format 1."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the converted folder here (default: in place)."),
):
    """Convert a format-1 world model folder to format 2; the weights stay as they are."""
    from ..models.world_model import VERSION, upgrade

    typer.echo(f"{upgrade(folder, out)}: world model folder of format {VERSION}")
