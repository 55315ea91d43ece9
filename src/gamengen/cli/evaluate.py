"""Measuring a model: `eval`, `eval ab` and `ablate` (docs/evaluation.md)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..errors import UserError
from .common import app, progress_bar, stdout, RUNTIME_HELP


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
    steps: Optional[int] = typer.Option(None, help="DDIM steps (default: the model's, 4 or 1 if distilled)."),
    runtime: str = typer.Option("onnx", help=RUNTIME_HELP),
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
    from ..eval.report import EvalConfig, evaluate, work, write_report
    from ..eval.rollout import RolloutConfig
    from ..eval.teacher_forced import TeacherForcedConfig

    for name, v in (("samples", samples), ("episodes", episodes), ("steps", steps)):
        if v is not None and v < 1:
            raise UserError(f"--{name} must be at least 1, got {v}", f"pass a positive --{name}")
    for name, v in (("ar-steps", ar_steps), ("long-steps", long_steps), ("action-contexts", action_contexts)):
        if v < 0:
            raise UserError(f"--{name} must be 0 or more, got {v}", f"pass --{name} 0 to skip it")
    cfg = EvalConfig(steps, TeacherForcedConfig(samples, seed),
                     RolloutConfig(episodes, ar_steps, long_steps, action_contexts, seed), str(i3d) if i3d else None,
                     runtime)
    from ..models.world_model import WorldModel

    meta, _ = WorldModel.read_meta(model)
    with progress_bar("world-model steps", work(cfg, len(meta.actions))) as advance:
        res = evaluate(model, data, cfg, report=advance)
    write_report(res, out, "gamengen " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    tf = res["teacher_forced"]
    fmt = lambda s: f"{s['mean']:.2f} ± {s['std']:.2f}" if s.get("n") else "-"  # noqa: E731
    table = Table(title=f"teacher-forced, {tf['samples']} held-out frames, {res['ddim_steps']} DDIM steps")
    for col in ("frames", "n", "model PSNR", "copy-last PSNR", "AE ceiling PSNR", "model SSIM"):
        table.add_column(col)
    for name in ("all", "moving"):
        r = tf[name]
        table.add_row(name, str(r["model"].get("n", 0)), fmt(r["model"]), fmt(r["copy_last"]), fmt(r["ae"]),
                      fmt(r["model_ssim"]))
    stdout.print(table)
    typer.echo(f"LPIPS: {res['lpips']}; FVD: {res['fvd'].get('note') or 'computed'}")
    typer.echo(f"wrote {out}/report.md, report.html and report.json")


@eval_app.command("ae")
def eval_ae_cmd(
    ae: Path = typer.Option(..., help="Autoencoder folder (from `gamengen train-ae`, or a model's ae/)."),
    data: Path = typer.Option(..., help="A store of its game; only held-out episodes are read."),
    out: Path = typer.Option(..., "--out", help="Folder for ae.json and ae_strip.png."),
    samples: int = typer.Option(256, help="Held-out frames."),
    heldout: float = typer.Option(0.1, help="Share of the store's episodes held out (training's split)."),
    seed: int = typer.Option(0),
):
    """The autoencoder's ceiling: reconstruction PSNR on held-out frames, all and moving, beside copy-last."""
    import numpy as np

    from ..atomic import write_json_atomic, write_png
    from ..data.latents import split
    from ..data.store import Store
    from ..eval.autoencoder import AECeilingConfig, ae_ceiling
    from ..models.autoencoder import FrameCodec

    if samples < 1:
        raise UserError(f"--samples must be at least 1, got {samples}", "pass a positive --samples")
    codec = FrameCodec.load(ae)
    store = Store.open(data)
    if (store.spec.height, store.spec.width) != (codec.height, codec.width):
        raise UserError(f"{data} holds {store.spec.width}x{store.spec.height} frames, the autoencoder in {ae} "
                        f"takes {codec.width}x{codec.height}", "pass a store of the autoencoder's game")
    held = [r for r in split(store.episodes(), heldout)[1] if r.length >= 2]
    if not held:
        raise UserError(f"store {data} has no held-out episode of 2 frames or more", "record more episodes into it")
    with progress_bar("frames", samples) as advance:
        res = ae_ceiling(codec, store, held, AECeilingConfig(samples, seed), advance)
    out.mkdir(parents=True, exist_ok=True)
    write_png(out / "ae_strip.png", np.concatenate(res.pop("strips"), axis=0))
    write_json_atomic(out / "ae.json", {"ae": str(ae), "data": str(data), **res})
    fmt = lambda s: f"{s['mean']:.2f} ± {s['std']:.2f}" if s.get("n") else "-"  # noqa: E731
    table = Table(title=f"autoencoder ceiling, {res['samples']} held-out frames, latents {res['latent_shape']}")
    for col in ("frames", "n", "AE PSNR", "copy-last PSNR", "AE status-bar PSNR"):
        table.add_column(col)
    for name in ("all", "moving"):
        r = res[name]
        table.add_row(name, str(r["ae"].get("n", 0)), fmt(r["ae"]), fmt(r["copy_last"]), fmt(r["ae_status_bar"]))
    stdout.print(table)
    typer.echo(f"wrote {out}/ae.json and ae_strip.png (each row: truth | reconstruction)")


@eval_app.command("ghost")
def eval_ghost_cmd(
    model: Path = typer.Option(..., help="World model folder with start contexts that carry env seeds."),
    out: Path = typer.Option(..., "--out", help="Folder for ghost.json and ghost_strip.png."),
    start: int = typer.Option(0, help="Which start context."),
    seconds: str = typer.Option("1,2,3", help="Whole seconds of play at which frames are compared."),
    runtime: str = typer.Option("onnx", help=RUNTIME_HELP),
):
    """Ghost strips: each key held from a start, the real game above the learned one, with PSNR against
    the real frame (beside the frozen start) and how far the view panned in both."""
    import numpy as np

    from ..atomic import write_json_atomic, write_png
    from ..engine.world import EngineConfig
    from ..eval.ghost import GhostStripConfig, ghost_strips
    from ..play.players import neural_player

    try:
        secs = tuple(int(s) for s in seconds.split(","))
    except ValueError:
        secs = ()
    if not secs or min(secs) < 1 or list(secs) != sorted(set(secs)):
        raise UserError(f"--seconds {seconds!r} is not a rising list of whole seconds", "pass e.g. --seconds 1,2,3")
    player = neural_player(model, ghost=True, engine=EngineConfig(runtime=runtime))
    if not 0 <= start < player.n_starts:
        raise UserError(f"--start {start}: the model has {player.n_starts} start contexts", "pass a smaller --start")
    cfg = GhostStripConfig(seconds=secs, start=start)
    game = player.make_game()
    try:
        with progress_bar("steps", len(cfg.keys) * round(player.fps * secs[-1])) as advance:
            res = ghost_strips(game, player.resolver.names, player.fps, cfg, advance)
    finally:
        game.close()
    images = res.pop("images")
    out.mkdir(parents=True, exist_ok=True)
    if images:
        write_png(out / "ghost_strip.png", np.concatenate(list(images.values()), axis=0))
    write_json_atomic(out / "ghost.json", {"model": str(model), **res})
    for r in res["rows"]:
        if "unavailable" in r:
            typer.echo(f"{r['key']}: unavailable ({r['unavailable']})")
            continue
        typer.echo(f"{r['key']}: " + "; ".join(
            f"{s} s: PSNR {m:.1f} dB (frozen {f:.1f}), pan real {rs:+.0f} px / model {ms:+.0f} px"
            for s, m, f, rs, ms in zip(r["seconds"], r["model_psnr"], r["frozen_psnr"], r["real_pan"],
                                       r["model_pan"])) + (" (the real game's replay diverged)" if r["diverged_start"] else ""))
    typer.echo(f"wrote {out}/ghost.json and ghost_strip.png (per key: the real game, then the learned one, "
               f"at 0 s and {seconds} s)")


@eval_app.command("ab")
def eval_ab_cmd(
    out: Path = typer.Option(..., "--out", help="Folder of the test: clips, ab.json (the key), answers.jsonl."),
    model: Optional[Path] = typer.Option(None, help="World model (only to make the clips the first time)."),
    data: Optional[Path] = typer.Option(None, help="Store of its game (held-out episodes)."),
    pairs: int = typer.Option(12, help="Pairs of clips, half 1.6 s and half 3.2 s."),
    steps: Optional[int] = typer.Option(None, help="DDIM steps (default: the model's)."),
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(8000, help="0 picks a free port."),
    open_browser: bool = typer.Option(True, "--open/--no-open"),
    summary: bool = typer.Option(False, "--summary", help="Print the answers' summary and exit."),
    seed: int = typer.Option(0),
):
    """Blind A/B page: real clip or model clip? Records the answers and the share that picked the real one."""
    from ..eval.ab import KEY, ABConfig, check_out, create_ab_app, make_pairs, summarize
    from ..play.server import ServerConfig, serve_app

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
    episodes: int = typer.Option(16, help="Autoregressive starts per variant (data-policy: test examples, "
                                           "half from each store)."),
    ar_steps: int = typer.Option(64, help="noise-aug: autoregressive steps per start."),
    context: int = typer.Option(64, help="Context of the noise-aug and data-policy models."),
    seed: int = typer.Option(0),
):
    """The paper's ablations at a CPU budget (§5.2); re-run the same command to resume."""
    from ..data.store import Store
    from ..eval.ablate import AblationConfig, KINDS, ablate, variants, work

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
    fps = Store.open(next(iter(stores.values()))).spec.fps if kind == "data-policy" else 35.0
    with progress_bar(f"ablation {kind}", work(kind, variants(kind, vals), cfg, fps)) as advance:
        res = ablate(kind, out, cfg, stores, str(ae) if ae else None, str(model) if model else None, vals, advance)
    typer.echo(f"wrote {out}/ablation.md, .png and .json ({res['seconds'] / 60:.1f} min)")
