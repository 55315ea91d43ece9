"""Training: `train-ae`, `train` (the world model), `distill`, `tune-decoder`, `agent` and `agent report` (PPO)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError
from .common import app, progress_bar, step_reporter, warn_slow_bf16


@app.command("train-ae")
def train_ae(
    data: List[Path] = typer.Option(..., "--data", help="Trajectory store to learn frames from; repeat it to learn "
                                                        "several games' frames at once (each game weighs the same)."),
    out: Path = typer.Option(..., "--out", help="Folder for the autoencoder (diffusers format)."),
    preset: str = typer.Option("cpu", help="tiny, cpu, cpu-16ch, cpu-4x, cpu-wide, cpu-asym or paper (sizes the AE and the padding)."),
    steps: int = typer.Option(3000, help="Autoencoder steps (encoder + decoder)."),
    decoder_steps: int = typer.Option(1000, help="Decoder fine-tune steps, encoder frozen (paper §3.2.2)."),
    batch_size: int = typer.Option(32),
    crop: int = typer.Option(0, help="Train on random crops this many pixels a side (0: whole frames, the better "
                                     "use of the same time; docs/results.md)."),
    learning_rate: float = typer.Option(1e-3),
    pretrained: Optional[Path] = typer.Option(None, help="Local diffusers VAE folder (e.g. SD-v1.4's vae/)."),
    init: Optional[Path] = typer.Option(None, help="An autoencoder folder of the same preset to start from (e.g. "
                                                   "models/freedoom-e1m1/ae for --preset cpu): fewer steps for a new game."),
    seed: int = typer.Option(0),
    checkpoint_every: int = typer.Option(250, help="Steps between checkpoints (either stage)."),
    keep_checkpoints: int = typer.Option(2, help="How many of the newest checkpoints to keep."),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this many minutes (stage 1 by 3/4 of them), saving the AE as trained so far."),
    bf16: bool = typer.Option(False, help="bf16 autocast: 1.5x faster on CPUs with bf16 units, slower on others "
                                          "(may change when the run resumes)."),
):
    """Train the latent autoencoder on store frames, then fine-tune its decoder alone (re-run to resume)."""
    from ..train.autoencoder import AETrainConfig, train_autoencoder

    warn_slow_bf16(bf16)
    cfg = AETrainConfig(preset=preset, steps=steps, decoder_steps=decoder_steps, batch_size=batch_size,
                        crop=crop, learning_rate=learning_rate, seed=seed, checkpoint_every=checkpoint_every,
                        keep_checkpoints=keep_checkpoints, pretrained=str(pretrained) if pretrained else None,
                        init=str(init) if init else None,
                        max_minutes=max_minutes, bf16=bf16)
    bars = {}
    with progress_bar("autoencoder steps", (0 if pretrained else steps) + decoder_steps) as advance:
        to_step = step_reporter(advance)  # steps count over both stages; a resumed run starts at its step

        def report(stage, done, total, loss):
            to_step(done, total, loss)
            bars[stage] = loss

        codec = train_autoencoder(list(data), out, cfg, report, warn=lambda m: typer.echo(f"warning: {m}", err=True))
    typer.echo(f"{out}: latents {codec.latent_shape()} per frame; final MSE "
               + ", ".join(f"{k} {v:.5f}" for k, v in bars.items()))


@app.command()
def train(
    data: Path = typer.Option(..., "--data", help="Trajectory store."),
    ae: Path = typer.Option(..., "--ae", help="Autoencoder folder from `gamengen train-ae`."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed if it exists)."),
    preset: str = typer.Option("cpu", help="tiny, cpu, cpu-m, cpu-l or paper (the U-Net's size)."),
    steps: Optional[int] = typer.Option(None, help="Total optimizer steps (default 20000)."),
    batch_size: Optional[int] = typer.Option(None, help="Global batch over all processes."),
    context: Optional[int] = typer.Option(None, help="Context length N (paper: 64)."),
    max_frames: Optional[int] = typer.Option(None, help="Train on a seeded subset of about this many frames."),
    learning_rate: Optional[float] = typer.Option(None),
    bf16: bool = typer.Option(False, help="bf16 autocast."),
    timesteps: str = typer.Option("uniform", help="Training noise levels: uniform timesteps (paper) or "
                                                  "lognormal (EDM's sigma distribution, as DIAMOND trains)."),
    unroll: float = typer.Option(0.0, help="Share of samples whose last context frame is the model's own "
                                           "1-step prediction (a drift remedy; 0: off, as the paper)."),
    residual: bool = typer.Option(False, help="Diffuse the change from the last context frame instead of "
                                              "the frame (a parameterisation lever; off: the paper's)."),
    max_noise_level: float = typer.Option(0.7, help="Noise augmentation: context noise levels are drawn from "
                                                    "[0, this] (paper §3.2.1: 0.7; 0: off)."),
    batched_data: bool = typer.Option(False, help="Gather batches and draw noise on the training device (for GPUs)."),
    checkpoint_every: Optional[int] = typer.Option(None),
    sample_every: Optional[int] = typer.Option(None),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this many minutes, exporting the model at the step reached (the same command resumes)."),
    init: Optional[Path] = typer.Option(None, help="A world model folder (same preset, game and AE) whose weights a new run starts from, with a fresh optimizer."),
):
    """Train the action-conditioned diffusion world model. Works under `accelerate launch`."""
    import dataclasses

    from ..diffusion.denoiser import TIMESTEP_DRAWS
    from ..train.world_model import TrainConfig
    from ..train.world_model import train as run_train

    if timesteps not in TIMESTEP_DRAWS:
        raise UserError(f"--timesteps {timesteps} is not known", "pass one of: " + ", ".join(TIMESTEP_DRAWS))
    if not 0.0 <= max_noise_level <= 1.0:
        raise UserError(f"--max-noise-level {max_noise_level} is outside [0, 1]", "pass e.g. 0.7 (the paper's) or 0.3")
    if not 0.0 <= unroll <= 1.0:
        raise UserError(f"--unroll {unroll} is not a share", "pass a number from 0 to 1, e.g. --unroll 0.25")

    given = {"steps": steps, "batch_size": batch_size, "context": context, "learning_rate": learning_rate,
             "max_frames": max_frames, "max_minutes": max_minutes,
             "checkpoint_every": checkpoint_every, "sample_every": sample_every}
    warn_slow_bf16(bf16)
    cfg = TrainConfig.from_preset(preset, bf16=bf16, seed=seed, batched_data=batched_data,
                                  init=str(init.resolve()) if init else None,
                                  **{k: v for k, v in given.items() if v is not None})
    cfg = dataclasses.replace(cfg, denoiser=dataclasses.replace(cfg.denoiser, timesteps=timesteps, unroll=unroll,
                                                                   residual=residual, max_noise_level=max_noise_level))
    with progress_bar(f"training ({preset} preset)", cfg.steps) as advance:
        losses = run_train(data, ae, out, cfg, step_reporter(advance),
                           warn=lambda m: typer.echo(f"warning: {m}", err=True))
    if losses:
        typer.echo(f"{out}: step {len(losses)}, loss {losses[-1]:.4f}; model in {out / 'model'}")


@app.command()
def distill(
    model: Path = typer.Option(..., "--model", help="The teacher: a world model folder (4 DDIM steps + CFG)."),
    data: Path = typer.Option(..., "--data", help="A store of its game; only training episodes are read."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed if it exists); the student in OUT/model."),
    steps: int = typer.Option(2000, help="Distillation steps."),
    batch_size: int = typer.Option(16),
    learning_rate: float = typer.Option(3e-3),
    max_frames: Optional[int] = typer.Option(None, help="Read a seeded subset of about this many frames."),
    latents: Optional[Path] = typer.Option(None, help="A latent-cache root to reuse, e.g. the AE run's latents/."),
    checkpoint_every: int = typer.Option(100),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this many minutes, exporting the model at the step reached (the same command resumes)."),
    bf16: bool = typer.Option(False, help="bf16 autocast (fast on CPUs with bf16 units; may change on resume)."),
):
    """A 1-step student of a world model (paper App. A.4): it learns the teacher's 4-step CFG frames."""
    from ..train.distill import DistillConfig
    from ..train.distill import distill as run_distill

    warn_slow_bf16(bf16)
    cfg = DistillConfig(steps=steps, batch_size=batch_size, learning_rate=learning_rate, max_frames=max_frames,
                        checkpoint_every=checkpoint_every, seed=seed, max_minutes=max_minutes, bf16=bf16)
    with progress_bar("distillation steps", steps) as advance:
        losses = run_distill(model, data, out, cfg, step_reporter(advance),
                             warn=lambda m: typer.echo(f"warning: {m}", err=True), latents=latents)
    if losses:
        typer.echo(f"{out}: step {len(losses)}, loss {losses[-1]:.5f}; 1-step model in {out / 'model'}")


@app.command("tune-decoder")
def tune_decoder(
    model: Path = typer.Option(..., "--model", help="A world model folder (a 1-step student or its teacher)."),
    data: Path = typer.Option(..., "--data", help="A store of its game; only training episodes are read."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed if it exists); the model in OUT/model."),
    steps: int = typer.Option(2000, help="Fine-tune steps."),
    batch_size: int = typer.Option(16),
    mix: float = typer.Option(0.25, help="Share of each batch that decodes the true frame's latent (keeps the AE ceiling)."),
    learning_rate: float = typer.Option(1e-4, help="The decoder's (AdamW)."),
    unet: bool = typer.Option(False, "--unet", help="Also fine-tune the U-Net, end to end through its sampler "
                                                    "and the decoder (best on a 1-step student)."),
    unet_learning_rate: float = typer.Option(3e-5, help="The U-Net's, with --unet."),
    max_frames: Optional[int] = typer.Option(None, help="Read a seeded subset of about this many frames."),
    latents: Optional[Path] = typer.Option(None, help="A latent-cache root to reuse, e.g. the AE run's latents/."),
    checkpoint_every: int = typer.Option(100),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this many minutes, exporting the model at the step reached (the same command resumes)."),
    bf16: bool = typer.Option(False, help="bf16 autocast (fast on CPUs with bf16 units; may change on resume)."),
):
    """Fine-tune what the player sees: the decoder (and with --unet the U-Net) on pixel MSE of the model's predictions."""
    from ..train.decoder import DecoderTuneConfig
    from ..train.decoder import tune_decoder as run_tune

    warn_slow_bf16(bf16)
    cfg = DecoderTuneConfig(steps=steps, batch_size=batch_size, mix=mix, learning_rate=learning_rate,
                            unet_learning_rate=unet_learning_rate if unet else None, max_frames=max_frames, checkpoint_every=checkpoint_every, seed=seed,
                            max_minutes=max_minutes, bf16=bf16)
    with progress_bar("decoder steps", steps) as advance:
        losses = run_tune(model, data, out, cfg, step_reporter(advance),
                          warn=lambda m: typer.echo(f"warning: {m}", err=True), latents=latents)
    if losses:
        typer.echo(f"{out}: step {len(losses)}, pixel MSE {losses[-1]:.5f}; model in {out / 'model'}")


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
    automap_pool: int = typer.Option(2, help="Max-pool the automap by this factor (1: the paper's 160x120)."),
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
    from ..agent.train import AgentConfig, replace, train

    warn_slow_bf16(bf16)
    cfg = replace(AgentConfig(), steps=steps, n_envs=n_envs, n_steps=n_steps, n_epochs=n_epochs,
                  batch_size=batch_size, learning_rate=learning_rate, ent_coef=ent_coef, gamma=gamma,
                  vec_env=vec_env, eval_every=eval_every, bf16=bf16, **{
                      "env.env_id": env, "env.hold": hold, "env.repeat_prob": repeat_prob,
                      "env.max_episode_frames": max_episode_frames, "env.seed": seed,
                      "env.automap_pool": automap_pool})
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
    from ..agent.report import report

    pairs = {}
    for c in compare:
        name, sep, path = c.partition("=")
        if not sep or not name or not path:
            raise UserError(f"bad --compare '{c}'", "write NAME=STORE, e.g. --compare random=data/random")
        pairs[name] = path
    res = report(run, pairs, out)
    where = out or run
    typer.echo(f"wrote {where}/agent_report.md, .json and .png ({res['curve']['episodes']} agent episodes)")


@agent_app.command("export")
def agent_export(
    run: Path,
    out: Path = typer.Option(..., "--out", help="Folder for model.safetensors (fp16) + config.json."),
):
    """Copy a run's exported policy with fp16 weights (half the size), to commit or share."""
    from ..agent.policy import export_fp16

    export_fp16(run / "policy", out)
    typer.echo(f"wrote {out}/model.safetensors and config.json (fp16)")
