"""The `gamengen` command: one verb per pipeline stage (DESIGN.md §2)."""

from __future__ import annotations

import json
import os
import shlex
import sys

# OpenMP threads that spin while waiting make torch 10-30x slower whenever another process shares
# the cores (measured: a tiny U-Net step took 6.2 s instead of 0.4 s next to a PPO run on 2 cores).
# Passive waiting costs little when alone. Set before torch loads; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .envs import EnvConfig
from .errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Learn a game from recorded play and play the learned game in real time.")
data_app = typer.Typer(no_args_is_help=True, help="Inspect, check, preview and export trajectory stores.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed figures measured on this machine.")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
console = Console(stderr=True)
stdout = Console()


@contextmanager
def progress_bar(what: str, total: int, done: int = 0):
    """A rich progress bar with rate and ETA; yields ``advance(n)``."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as p:
        task = p.add_task(what, total=total, completed=done)
        yield lambda n: p.advance(task, n)


def parse_resolution(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
        return h, w
    except ValueError:
        raise UserError(f"bad resolution '{text}'", "write WIDTHxHEIGHT, e.g. 160x120 (paper preset: 320x240)") from None


def record_config(env, policy, steps, episodes, seed, workers, resolution, frame_skip, automap, max_episode_steps):
    from .record.recorder import RecordConfig

    h, w = parse_resolution(resolution)
    return RecordConfig(env_id=env, policy=policy, steps=steps, episodes=episodes, seed=seed, workers=workers,
                        max_episode_steps=max_episode_steps,
                        env=EnvConfig(height=h, width=w, frame_skip=frame_skip, automap=automap))


ENV_HELP = "Game: vizdoom:freedoom1/E1M1, vizdoom:scenario/basic, atari:Breakout, gym:<id> or toy:cursor."


@app.command()
def record(
    out: Path = typer.Option(..., "--out", help="Store folder (created, or resumed if it exists)."),
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help=ENV_HELP),
    policy: str = typer.Option("random", help="random (paper's sticky random play), scripted, agent:<dir>, or "
                                              "human (you play the real game in the browser player)."),
    steps: Optional[int] = typer.Option(None, help="Total env steps over all workers."),
    episodes: Optional[int] = typer.Option(None, help="Total episodes over all workers (instead of --steps)."),
    workers: int = typer.Option(1, help="Parallel processes, each writing its own shard."),
    seed: int = typer.Option(0, help="Seeds every episode; same seed + same store = resume."),
    resolution: str = typer.Option("160x120", help="WIDTHxHEIGHT (paper preset: 320x240)."),
    frame_skip: int = typer.Option(1, help="Game tics per step (DOOM: 35 tics/s)."),
    automap: bool = typer.Option(False, help="ViZDoom: also store the automap."),
    max_episode_steps: int = typer.Option(1000, help="Cut (truncate) episodes at this length."),
    host: str = typer.Option("127.0.0.1", help="--policy human: address to listen on (loopback by default)."),
    port: int = typer.Option(8000, help="--policy human: port (0 picks a free one)."),
    keymap: Optional[Path] = typer.Option(None, help="--policy human: keymap JSON (default: the game's own)."),
):
    """Play a game with a policy and write every step to a trajectory store. Re-run to resume."""
    if policy == "human":
        from .play.players import human_player
        from .play.server import ServerConfig

        h, w = parse_resolution(resolution)
        player, recording = human_player(env, out, h, w, seed, keymap)
        try:
            run_server(player, ServerConfig(host=host, port=port, max_sessions=1), open_browser=True)
        finally:
            recording.close()
            typer.echo(f"{out}: {recording.saved} episode(s) of your play saved")
        return
    from .record.recorder import progress_done
    from .record.recorder import record as run_record
    from .data.store import Store

    cfg = record_config(env, policy, steps, episodes, seed, workers, resolution, frame_skip, automap,
                        max_episode_steps)
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
    from .data.export import store_info
    from .data.store import Store

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
    from .data.store import Store
    from .data.verify import verify_store

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
    from .data.export import preview_episode
    from .data.store import Store

    st = Store.open(store)
    recs = st.episodes()
    if not recs:
        raise UserError(f"{store} lists no episodes", "record some with `gamengen record`")
    rec = st.find(episode) if episode else recs[0]
    n = preview_episode(st, rec, out, start, frames, scale)
    typer.echo(f"wrote {out} ({n} frames of {rec.path})")


@data_app.command("export")
def data_export(
    store: Path,
    out: Path = typer.Option(..., "--out", help="New folder for videos/, actions.csv, episodes.csv."),
    crf: int = typer.Option(18, help="H.264 quality (0 = best). The store stays the lossless source."),
):
    """Export mp4 videos plus CSV tables of actions, rewards and game variables."""
    from .data.export import export_store
    from .data.store import Store

    st = Store.open(store)
    with progress_bar("exporting episodes", len(st.episodes())) as advance:
        res = export_store(st, out, crf, advance)
    typer.echo(f"exported {res['episodes']} episodes to {res['out']}")


@data_app.command("snapshot")
def data_snapshot(store: Path, out: Path = typer.Option(..., "--out", help="New folder for the frozen copy.")):
    """Freeze the episodes a store lists now (hard links), e.g. to train on an agent run in progress."""
    from .data.export import snapshot_store
    from .data.store import Store

    episodes, frames = snapshot_store(Store.open(store), out)
    typer.echo(f"{out}: {episodes} episodes, {frames} frames")


@app.command("train-ae")
def train_ae(
    data: Path = typer.Option(..., "--data", help="Trajectory store to learn frames from."),
    out: Path = typer.Option(..., "--out", help="Folder for the autoencoder (diffusers format)."),
    preset: str = typer.Option("cpu", help="tiny, cpu or paper (sizes the AE and the padding)."),
    steps: int = typer.Option(3000, help="Autoencoder steps (encoder + decoder)."),
    decoder_steps: int = typer.Option(1000, help="Decoder fine-tune steps, encoder frozen (paper §3.2.2)."),
    batch_size: int = typer.Option(32),
    crop: int = typer.Option(64, help="Train on random crops this many pixels a side (0: whole frames)."),
    learning_rate: float = typer.Option(1e-3),
    pretrained: Optional[Path] = typer.Option(None, help="Local diffusers VAE folder (e.g. SD-v1.4's vae/)."),
    seed: int = typer.Option(0),
):
    """Train the latent autoencoder on store frames, then fine-tune its decoder alone."""
    from .train.autoencoder import AETrainConfig, train_autoencoder

    cfg = AETrainConfig(preset=preset, steps=steps, decoder_steps=decoder_steps, batch_size=batch_size,
                        crop=crop, learning_rate=learning_rate, seed=seed, pretrained=str(pretrained) if pretrained else None)
    bars = {}
    with progress_bar("autoencoder steps", steps + decoder_steps) as advance:
        def report(stage, s, total, loss):
            advance(1)
            bars[stage] = loss

        codec = train_autoencoder(data, out, cfg, report)
    typer.echo(f"{out}: latents {codec.latent_shape()} per frame; final MSE "
               + ", ".join(f"{k} {v:.5f}" for k, v in bars.items()))


@app.command()
def train(
    data: Path = typer.Option(..., "--data", help="Trajectory store."),
    ae: Path = typer.Option(..., "--ae", help="Autoencoder folder from `gamengen train-ae`."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed if it exists)."),
    preset: str = typer.Option("cpu", help="tiny, cpu or paper."),
    steps: Optional[int] = typer.Option(None, help="Total optimizer steps (default 20000)."),
    batch_size: Optional[int] = typer.Option(None, help="Global batch over all processes."),
    context: Optional[int] = typer.Option(None, help="Context length N (paper: 64)."),
    max_frames: Optional[int] = typer.Option(None, help="Train on a seeded subset of about this many frames."),
    learning_rate: Optional[float] = typer.Option(None),
    bf16: bool = typer.Option(False, help="bf16 autocast."),
    checkpoint_every: Optional[int] = typer.Option(None),
    sample_every: Optional[int] = typer.Option(None),
    seed: int = typer.Option(0),
):
    """Train the action-conditioned diffusion world model. Works under `accelerate launch`."""
    from .train.world_model import TrainConfig
    from .train.world_model import train as run_train

    given = {"steps": steps, "batch_size": batch_size, "context": context, "learning_rate": learning_rate,
             "max_frames": max_frames,
             "checkpoint_every": checkpoint_every, "sample_every": sample_every}
    cfg = TrainConfig.from_preset(preset, bf16=bf16, seed=seed, **{k: v for k, v in given.items() if v is not None})
    with progress_bar(f"training ({preset} preset)", cfg.steps) as advance:
        last = [0]

        def report(step, total, loss):
            advance(step - last[0])
            last[0] = step

        losses = run_train(data, ae, out, cfg, report, warn=lambda m: typer.echo(f"warning: {m}", err=True))
    if losses:
        typer.echo(f"{out}: step {len(losses)}, loss {losses[-1]:.4f}; model in {out / 'model'}")


def run_server(player, config, open_browser: bool) -> None:
    from .play.server import serve_forever

    def ready(url: str) -> None:
        typer.echo(f"gamengen player: {url}")
        if config.host not in ("127.0.0.1", "localhost", "::1"):
            typer.echo(f"warning: listening on {config.host}, not only this machine; anyone with the URL can play",
                       err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    serve_forever(player, config, ready)


BUNDLED_MODEL = Path(__file__).resolve().parents[2] / "models" / "freedoom-e1m1"


@app.command()
def play(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder (`gamengen train` + `gamengen starts`)."),
    ghost: bool = typer.Option(False, help="Run the real game beside the model on the same keys."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on. Loopback unless you say otherwise."),
    port: int = typer.Option(8000, help="Port (0 picks a free one)."),
    max_sessions: int = typer.Option(8, help="Players at once."),
    idle_timeout: float = typer.Option(300.0, help="Seconds without input before a player is disconnected."),
    steps: int = typer.Option(4, help="DDIM steps per frame (paper: 4)."),
    keymap: Optional[Path] = typer.Option(None, help="Keymap JSON (default: the game's own)."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the page in a browser."),
    window: bool = typer.Option(False, help="A local pygame window instead of the browser (pip install pygame)."),
):
    """Play a learned game in the browser: every frame comes from the diffusion model."""
    from .engine.world import EngineConfig
    from .play.players import neural_player
    from .play.server import ServerConfig

    config = ServerConfig(host=host, port=port, max_sessions=max_sessions, idle_timeout=idle_timeout)
    player = neural_player(model, ghost, keymap, EngineConfig(steps=steps))
    if window:
        from .play.window import run_window

        run_window(player, fps=config.fps)
        return
    run_server(player, config, open_browser)


@app.command()
def starts(
    model: Path = typer.Option(..., help="World model folder."),
    data: Path = typer.Option(..., help="A store of the model's game; starts come from its held-out episodes."),
    n: int = typer.Option(4, help="How many start contexts."),
    seed: int = typer.Option(0),
):
    """Save real start contexts into a model folder, for `gamengen play` to reset to."""
    from .play.starts import make_starts

    made = make_starts(data, model, n, seed)
    for s in made:
        typer.echo(f"start: {s.episode} up to frame {len(s.prefix)} ({len(s.frames)} context frames)")
    typer.echo(f"{model}: {len(made)} start contexts")


agent_app = typer.Typer(help="Stage 1: a PPO agent that plays the game; its whole training run is recorded.")
app.add_typer(agent_app, name="agent")


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (created, or resumed if it exists)."),
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help="A ViZDoom map or scenario with position variables."),
    steps: int = typer.Option(1_000_000, help="Game frames the learner plays, all games together."),
    n_envs: int = typer.Option(8, help="Parallel games (paper: 8)."),
    n_steps: int = typer.Option(512, help="Decisions per game per PPO rollout (paper: 512)."),
    n_epochs: int = typer.Option(10, help="PPO epochs per rollout (paper: 10)."),
    batch_size: int = typer.Option(64, help="PPO minibatch (paper: 64)."),
    learning_rate: float = typer.Option(1e-4, help="Adam learning rate (paper: 1e-4)."),
    ent_coef: float = typer.Option(0.1, help="Entropy bonus (paper: 0.1)."),
    gamma: float = typer.Option(0.99, help="Discount (paper: 0.99)."),
    hold: int = typer.Option(4, help="Frames each action is held (paper: 4)."),
    repeat_prob: float = typer.Option(0.25, help="Chance to keep the previous action at a decision."),
    max_episode_frames: int = typer.Option(2048, help="Cut episodes at this many frames."),
    vec_env: str = typer.Option("subprocess", help="subprocess or inprocess games."),
    eval_every: int = typer.Option(100_000, help="Frames between recorded evaluation episodes."),
    seed: int = typer.Option(0),
    bf16: bool = typer.Option(True, help="bf16 autocast for the CNNs (fast on CPUs with bf16 units)."),
):
    """Train the PPO agent with the GameNGen shaped reward (re-run to resume), or see `agent report`."""
    if ctx.invoked_subcommand:
        return
    if out is None:
        raise UserError("missing --out", "e.g. gamengen agent --out runs/agent")
    from .agent.train import AgentConfig, replace, train

    cfg = replace(AgentConfig(), steps=steps, n_envs=n_envs, n_steps=n_steps, n_epochs=n_epochs,
                  batch_size=batch_size, learning_rate=learning_rate, ent_coef=ent_coef, gamma=gamma,
                  vec_env=vec_env, eval_every=eval_every, bf16=bf16, **{
                      "env.env_id": env, "env.hold": hold, "env.repeat_prob": repeat_prob,
                      "env.max_episode_frames": max_episode_frames, "env.seed": seed})
    with progress_bar(f"PPO on {env} (frames)", steps) as advance:
        last = [0]

        def report(done, total):
            advance(done - last[0])
            last[0] = done

        train(out, cfg, report)
    typer.echo(f"{out}: policy exported to {out / 'policy'}; record with --policy agent:{out / 'policy'}")


@agent_app.command("report")
def agent_report(
    run: Path,
    compare: list[str] = typer.Option([], help="NAME=STORE to measure beside it, e.g. random=data/random."),
    out: Optional[Path] = typer.Option(None, help="Folder for agent_report.{md,json,png} (default: the run)."),
):
    """Shaped reward, kills and map coverage over training, plus a table for other stores."""
    from .agent.report import report

    pairs = {}
    for c in compare:
        name, sep, path = c.partition("=")
        if not sep or not name or not path:
            raise UserError(f"bad --compare '{c}'", "write NAME=STORE, e.g. --compare random=data/random")
        pairs[name] = path
    res = report(run, pairs, out)
    where = out or run
    typer.echo(f"wrote {where}/agent_report.md, .json and .png ({res['curve']['episodes']} agent episodes)")


@bench_app.command("record")
def bench_record_cmd(
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help=ENV_HELP),
    policy: str = typer.Option("random"),
    steps: int = typer.Option(20000, help="Frames per phase, over all workers."),
    workers: int = typer.Option(2),
    resolution: str = typer.Option("160x120"),
    frame_skip: int = typer.Option(1),
    max_episode_steps: int = typer.Option(1000),
    as_json: bool = typer.Option(False, "--json"),
):
    """Frames/s written to a store beside raw env frames/s, measured in the same run."""
    from .bench import bench_record

    cfg = record_config(env, policy, steps, None, 0, workers, resolution, frame_skip, False, max_episode_steps)
    with progress_bar("recording into a temporary store", steps) as advance:
        res = bench_record(cfg, advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{res['env_id']} {res['resolution']}, {res['workers']} workers, {res['policy']} policy, "
               f"{res['frames']} frames; {res['machine']}")
    typer.echo("                  steady frames/s   wall frames/s (start-up included)")
    typer.echo(f"  raw env:        {res['env_fps_steady']:15.0f}   {res['env_fps']:13.0f}")
    typer.echo(f"  into the store: {res['store_fps_steady']:15.0f}   {res['store_fps']:13.0f}")
    typer.echo(f"  store/raw (steady): {res['store_vs_env']:.2f}; {res['bytes_per_frame'] / 1e3:.1f} kB/frame on disk")


@bench_app.command("train")
def bench_train_cmd(
    preset: str = typer.Option("cpu", help="tiny, cpu or paper."),
    steps: int = typer.Option(10, help="Timed steps per precision (after 2 warm-up steps)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """World-model training samples/s in fp32 and bf16 (same run), and peak resident memory."""
    from .bench import bench_train
    from .train.world_model import TrainConfig

    TrainConfig.from_preset(preset)  # an unknown preset is a one-line error
    with progress_bar(f"training steps ({preset} preset)", 2 * (steps + 2)) as advance:
        res = bench_train(preset, steps, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{preset} preset: {res['params_m']:.1f}M parameters, batch {res['batch']}, context {res['context']}, "
               f"latent {res['latent']}; {res['machine']}, {res['threads']} threads")
    typer.echo(f"  fp32: {res['fp32_samples_per_s']:.1f} samples/s")
    typer.echo(f"  bf16: {res['bf16_samples_per_s']:.1f} samples/s ({res['bf16_vs_fp32']:.2f}x fp32)")
    typer.echo(f"  peak resident memory: {res['peak_rss_mb']:.0f} MB")


@bench_app.command("agent")
def bench_agent_cmd(
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help=ENV_HELP),
    n_steps: int = typer.Option(128, help="Decisions per game per rollout (the real run uses 512)."),
    rollouts: int = typer.Option(2, help="Rollouts, each followed by its PPO update."),
    as_json: bool = typer.Option(False, "--json"),
):
    """PPO env steps/s, updates included: our agent beside stock SB3 CnnPolicy, same run, same map."""
    from .bench import bench_agent

    if n_steps < 1 or rollouts < 1:
        raise UserError("--n-steps and --rollouts must be at least 1", "pass positive numbers")
    with progress_bar("frames (ours, then stock SB3)", 2 * 8 * n_steps * 4 * rollouts) as advance:
        res = bench_agent(env, n_steps, rollouts, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{res['env_id']}: {res['n_envs']} games, {res['rollouts']} rollouts of {res['n_steps']} decisions "
               f"x {res['hold']} frames, {res['n_epochs']} epochs, batch {res['batch_size']}; {res['machine']}, "
               f"{res['threads']} threads")
    typer.echo("                 frames/s   decisions/s")
    for k in ("ours", "stock"):
        r = res[k]
        typer.echo(f"  {k:6s}      {r['frames_per_s']:10.1f}   {r['decisions_per_s']:11.1f}   {r['setup']}")
    typer.echo(f"  ours/stock: {res['ours_vs_stock']:.2f}x")


eval_app = typer.Typer(invoke_without_command=True, no_args_is_help=True,
                       help="Measure a world model: `gamengen eval --model M --data D --out DIR`, or `eval ab`.")
app.add_typer(eval_app, name="eval")


@eval_app.callback()
def eval_cmd(
    ctx: typer.Context,
    model: Optional[Path] = typer.Option(None, help="World model folder."),
    data: Optional[Path] = typer.Option(None, help="A store of the model's game; only its held-out episodes are read."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for report.md, report.html (self-contained), "
                                                         "report.json."),
    samples: int = typer.Option(64, help="Teacher-forced frames."),
    episodes: int = typer.Option(8, help="Held-out starts for the autoregressive curves."),
    ar_steps: int = typer.Option(64, help="Autoregressive steps from each start (0: skip)."),
    long_steps: int = typer.Option(10_000, help="Steps of the long-rollout stability test (0: skip)."),
    action_contexts: int = typer.Option(24, help="Contexts for action following (0: skip)."),
    steps: int = typer.Option(4, help="DDIM steps."),
    i3d: Optional[Path] = typer.Option(None, help="TorchScript I3D for FVD (default ~/.cache/gamengen/"
                                                  "i3d_torchscript.pt; never downloaded)."),
    seed: int = typer.Option(0),
):
    """Teacher-forced, autoregressive, long-rollout and action-following metrics, with baselines."""
    if ctx.invoked_subcommand:
        return
    if model is None or data is None or out is None:
        raise UserError("eval needs --model, --data and --out", "e.g. gamengen eval --model models/freedoom-e1m1 "
                        "--data runs/agent/store --out reports/e1m1")
    from .eval.report import EvalConfig, evaluate, work, write_report
    from .eval.rollout import RolloutConfig
    from .eval.teacher_forced import TeacherForcedConfig

    for name, v in (("samples", samples), ("episodes", episodes), ("steps", steps)):
        if v < 1:
            raise UserError(f"--{name} must be at least 1, got {v}", f"pass a positive --{name}")
    for name, v in (("ar-steps", ar_steps), ("long-steps", long_steps), ("action-contexts", action_contexts)):
        if v < 0:
            raise UserError(f"--{name} must be 0 or more, got {v}", f"pass --{name} 0 to skip it")
    cfg = EvalConfig(steps, TeacherForcedConfig(samples, seed),
                     RolloutConfig(episodes, ar_steps, long_steps, action_contexts, seed), str(i3d) if i3d else None)
    from .engine.world import read_meta

    meta = read_meta(model)
    with progress_bar("world-model steps", work(cfg, len(meta["actions"]))) as advance:
        res = evaluate(model, data, cfg, report=advance)
    write_report(res, out, "gamengen " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    tf = res["teacher_forced"]
    fmt = lambda s: f"{s['mean']:.2f} ± {s['std']:.2f}" if s.get("n") else "-"  # noqa: E731
    table = Table(title=f"teacher-forced, {tf['samples']} held-out frames, {steps} DDIM steps")
    for col in ("frames", "n", "model PSNR", "copy-last PSNR", "AE ceiling PSNR", "model SSIM"):
        table.add_column(col)
    for name in ("all", "moving"):
        r = tf[name]
        table.add_row(name, str(r["model"].get("n", 0)), fmt(r["model"]), fmt(r["copy_last"]), fmt(r["ae"]),
                      fmt(r["model_ssim"]))
    stdout.print(table)
    typer.echo(f"LPIPS: {res['lpips']}; FVD: {res['fvd'].get('note') or 'computed'}")
    typer.echo(f"wrote {out}/report.md, report.html and report.json")


@eval_app.command("ab")
def eval_ab_cmd(
    out: Path = typer.Option(..., "--out", help="Folder of the test: clips, ab.json (the key), answers.jsonl."),
    model: Optional[Path] = typer.Option(None, help="World model (only to make the clips the first time)."),
    data: Optional[Path] = typer.Option(None, help="Store of its game (held-out episodes)."),
    pairs: int = typer.Option(12, help="Pairs of clips, half 1.6 s and half 3.2 s."),
    steps: int = typer.Option(4, help="DDIM steps."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000, help="0 picks a free port."),
    open_browser: bool = typer.Option(True, "--open/--no-open"),
    summary: bool = typer.Option(False, "--summary", help="Print the answers' summary and exit."),
    seed: int = typer.Option(0),
):
    """Blind A/B page: real clip or model clip? Records the answers and the share that picked the real one."""
    from .eval.ab import KEY, ABConfig, check_out, create_ab_app, make_pairs, summarize
    from .play.server import ServerConfig, serve_app

    if summary:
        check_out(out)
        typer.echo(json.dumps(summarize(out), indent=2))
        return
    if pairs < 1:
        raise UserError("--pairs must be at least 1", "pass e.g. --pairs 12")
    if not (out / KEY).exists():
        if model is None or data is None:
            raise UserError(f"no A/B test in {out} yet", "pass --model and --data to make its clips")
        with progress_bar("clip pairs", pairs) as adv:
            make_pairs(model, data, out, ABConfig(pairs=pairs, ddim_steps=steps, seed=seed), adv)
    config = ServerConfig(host=host, port=port)

    def ready(url: str) -> None:
        typer.echo(f"A/B test at {url}  (Ctrl-C to stop; `--summary` prints the result)")
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    serve_app(lambda p: create_ab_app(out, config, p), config, ready)
    typer.echo(json.dumps(summarize(out), indent=2))


@bench_app.command("model")
def bench_model_cmd(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder."),
    repeats: int = typer.Option(20, help="Timed calls per path."),
    compile: bool = typer.Option(True, "--compile/--no-compile", help="Also time torch.compile (slow to build)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """FLOPs per frame against this machine's GEMM peak, and U-Net/decode time per path vs eager fp32."""
    from .bench import bench_model

    with progress_bar("timed paths", 4 if compile else 3) as advance:
        res = bench_model(model, repeats, compile, advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    g, pk = res["gflop"], res["gemm_gflops"]
    typer.echo(f"{res['model']}; {res['machine']}, {res['threads']} threads")
    typer.echo(f"  GEMM peak: fp32 {pk['fp32']:.0f}, bf16 {pk['bf16']:.0f} GFLOP/s")
    typer.echo(f"  GFLOP: U-Net call (CFG batch 2) {g['unet_call']:.2f}, decode {g['decode']:.2f}, "
               f"frame ({res['ddim_steps']} steps) {g['frame']:.2f}")
    typer.echo(f"  limit at the peak: fp32 {res['limit_fps']['fp32']:.0f} FPS, bf16 {res['limit_fps']['bf16']:.0f} FPS")
    for k, v in res["unet_call_ms"].items():
        typer.echo(f"  U-Net call, {k:14s} {v:6.1f} ms  ({res['vs_baseline'][k]:.2f}x eager fp32)")
    typer.echo(f"  decode, eager fp32       {res['decode_ms']:6.1f} ms")


@app.command("ablate")
def ablate_cmd(
    kind: str = typer.Argument(..., help="context, noise-aug, data-policy or steps."),
    out: Path = typer.Option(..., "--out", help="Folder for the variants, ablation.md, .png and .json."),
    data: list[str] = typer.Option(..., help="A store; for data-policy: agent=STORE and random=STORE."),
    ae: Optional[Path] = typer.Option(None, help="Autoencoder folder (all but steps)."),
    model: Optional[Path] = typer.Option(None, help="Trained model (steps only)."),
    values: Optional[str] = typer.Option(None, help="Comma-separated values, e.g. 1,2,4,8 (context, steps)."),
    preset: str = typer.Option("tiny", help="U-Net preset of the trained variants."),
    train_steps: int = typer.Option(1500, help="Training steps per variant."),
    max_frames: int = typer.Option(20_000, help="Training frames per variant (one seeded subset for all)."),
    samples: int = typer.Option(64, help="Teacher-forced frames per variant."),
    episodes: int = typer.Option(16, help="Autoregressive starts per variant."),
    ar_steps: int = typer.Option(64, help="noise-aug: autoregressive steps per start."),
    context: int = typer.Option(64, help="Context of the noise-aug and data-policy models."),
    seed: int = typer.Option(0),
):
    """The paper's ablations at a CPU budget (§5.2); re-run the same command to resume."""
    from .eval.ablate import AblationConfig, KINDS, ablate, variants, work

    if kind not in KINDS:
        raise UserError(f"unknown ablation '{kind}'", "use one of: " + ", ".join(KINDS))
    stores = {}
    for d in data:
        name, sep, path = d.partition("=")
        stores[name if sep else "data"] = path if sep else d
    if kind != "steps" and ae is None:
        raise UserError(f"the {kind} ablation trains models", "pass --ae AE_DIR")
    try:
        vals = [int(v) for v in values.split(",")] if values else None
    except ValueError:
        raise UserError(f"bad --values '{values}'", "write integers separated by commas, e.g. 1,2,4") from None
    cfg = AblationConfig(preset, train_steps, max_frames, samples, episodes, ar_steps, context=context, seed=seed)
    with progress_bar(f"ablation {kind}", work(kind, variants(kind, vals), cfg)) as advance:
        res = ablate(kind, out, cfg, stores, str(ae) if ae else None, str(model) if model else None, vals, advance)
    typer.echo(f"wrote {out}/ablation.md, .png and .json ({res['seconds'] / 60:.1f} min)")


@bench_app.command("play")
def bench_play_cmd(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder with start contexts."),
    frames: int = typer.Option(200, help="Timed frames (after 5 warm-up frames)."),
    steps: int = typer.Option(4, help="DDIM steps per frame."),
    as_json: bool = typer.Option(False, "--json"),
):
    """End-to-end play FPS and input-to-frame latency through the real server on loopback."""
    from .bench import bench_play

    with progress_bar("frames", frames) as advance:
        res = bench_play(model, frames, steps, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    lat = res["latency_ms"]
    typer.echo(f"{res['model']}: {res['fps']:.1f} FPS end to end, latency p50 {lat['p50']:.0f} ms, "
               f"p95 {lat['p95']:.0f} ms ({res['ddim_steps']} DDIM steps + CFG; {res['machine']}, "
               f"{res['threads']} threads)")
    typer.echo("  median ms per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in res["stages_ms"].items()))


def main() -> None:
    try:
        app()
    except UserError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted; re-run the same command to resume", err=True)
        sys.exit(130)
