"""Playing a model: `play` (browser, ghost, window) and `starts`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import app, BUNDLED_MODEL, interactive_threads, run_server, RUNTIME_HELP


@app.command()
def play(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder (`gamengen train` + `gamengen starts`)."),
    ghost: bool = typer.Option(False, help="Run the real game beside the model on the same keys."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on. Loopback unless you say otherwise."),
    port: int = typer.Option(8000, help="Port (0 picks a free one)."),
    max_sessions: int = typer.Option(8, help="Players at once."),
    idle_timeout: float = typer.Option(300.0, help="Seconds without input before a player is disconnected."),
    steps: Optional[int] = typer.Option(None, help="DDIM steps per frame (default: the model's; paper: 4)."),
    runtime: str = typer.Option("onnx", help=RUNTIME_HELP),
    keymap: Optional[Path] = typer.Option(None, help="Keymap JSON (default: the game's own)."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the page in a browser."),
    window: bool = typer.Option(False, help="A local pygame window instead of the browser (pip install pygame)."),
):
    """Play a learned game in the browser: every frame comes from the diffusion model."""
    interactive_threads()
    from ..engine.world import EngineConfig
    from ..play.compute import on_compute
    from ..play.players import neural_player
    from ..play.server import ServerConfig, create_app

    config = ServerConfig(host=host, port=port, max_sessions=max_sessions, idle_timeout=idle_timeout)
    engine = EngineConfig(steps=steps, runtime=runtime)
    if window:
        from ..play.window import run_window

        player = neural_player(model, ghost, keymap, engine)
        run_window(player, fps=player.fps)
        return
    player = on_compute(neural_player, model, ghost, keymap, engine)  # where the server will step it
    run_server(lambda p: create_app(player, config, p), config, open_browser)


@app.command()
def starts(
    model: Path = typer.Option(..., help="World model folder."),
    data: Path = typer.Option(..., help="A store of the model's game; starts come from its held-out episodes."),
    n: int = typer.Option(4, help="How many start contexts."),
    seed: int = typer.Option(0),
):
    """Save real start contexts into a model folder, for `gamengen play` to reset to."""
    from ..eval.heldout import heldout_episodes
    from ..models.world_model import WorldModel
    from ..play.starts import make_starts

    meta, _ = WorldModel.read_meta(model)
    store, heldout = heldout_episodes(meta, data, min_length=meta.context + 1)
    made = make_starts(model, store, heldout, n, seed)
    for s in made:
        typer.echo(f"start: {s.episode} up to frame {len(s.prefix)} ({len(s.frames)} context frames)")
    typer.echo(f"{model}: {len(made)} start contexts")
