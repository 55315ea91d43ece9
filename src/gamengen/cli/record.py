"""Recording and the trajectory store: `record`, `data info|verify|preview|export|snapshot`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import app, data_app, ENV_HELP, parse_resolution, progress_bar, record_config, run_server, stdout


@app.command()
def record(
    out: Path = typer.Option(..., "--out", help="Store folder (created, or resumed if it exists)."),
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help=ENV_HELP),
    policy: str = typer.Option("random", help="random (paper's sticky random play), scripted, control (motion keys "
                                              "changed every few steps, for InstructNet), agent:<dir>, or "
                                              "human (you play the real game in the browser player)."),
    steps: Optional[int] = typer.Option(None, help="Total env steps over all workers."),
    episodes: Optional[int] = typer.Option(None, help="Total episodes over all workers (instead of --steps)."),
    workers: int = typer.Option(1, help="Parallel processes, each writing its own shard."),
    seed: int = typer.Option(0, help="Seeds every episode; same seed + same store = resume."),
    resolution: str = typer.Option("160x120", help="WIDTHxHEIGHT (paper preset: 320x240)."),
    frame_skip: int = typer.Option(1, help="Game tics per step (DOOM: 35 tics/s)."),
    automap: bool = typer.Option(False, help="ViZDoom: also store the automap."),
    labels: bool = typer.Option(False, "--labels", help="ViZDoom: also store which objects are in view (for captions)."),
    events: bool = typer.Option(False, "--events", help="ViZDoom: fire in-game events (monsters, items, weapons, "
                                                        "lighting) every 5-10 s of game time, seeded per episode."),
    event_kinds: Optional[str] = typer.Option(None, "--event-kinds",
                                              help="ViZDoom: fire only these events, comma-separated (e.g. "
                                                   "invulnerability,radiation_suit); turns --events on."),
    event_period: Optional[str] = typer.Option(None, "--event-period",
                                               help="ViZDoom: seconds of game time between events, SHORTEST,LONGEST "
                                                    "(default 5,10, the paper's)."),
    event_clear: Optional[float] = typer.Option(None, "--event-clear",
                                                help="ViZDoom: end every lasting picture effect (powerups, light "
                                                     "fall-off) this many seconds before each event, so each "
                                                     "event fires on an unaltered view (default: they last)."),
    max_episode_steps: int = typer.Option(1000, help="Cut (truncate) episodes at this length."),
    host: str = typer.Option("127.0.0.1", help="--policy human: address to listen on (loopback by default)."),
    port: int = typer.Option(8000, help="--policy human: port (0 picks a free one)."),
    keymap: Optional[Path] = typer.Option(None, help="--policy human: keymap JSON (default: the game's own)."),
):
    """Play a game with a policy and write every step to a trajectory store. Re-run to resume."""
    if policy == "human":
        if labels or events or event_kinds is not None or event_period is not None or event_clear is not None:
            raise UserError("--labels and --events are not recorded in human play (the browser player)",
                            "drop them, or record with --policy random or scripted")
        from ..play.players import human_player
        from ..play.server import ServerConfig, create_app

        h, w = parse_resolution(resolution)
        player, recording = human_player(env, out, h, w, seed, keymap)
        config = ServerConfig(host=host, port=port, max_sessions=1)
        try:
            run_server(lambda p: create_app(player, config, p), config, open_browser=True)
        finally:
            recording.close()
            typer.echo(f"{out}: {recording.saved} episode(s) of your play saved")
        return
    from ..record.recorder import progress_done
    from ..record.recorder import record as run_record
    from ..data.store import Store

    cfg = record_config(env, policy, steps, episodes, seed, workers, resolution, frame_skip, automap,
                        max_episode_steps, labels, events, event_kinds, event_period, event_clear)
    total = steps if steps is not None else episodes
    done = progress_done(Store.open(out), cfg) if (out / "store.json").exists() else 0
    unit = "steps" if steps is not None else "episodes"
    with progress_bar(f"recording {env} ({unit})", total, done) as advance:
        store = run_record(out, cfg, advance)
    recs = store.episodes()
    typer.echo(f"{store.root}: {len(recs)} episodes, {sum(r.length for r in recs)} frames")


@data_app.command("info")
def data_info(store: Path, as_json: bool = typer.Option(False, "--json", help="Print JSON.")):
    """Counts, sizes and metadata of a store."""
    from ..data.export import store_info
    from ..data.store import Store

    info = store_info(Store.open(store))
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    table = Table(show_header=False, title=f"store {info['store']}")
    for k, v in info.items():
        if k == "bytes_on_disk" or k == "bytes_raw":
            v = f"{v / 1e6:.1f} MB"
        elif isinstance(v, float):
            v = f"{v:.2f}"
        table.add_row(k, str(v))
    stdout.print(table)


@data_app.command("verify")
def data_verify(store: Path, quick: bool = typer.Option(False, help="Checksums only; skip decoding every chunk.")):
    """Check checksums and structure of every listed episode. Exit 1 if anything is wrong."""
    from ..data.store import Store
    from ..data.verify import verify_store

    st = Store.open(store)
    with progress_bar("verifying episodes", len(st.episodes())) as advance:
        problems, notes = verify_store(st, deep=not quick, report=advance)
    for n in notes:
        typer.echo(f"note: {n}")
    for p in problems:
        typer.echo(f"FAIL {p}")
    if problems:
        typer.echo(f"verify: {len(problems)} problem(s) in {store}")
        raise typer.Exit(1)
    typer.echo(f"verify: OK, {len(st.episodes())} episodes in {store}")


@data_app.command("preview")
def data_preview(
    store: Path,
    out: Path = typer.Option(Path("preview.mp4"), "--out", help=".mp4 or .gif"),
    episode: Optional[str] = typer.Option(None, help="Episode id (default: the first listed)."),
    start: int = typer.Option(0, help="First step."),
    frames: int = typer.Option(300, help="How many steps."),
    scale: int = typer.Option(3, help="Pixel upscale."),
):
    """Write a video of an episode with step, action and reward written on each frame."""
    from ..data.export import preview_episode
    from ..data.store import Store

    st = Store.open(store)
    recs = st.episodes()
    if not recs:
        raise UserError(f"{store} lists no episodes", "record some with `gamengen record`")
    rec = st.find(episode) if episode else recs[0]
    n = preview_episode(st, rec, out, start, frames, scale)
    typer.echo(f"wrote {out} ({n} frames of {rec.path})")


@data_app.command("caption")
def data_caption(
    store: Path,
    episode: Optional[str] = typer.Option(None, help="Episode id (default: the first listed)."),
    start: int = typer.Option(0, help="First step."),
    frames: int = typer.Option(140, help="How many steps (GameGen-X's clips are 4-16 s; 140 = 8 s at frame skip 2)."),
    as_json: bool = typer.Option(False, "--json", help="Print the ten fields and both texts as JSON."),
):
    """Print the structured GEN and INS captions (GameGen-X §3.2) of a stretch of an episode (docs/captions.md)."""
    from ..data.captions import caption, caption_text, instruction_text
    from ..data.store import Store

    st = Store.open(store)
    recs = st.episodes()
    if not recs:
        raise UserError(f"{store} lists no episodes", "record some with `gamengen record`")
    if frames < 1:
        raise UserError(f"--frames must be at least 1, got {frames}", "e.g. --frames 140")
    rec = st.find(episode) if episode else recs[0]
    if not 0 <= start < rec.length:
        raise UserError(f"--start {start} is outside episode {rec.path} ({rec.length} steps)",
                        f"pick --start from 0 to {rec.length - 1}")
    fields = caption(st, rec, start, min(start + frames, rec.length))
    if as_json:
        typer.echo(json.dumps({"episode": rec.path, "start": start, "end": min(start + frames, rec.length),
                               "fields": fields, "caption": caption_text(fields),
                               "instruction": instruction_text(fields)}, indent=2))
        return
    typer.echo(f"GEN: {caption_text(fields)}")
    typer.echo(f"INS: {instruction_text(fields)}")


@data_app.command("export")
def data_export(
    store: Path,
    out: Path = typer.Option(..., "--out", help="New folder for videos/, actions.csv, episodes.csv."),
    crf: int = typer.Option(18, help="H.264 quality (0 = best). The store stays the lossless source."),
):
    """Export mp4 videos plus CSV tables of actions, rewards and game variables."""
    from ..data.export import export_store
    from ..data.store import Store

    st = Store.open(store)
    with progress_bar("exporting episodes", len(st.episodes())) as advance:
        res = export_store(st, out, crf, advance)
    typer.echo(f"exported {res['episodes']} episodes to {res['out']}")


@data_app.command("snapshot")
def data_snapshot(store: Path, out: Path = typer.Option(..., "--out", help="New folder for the frozen copy.")):
    """Freeze the episodes a store lists now (hard links), e.g. to train on an agent run in progress."""
    from ..data.export import snapshot_store
    from ..data.store import Store

    episodes, frames = snapshot_store(Store.open(store), out)
    typer.echo(f"{out}: {episodes} episodes, {frames} frames")
