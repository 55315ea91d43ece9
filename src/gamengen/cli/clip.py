"""`gamengen clip ...`: GameGen-X's foundation model (§3.3, §3.5): train it, make clips from text, continue clips."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer

from ..errors import UserError
from .common import (CONTROL_GUIDANCE, app, console, interactive_threads, progress_bar, step_reporter,
                     warn_slow_bf16)


clip_app = typer.Typer(no_args_is_help=True, help="GameGen-X clips: train the clip model, make clips from text, "
                                                  "continue recorded play.")
app.add_typer(clip_app, name="clip")

CONTROL_KEYS = ("TURN_LEFT", "TURN_RIGHT", "FORWARD", "BACKWARD", "STRAFE_LEFT", "STRAFE_RIGHT", "MOVE_FORWARD",
                "MOVE_BACKWARD", "MOVE_LEFT", "MOVE_RIGHT")  # eval/control.py KEYS, without importing it here
# The README's example: a world clip play starts from until the player writes their own.
EXAMPLE_PROMPT = ("Summary: A 1.0-second first-person clip of ViZDoom, scenario health_gathering: the player moves "
                  "forward, mostly pressing MOVE_FORWARD. Game_Meta: ViZDoom, a first-person shooter on the DOOM engine; "
                  "scenario health_gathering; vizdoom 1.3.2, 17.5 frames per second. Character: First-person view of "
                  "the player, with no weapon; health 60 -> 56, armor 0. Frame_Desc: In view: items: medikit x2. Mean "
                  "brightness 51/255 (dim). Atmosphere: Dim picture; tense: the player loses 4 health.")
PRESETS = "tiny (tests), cpu or paper (the MSDiT's size; the text encoder pretrained here follows it)"


@clip_app.command("train-vae")
def train_vae(
    data: List[Path] = typer.Option(..., "--data", help="Trajectory store to learn clips from (its training episodes); "
                                                        "repeat it for several games."),
    ae: Path = typer.Option(..., "--ae", help="2D autoencoder folder from `gamengen train-ae` on these stores."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed); the codec goes to OUT/model."),
    preset: str = typer.Option("cpu", help="tiny or cpu (the temporal VAE's size)."),
    steps: int = typer.Option(2000),
    batch_size: int = typer.Option(8),
    learning_rate: float = typer.Option(1e-3),
    frames: int = typer.Option(17, help="Clip length 1 + 4k (the clip dataset's --clip-frames)."),
    checkpoint_every: int = typer.Option(250),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this long, saving the codec (re-run to resume)."),
):
    """Train the video VAE (§3.3: 4x in time over the 2D autoencoder) that `clip train --codec` needs."""
    from ..train.video_vae import VideoVAETrainConfig, train_video_vae

    cfg = VideoVAETrainConfig(preset=preset, frames=frames, steps=steps, batch_size=batch_size,
                              learning_rate=learning_rate, seed=seed, checkpoint_every=checkpoint_every,
                              max_minutes=max_minutes)
    with progress_bar(f"video VAE ({preset} preset)", steps) as advance:
        codec = train_video_vae(list(data), ae, out, cfg, step_reporter(advance), warn=_warn)
    typer.echo(f"{out / 'model'}: {frames}-frame clips -> latents {codec.latent_shape(frames)}; held-out clip PSNR "
               f"{codec.meta.get('heldout_clip_psnr', 'n/a')} dB (2D AE alone {codec.meta.get('heldout_ae_psnr', 'n/a')})")


@clip_app.command("tune-codec")
def tune_codec(
    data: List[Path] = typer.Option(..., "--data", help="Clip dataset from `gamengen curate`; repeat it for several."),
    codec: Path = typer.Option(..., "--codec", help="A codec folder (`clip train-vae`'s OUT/model), or a clip model "
                                                    "folder, whose codec is tuned."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed); the result goes to OUT/model: "
                                                "the tuned codec, or the clip model with it."),
    steps: int = typer.Option(2000),
    batch_size: int = typer.Option(8, help="Clips per step."),
    frames_per_clip: int = typer.Option(4, help="Frames of each clip the 2D decoder draws per step."),
    learning_rate: float = typer.Option(1e-4),
    checkpoint_every: int = typer.Option(100),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this long, saving the result (re-run to resume)."),
    bf16: bool = typer.Option(False, help="bf16 autocast of the decoders (may change on resume)."),
    adversarial: float = typer.Option(0.0, help="Weight of a patch discriminator's loss beside the pixel MSE, "
                                                 "balanced by VQGAN's gradient rule (0: MSE alone)."),
):
    """Fine-tune the codec's two decoders as one chain on pixels, encoders frozen: latents, and every
    clip model trained on them, stay valid. `clip eval`'s held-out clips are never tuned on."""
    from ..train.codec_tune import CodecTuneConfig, tune_codec as tune

    warn_slow_bf16(bf16)
    cfg = CodecTuneConfig(steps=steps, batch_size=batch_size, frames_per_clip=frames_per_clip, learning_rate=learning_rate,
                          checkpoint_every=checkpoint_every, seed=seed, max_minutes=max_minutes, bf16=bf16,
                          adversarial=adversarial)
    with progress_bar("codec decoders", steps) as advance:
        tuned = tune(list(data), codec, out, cfg, step_reporter(advance), warn=_warn,
                     stage=lambda m: console.print(m))
    t = tuned.meta["decoder_tune"]
    typer.echo(f"{out / 'model'}: step {t['steps']}; held-out clip PSNR {t['heldout_clip_psnr_before']} -> "
               f"{t['heldout_clip_psnr_after']} dB over {t['heldout_clips']} clips")


@clip_app.command("train-text")
def train_text(
    data: List[Path] = typer.Option(..., "--data", help="Clip dataset(s) from `gamengen curate` whose GEN captions "
                                                         "it learns."),
    out: Path = typer.Option(..., "--out", help="New folder for the text encoder (pass it to `clip train --text`)."),
    preset: str = typer.Option("cpu", help="tiny (tests) or cpu (256 wide, the cpu MSDiT's text width)."),
    steps: int = typer.Option(2000, help="Span-corruption steps (T5's pretraining objective)."),
    batch_size: int = typer.Option(32),
    learning_rate: float = typer.Option(1e-3),
    seed: int = typer.Option(0),
):
    """Pretrain the caption T5 (§3.3's text encoder, trained here on our captions: nothing is downloaded)."""
    from ..train.clip import open_datasets
    from ..train.text_encoder import pretrain

    _check_new_folder(out)
    _, captions = open_datasets(list(data))
    with progress_bar(f"text encoder ({preset} preset) on {len(captions)} captions", steps) as advance:
        to_bar = step_reporter(advance)  # pretrain reports after step s as s; the bar counts steps done
        enc = pretrain(captions, preset, steps, batch_size, learning_rate, seed, lambda s, n, loss: to_bar(s + 1, n, loss))
    enc.save(out)
    typer.echo(f"{out}: {enc.preset} T5 encoder, width {enc.width}, vocabulary {len(enc.tokenizer)}, "
               f"pretrained {steps} steps on {len(captions)} GEN captions")


@clip_app.command("train")
def train(
    data: List[Path] = typer.Option(..., "--data", help="Clip dataset from `gamengen curate`; repeat it to train on "
                                                         "several (one per game, say) as one."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed if it exists); the model goes to OUT/model."),
    codec: Optional[Path] = typer.Option(None, "--codec", help="Video VAE folder (`gamengen clip train-vae`'s OUT/model). Required."),
    text: Optional[Path] = typer.Option(None, "--text", help="A text encoder folder; without it one is pretrained on the "
                                                             "dataset's GEN captions and kept in OUT/text."),
    preset: str = typer.Option("cpu", help=PRESETS),
    steps: Optional[int] = typer.Option(None, help="MSDiT optimizer steps (default 2000)."),
    batch_size: Optional[int] = typer.Option(None),
    learning_rate: Optional[float] = typer.Option(None, help="Adam, fixed (paper §3.5: 5e-4)."),
    text_steps: Optional[int] = typer.Option(None, help="Text encoder pretraining steps (without --text)."),
    checkpoint_every: Optional[int] = typer.Option(None),
    captions: str = typer.Option("structured", help="structured (the five GEN fields, §3.2) or short (the Summary "
                                                    "field alone: the paper's caption ablation)."),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this long, exporting the model at the step reached (the same command resumes)."),
    bf16: bool = typer.Option(False, help="bf16 autocast (for wide presets; no faster at cpu size; may change on resume)."),
    pooled_text: bool = typer.Option(False, help="Add the caption's mean feature to MSDiT's conditioning, besides "
                                                 "cross-attention (not in the paper; docs/gamegen_x.md)."),
    image_share: float = typer.Option(0.0, help="Share of steps that train on single frames (each clip's first; "
                                                "batch size x latent frames of them): §3.5's length buckets."),
    ema_decay: Optional[float] = typer.Option(None, help="The exported weights are their moving average with this "
                                                         "decay (default 0.999; 0: the last weights)."),
    continuation: Optional[float] = typer.Option(None, help="Share of continuation samples, the rest text-to-clip "
                                                           "(default 0.25: §3.5's 75/25 mix)."),
    context_noise: float = typer.Option(0.0, help="Noise continuation contexts to a flow time up to this (GameNGen's "
                                                  "noise augmentation; 0.4 ~ its 0.7 std), against drift in chained "
                                                  "continuation; 0: clean (§3.3)."),
    init: Optional[Path] = typer.Option(None, "--init", help="A clip model folder (same preset and --pooled-text) "
                                                             "whose MSDiT a new run starts from, with a fresh "
                                                             "optimizer; --codec and --text default to its own."),
):
    """Train the clip model: 75% text-to-clip, 25% continuation, 25% text dropout, rectified flow (§3.5)."""
    from ..train.clip import ClipTrainConfig, train_clip

    given = {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate, "text_steps": text_steps,
             "checkpoint_every": checkpoint_every, "max_minutes": max_minutes, "ema_decay": ema_decay,
             "continuation": continuation}
    warn_slow_bf16(bf16)
    cfg = ClipTrainConfig.from_preset(preset, seed=seed, captions=captions, bf16=bf16, pooled_text=pooled_text,
                                      image_share=image_share, context_noise=context_noise,
                                      init=str(init.resolve()) if init else None,
                                      **{k: v for k, v in given.items() if v is not None})
    last = [float("nan")]
    with progress_bar(f"clip model ({preset} preset)", cfg.steps) as advance:
        to_bar = step_reporter(advance)

        def report(step: int, total: int, loss: float) -> None:
            to_bar(step, total, loss)
            last[0] = loss

        model = train_clip(list(data), out, cfg, report, _warn, codec, text, stage=lambda m: console.print(m))
    typer.echo(f"{out}: step {model.meta.train_steps}, loss {last[0]:.4f}; model in {out / 'model'}")


@clip_app.command("train-instruct")
def train_instruct(
    model: Path = typer.Option(..., "--model", help="The clip model to steer (frozen; `gamengen clip train`'s OUT/model)."),
    data: List[Path] = typer.Option(..., "--data", help="Clip dataset curated from trajectory stores (it records the "
                                                         "keys); repeat it for several games."),
    out: Path = typer.Option(..., "--out", help="Run folder (created, or resumed); the InstructNet goes to OUT/model."),
    steps: int = typer.Option(2000, help="InstructNet optimizer steps."),
    batch_size: int = typer.Option(8),
    learning_rate: float = typer.Option(5e-4),
    layers: Optional[int] = typer.Option(None, help="InstructNet layer pairs (default: half the clip model's, as the paper)."),
    prompts: List[str] = typer.Option([], "--prompt-kind", help="A video prompt kind to train with (canny or flow); "
                                                                "repeat it. None: no video prompts."),
    context_noise: float = typer.Option(0.05, help="Std of the light noise on the context latents (§3.4)."),
    instructions: bool = typer.Option(True, "--instructions/--no-instructions", help="--no-instructions: never read "
                                      "the instruction captions (the paper's \"w/o instruct captions\" ablation)."),
    key_modulation: bool = typer.Option(False, help="The keys also shift the adaLN modulation of InstructNet's "
                                                    "blocks (ours; see docs/gamegen_x.md)."),
    instruction_modulation: bool = typer.Option(False, help="The instruction's pooled features also give an affine "
                                                "modulation of InstructNet's latent, as the keys do (ours; see "
                                                "docs/gamegen_x.md). An --init without it gains it at zero."),
    expert_lr_scale: float = typer.Option(1.0, help="The fusion experts learn at this multiple of the learning rate."),
    key_change_share: float = typer.Option(0.0, help="This share of the draws from clips whose keys change inside "
                                                     "them (ours; see docs/gamegen_x.md)."),
    event_share: float = typer.Option(0.0, help="This share of the draws from clips where an in-game event fires "
                                                "after the context (ours; see docs/gamegen_x.md)."),
    timestep_mean: float = typer.Option(0.0, help="Mean of the logit-normal t draw; > 0 trains more near pure "
                                                  "noise, where the motion is decided (ours; see docs/gamegen_x.md)."),
    mean_loss: float = typer.Option(0.0, help="Each generated frame's error also pays this multiple of its spatial "
                                              "mean's square: a tint or a light change costs more (ours; see "
                                              "docs/gamegen_x.md)."),
    no_control: float = typer.Option(0.2, help="The share of samples given no control (§3.5: 20%)."),
    text_dropout: float = typer.Option(0.25, help="The share of samples whose GEN caption is dropped (stage 1's "
                                       "25%). It describes the whole clip, the frames to generate too, so where "
                                       "it is given it says what the keys and events do (see docs/gamegen_x.md)."),
    recipe: List[str] = typer.Option([], "--recipe", help="MODE=SHARE for the controlled samples, repeated, modes "
                                     "keys, instruction, prompt, all (each with the instruction); a mode left out "
                                     "gets 0. Default §3.5's keys=0.3 instruction=0.3 prompt=0.3 all=0.1."),
    init: Optional[Path] = typer.Option(None, "--init", help="An InstructNet trained beside the same clip model "
                                        "(a run's OUT/model): start from its weights, with a fresh optimizer, and "
                                        "draw the batches its run would have drawn next."),
    checkpoint_every: int = typer.Option(250),
    seed: int = typer.Option(0),
    max_minutes: Optional[float] = typer.Option(None, help="Stop after about this long, exporting the InstructNet at the step reached (the same command resumes)."),
    bf16: bool = typer.Option(False, help="bf16 autocast of the forward pass."),
):
    """Train InstructNet beside the frozen clip model (§3.4, §3.5 stage 2): keys, instructions, video prompts."""
    from ..train.instruct import InstructTrainConfig, parse_recipe, train_instruct as train_net

    warn_slow_bf16(bf16)
    cfg = InstructTrainConfig(steps=steps, batch_size=batch_size, learning_rate=learning_rate, layers=layers,
                              no_control=no_control, text_dropout=text_dropout,
                              **({"recipe": parse_recipe(recipe)} if recipe else {}),
                              prompts=list(prompts), context_noise=context_noise, instructions=instructions,
                              key_modulation=key_modulation, instruction_modulation=instruction_modulation,
                              expert_lr_scale=expert_lr_scale,
                              key_change_share=key_change_share, event_share=event_share,
                              timestep_mean=timestep_mean, mean_loss=mean_loss,
                              init=str(init) if init else None, checkpoint_every=checkpoint_every,
                              seed=seed, max_minutes=max_minutes, bf16=bf16)
    last = [float("nan")]
    with progress_bar("InstructNet", cfg.steps) as advance:
        to_bar = step_reporter(advance)

        def report(step: int, total: int, loss: float) -> None:
            to_bar(step, total, loss)
            last[0] = loss

        result = train_net(list(data), model, out, cfg, report, _warn, stage=lambda m: console.print(m))
    typer.echo(f"{out}: step {result.meta.train_steps}, loss {last[0]:.4f}; InstructNet in {out / 'model'}")


@clip_app.command("export")
def export(
    model: Path = typer.Option(..., "--model", help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    out: Path = typer.Option(..., "--out", help="New folder for the exported model."),
    half: bool = typer.Option(True, "--half/--full", help="Store the MSDiT's weights in float16 (half the bytes; "
                                                          "they load as float32)."),
    note: str = typer.Option("", help="A paragraph to add to the model card (how it was trained, what it shows)."),
):
    """Copy a clip model into a shareable folder (e.g. to bundle it), the MSDiT in float16 by default."""
    from ..models.clip_model import ClipModel

    _check_new_folder(out)
    m = ClipModel.from_pretrained(model)
    card = m.default_card() + ("\nThe MSDiT's weights are stored in float16 and load as float32.\n" if half else "")
    m.save_pretrained(out, card + (f"\n{note.strip()}\n" if note.strip() else ""), half=half)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    typer.echo(f"{out}: {size / 1e6:.1f} MB")


@clip_app.command("generate")
def generate(
    model: Path = typer.Option(..., "--model", help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    prompt: str = typer.Option(..., "--prompt", help="What the clip shows (a GEN caption works best)."),
    out: Path = typer.Option(..., "--out", help="Video to write (.mp4 or .gif)."),
    seed: int = typer.Option(0, help="The noise; the same seed gives the same clip."),
    steps: Optional[int] = typer.Option(None, help="Euler steps (default: the model's; paper 10-50)."),
    guidance: Optional[float] = typer.Option(None, help="CFG weight on the text (default: the model's; 1: none)."),
    png: bool = typer.Option(False, "--png", help="Also write the frames side by side to OUT with .png."),
):
    """Make a clip from a text prompt (text-to-clip)."""
    interactive_threads()
    from ..engine.clip import generate as make
    from ..models.clip_model import ClipModel

    _check_out(out)
    m = ClipModel.from_pretrained(model)
    frames = make(m, prompt, seed, steps, guidance)
    _write(out, frames, m.meta.fps, png)
    typer.echo(f"{out}: {len(frames)} frames at {m.meta.fps:g} fps, {m.meta.width}x{m.meta.height}, seed {seed}")


@clip_app.command("continue")
def continue_(
    model: Path = typer.Option(..., "--model", help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    source: str = typer.Option(..., "--from", help="STORE:EPISODE[:FRAME]: continue from the frames before FRAME "
                                                   "(without FRAME: from the episode's first frames)."),
    prompt: str = typer.Option(..., "--prompt", help="What happens next."),
    out: Path = typer.Option(..., "--out", help="Video to write (.mp4 or .gif): the context, then the new frames."),
    context: Optional[int] = typer.Option(None, help="Context frames to read (default: as many as the model holds; "
                                                     "the last 1 + 4k of them are used)."),
    instruct: Optional[Path] = typer.Option(None, "--instruct", help="An InstructNet folder trained beside --model "
                                                                     "(`gamengen clip train-instruct`'s OUT/model)."),
    keys: List[str] = typer.Option([], "--key", help="A key held through the new frames (e.g. TURN_LEFT); repeat it. "
                                                      "Needs --instruct."),
    instruction: Optional[str] = typer.Option(None, help="An instruction caption (Env/Trans/Light/Act/Misc fields). "
                                                         "Needs --instruct."),
    video_prompt: Optional[str] = typer.Option(None, help="canny or flow: that video prompt of the recorded frames "
                                                          "from the context on. Needs --instruct."),
    seed: int = typer.Option(0),
    steps: Optional[int] = typer.Option(None),
    guidance: Optional[float] = typer.Option(None),
    control_guidance: float = CONTROL_GUIDANCE,
    png: bool = typer.Option(False, "--png", help="Also write the frames side by side to OUT with .png."),
):
    """Continue recorded play: its frames held as context (§3.3's frame mask), the rest generated; with
    --instruct, steered by keys, an instruction or a video prompt (§3.4)."""
    interactive_threads()
    from ..engine.clip import Steering, context_frames_used, continue_clip
    from ..models.clip_model import ClipModel

    store_path, episode, frame = parse_source(source)
    if instruct is None and (keys or instruction is not None or video_prompt):
        raise UserError("--key, --instruction and --video-prompt steer through an InstructNet",
                        "pass --instruct with the InstructNet trained beside --model")
    _check_out(out)
    m = ClipModel.from_pretrained(model)
    steer = None
    if instruct is not None:
        from ..curate.prompts import KINDS, video_prompt as make_prompt
        from ..models.instruct_model import InstructModel

        if video_prompt is not None and video_prompt not in KINDS:
            raise UserError(f"unknown video prompt kind {video_prompt!r}", "use one of: " + ", ".join(KINDS))
        steer = Steering(InstructModel.from_pretrained(instruct, m), tuple(keys), instruction, guidance=control_guidance)
    frames, first = read_context(m, store_path, episode, frame, context, context_frames_used)
    used = context_frames_used(m, len(frames))
    if steer is not None and video_prompt is not None:
        recorded = read_frames(store_path, episode, first + len(frames) - used, m.meta.frames)
        steer.prompt = make_prompt(video_prompt, recorded)
    clip = continue_clip(m, frames, prompt, seed, steps, guidance, steer=steer)
    _write(out, clip, m.meta.fps, png)
    typer.echo(f"{out}: {len(clip)} frames at {m.meta.fps:g} fps, frames 1-{used} re-encode the context from {source}")


@clip_app.command("play")
def play(
    model: Path = typer.Option(..., "--model", help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    instruct: Optional[Path] = typer.Option(None, "--instruct", help="An InstructNet trained beside --model: keys and "
                                                                     "instructions steer each chunk (without it they do nothing)."),
    steps: Optional[int] = typer.Option(None, help="Euler steps per chunk (default 4; the first clip takes the model's)."),
    guidance: Optional[float] = typer.Option(None, help="CFG weight on the text (default: the model's; 1 halves the "
                                                         "work, but the world drifts from the prompt)."),
    context: int = typer.Option(5, help="Frames each chunk continues from (1 + 4k): more keep the scene, fewer give "
                                        "more new frames per chunk."),
    control_guidance: float = CONTROL_GUIDANCE,
    bf16: Optional[bool] = typer.Option(None, "--bf16/--fp32", help="Run the networks under bf16 autocast (default: "
                                                                  "where the CPU has bf16 units; a chunk about a fifth "
                                                                  "faster there, many times slower elsewhere)."),
    keymap: Optional[Path] = typer.Option(None, help="Keymap JSON (default: the model's game's own)."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on. Loopback unless you say otherwise."),
    port: int = typer.Option(8000, help="Port (0 picks a free one)."),
    max_sessions: int = typer.Option(4, help="Players at once (they share one compute thread)."),
    idle_timeout: float = typer.Option(300.0, help="Seconds without input before a player is disconnected."),
    open_browser: bool = typer.Option(True, "--open/--no-open", help="Open the page in a browser."),
):
    """Play a clip world in the browser: a prompt starts it, keys and instructions steer each next chunk."""
    interactive_threads()
    from ..engine.clip_play import ClipPlayConfig, ClipWorld, load_clip_play_models
    from ..play.clip_server import ClipPlayer, create_clip_app
    from ..play.compute import on_compute
    from ..play.keymap import Keymap
    from ..play.server import ServerConfig
    from .common import run_server

    config = ServerConfig(host=host, port=port, max_sessions=max_sessions, idle_timeout=idle_timeout)
    m, net = on_compute(load_clip_play_models, model, instruct)  # where the server will run them
    warn_slow_bf16(bool(bf16))
    cfg = ClipPlayConfig(guidance=guidance, context=context, control_guidance=control_guidance, bf16=bf16,
                         **({} if steps is None else {"steps": steps}))
    world = ClipWorld(m, net, cfg)  # a bad --context or --control-guidance fails here, before the server starts
    km = Keymap.for_clips(m.meta.env_ids, keymap)
    info = {"model": model.name, "steps per chunk": cfg.steps,
            "guidance": m.sampler.for_task(True)[0] if guidance is None else guidance, "context": context,
            "control guidance": control_guidance, "precision": "bf16" if world.bf16 else "fp32"}
    player = ClipPlayer(lambda: ClipWorld(m, net, cfg), km, f"clip play: {model}", EXAMPLE_PROMPT, info,
                        m.meta.fps)
    run_server(lambda p: create_clip_app(player, config, p), config, open_browser)


@clip_app.command("eval")
def eval_(
    model: Path = typer.Option(..., "--model", help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    data: List[Path] = typer.Option(..., "--data", help="Curated clip dataset of one game; repeat it, one per "
                                                         "game (its game: the source store's env id, else the "
                                                         "folder name)."),
    out: Path = typer.Option(..., "--out", help="New folder for report.md, report.json, strips/ and classifier/."),
    clips_per_game: int = typer.Option(8, help="Held-out clips per game whose captions prompt the model."),
    seed: int = typer.Option(0, help="The split, the classifier, the choice of clips and the noise."),
    steps: Optional[int] = typer.Option(None, help="Euler steps (default: the model's)."),
    guidance: Optional[float] = typer.Option(None, help="CFG weight on the text (default: the model's; 1: none)."),
    classifier_steps: Optional[int] = typer.Option(None, help="Steps of the frame classifier trained here "
                                                              "(default 2000)."),
    classifier_clips: Optional[int] = typer.Option(None, help="Training clips per game the classifier draws from "
                                                              "(default 400)."),
    judge_data: List[Path] = typer.Option([], "--judge-data", help="More clip datasets of the evaluated games (other "
                                                                   "recordings), all for the judge to train on; "
                                                                   "none of their clips is evaluated. Repeat it."),
    classifier: List[Path] = typer.Option([], "--classifier", help="Reuse the judge of an earlier `clip eval` (its "
                                                                    "--out folder); repeat it for a panel."),
    judges: int = typer.Option(1, help="Judges trained here, from seeds --seed + k, scoring as one panel by their "
                                       "mean probabilities (one judge's figure moves with its seed)."),
    i3d: Optional[Path] = typer.Option(None, help="TorchScript I3D for FVD (default ~/.cache/gamengen/"
                                                  "i3d_torchscript.pt; never downloaded)."),
    instruct: Optional[Path] = typer.Option(None, "--instruct", help="An InstructNet trained beside --model: the "
                                                                     "continuations run through it with no control "
                                                                     "given (does attaching it change the figures?)."),
    chain: int = typer.Option(0, help="Continue each continuation this many more times, each from its own last "
                                      "frames, and judge every chunk (what clip play shows after the first)."),
    context_noise: Optional[float] = typer.Option(None, help="The flow time continuations show their context at "
                                                             "(default: the model's; for a model trained with "
                                                             "--context-noise)."),
    context: int = typer.Option(5, help="Real frames each continuation holds clean (1 + 4k): more keep the scene, "
                                        "fewer leave more frames to judge."),
):
    """Evaluate a clip model offline: caption-field accuracy, continuation consistency, dynamic degree and
    motion smoothness against real held-out clips (FID, FVD and learned scores: unavailable without weights)."""
    import shlex
    import sys

    from ..eval.clip import ClipEvalConfig, check_inputs, evaluate_clips
    from ..eval.clip_classifier import ClassifierConfig
    from ..eval.clip_report import summary, write_results

    if classifier and judges != 1:
        raise UserError(f"--judges {judges} with --classifier: the judges given are the panel",
                        "leave out --judges, or --classifier to train the judges here")
    changes = {k: v for k, v in (("steps", classifier_steps), ("max_train_clips", classifier_clips)) if v is not None}
    cfg = ClipEvalConfig(clips_per_game, seed, steps, guidance, context_noise, chain, context,
                         i3d=str(i3d) if i3d else None, classifier=ClassifierConfig(seed=seed, **changes),
                         judges=judges)
    inputs = check_inputs(model, list(data), out, cfg, classifier, instruct, list(judge_data))
    res, pictures, clf = evaluate_clips(inputs, cfg, bar=progress_bar)
    write_results(out, res, pictures, clf, "gamengen " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    for line in summary(res):
        typer.echo(line)
    typer.echo(f"wrote {out}/report.md, report.json, strips/ and classifier/")


@clip_app.command("eval-control")
def eval_control(
    model: Path = typer.Option(..., "--model", help="Clip model folder."),
    instruct: Path = typer.Option(..., "--instruct", help="The InstructNet trained beside it."),
    data: List[Path] = typer.Option(..., "--data", help="Trajectory store the InstructNet never trained on (record "
                                                        "one with another --seed); repeat it, one per game."),
    out: Path = typer.Option(..., "--out", help="New folder for report.md, report.json and strips/."),
    contexts: int = typer.Option(4, help="Contexts per store; each is continued under every key."),
    keys: List[str] = typer.Option(list(CONTROL_KEYS), "--key", help="Action names to hold; repeat it (a game "
                                                                    "without one skips it)."),
    context_latents: int = typer.Option(2, help="Latent frames of context (1 + 4(n - 1) video frames)."),
    seed: int = typer.Option(0),
    steps: Optional[int] = typer.Option(None),
    guidance: Optional[float] = typer.Option(None),
    control_guidance: float = CONTROL_GUIDANCE,
    classifier: Optional[Path] = typer.Option(None, "--classifier", help="The judge of an earlier `clip eval` (its "
                                                                         "--out folder): SR-E for the summons it knows."),
    instructions: str = typer.Option("short", help="short: the instruction holds the fields the request is about "
                                                   "(Act and Misc for a key, Trans and Light for an event); full: all "
                                                   "five INS fields, Env from the context's caption; none: no "
                                                   "instruction (a key alone)."),
    bf16: bool = typer.Option(False, "--bf16", help="Generate under bf16 autocast, as clip play does where the CPU "
                                                    "has bf16 units."),
):
    """Character-control success (SR-C) against the real game: each context continued under each key,
    its flow's camera label against the real game's under the same key from the same state; and
    environment-control success (SR-E) for the events a rule can see."""
    import shlex
    import sys

    from ..data.store import Store
    from ..eval.control import ControlEvalConfig, evaluate_control, evaluate_events, event_rule, write_report
    from ..models.clip_model import ClipModel
    from ..models.instruct_model import InstructModel

    _check_new_folder(out)
    m = ClipModel.from_pretrained(model)
    net = InstructModel.from_pretrained(instruct, m)
    judge = None
    if classifier is not None:
        from ..eval.clip_classifier import load_judge

        judge = load_judge(classifier)  # one judge or a panel; a UserError for a folder without one
    warn_slow_bf16(bf16)
    cfg = ControlEvalConfig(contexts, tuple(keys), context_latents, seed, steps, guidance, control_guidance,
                            instructions, bf16)
    with progress_bar("SR-C cases (keys a game lacks are skipped)", contexts * len(data) * len(keys)) as advance:
        res, strips = evaluate_control(m, net, list(data), cfg, report=advance)
    events = sum(event_rule(e, judge) is not None for d in data for e in Store.open(d).spec.events)
    with progress_bar("SR-E cases", contexts * events) as advance:
        res.events = evaluate_events(m, net, list(data), cfg, report=advance, classifier=judge)
    s = write_report(out, res, strips, "gamengen " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    c, e = s["sr_c"], s["sr_e"]
    typer.echo(f"SR-C {fmt(c['steered'])} over {c['scored']} scored cases (base without InstructNet {fmt(c['base'])}, "
               f"codec ceiling {fmt(c['codec'])}, chance {c['chance']:.2f}); SR-E {fmt(e['steered'])} over "
               f"{e['scored']} (base {fmt(e['base'])}, codec {fmt(e['codec'])}); wrote {out}/report.md")


@clip_app.command("control-use")
def control_use(
    model: Path = typer.Option(..., "--model", help="Clip model folder."),
    instruct: Path = typer.Option(..., "--instruct", help="The InstructNet trained beside it (a run's OUT/model)."),
    data: List[Path] = typer.Option([], "--data", help="The clip datasets it trained on (default: those its folder "
                                                       "records); repeat it."),
    cache: Optional[Path] = typer.Option(None, help="Encoded clips (default: the training run's cache beside "
                                                    "--instruct; encoding every clip again takes long)."),
    batches: int = typer.Option(16, help="Batches of 8 clips; each is scored under every row's controls."),
    prompt_kind: List[str] = typer.Option([], "--prompt-kind", help="Also score this video prompt alone, the clip's "
                                          "own and another's (a kind it trained on; encoded into the cache "
                                          "first, minutes a dataset); repeat it."),
    event_share: float = typer.Option(0.0, help="Draw this share of clips from those with an in-game event, the "
                                      "context ending before its effect shows: is the event's instruction read?"),
    gen_text: bool = typer.Option(True, "--gen-text/--no-gen-text", help="Give the GEN caption (it describes the "
                                  "frames to generate too) or drop it, as training drops it."),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json"),
):
    """Does an InstructNet read its controls? Flow loss on its training clips with their own keys and
    instruction, another clip's, none, and the base alone, under the same draws (minutes, not SR-C's
    half hour)."""
    import json

    from ..eval.control_use import control_use as measure, table
    from ..models.clip_model import ClipModel
    from ..models.instruct_model import InstructModel

    m = ClipModel.from_pretrained(model)
    net = InstructModel.from_pretrained(instruct, m)
    clips = list(data) or [Path(p) for p in net.meta.dataset.get("paths", [])]
    if not clips:
        raise UserError(f"{instruct} records no clip datasets", "pass --data, the clip datasets it trained on")
    cache = cache or instruct.parent / "cache"
    if not cache.is_dir():
        raise UserError(f"no encoded clips in {cache}", "pass --cache RUN/cache of the InstructNet's training run")
    res = measure(m, net, clips, cache, batches=batches, seed=seed, prompts=tuple(prompt_kind), event_share=event_share,
                  gen_text=gen_text)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{res['clips']} clips ({res['with_keys']} with keys), {batches} batches of {res['batch_size']}; "
               f"InstructNet of {res['instruct_steps']} steps; event share {event_share:g}, GEN caption "
               f"{'given' if gen_text else 'dropped'}")
    typer.echo(table(res))


def parse_source(text: str) -> tuple[Path, str, int | None]:
    """STORE:EPISODE[:FRAME] -> (store, episode id, FRAME or None)."""
    parts = text.rsplit(":", 2)
    frame = None
    if len(parts) == 3 and parts[2].isdigit():
        store, episode, frame = parts[0], parts[1], int(parts[2])
    else:
        store, _, episode = text.rpartition(":")
    if not store or not episode:
        raise UserError(f"--from '{text}' is not STORE:EPISODE[:FRAME]", "e.g. --from data/train:s0-w0/e000003:120")
    return Path(store), episode, frame


def read_context(model, store_path: Path, episode: str, frame: int | None, count: int | None,
                 used) -> tuple[np.ndarray, int]:
    """uint8 (X, H, W, 3): up to ``count`` frames before ``frame`` (None: the episode's first frames),
    and the episode index of the first of them."""
    store, rec = _episode(store_path, episode)
    m = model.meta
    if (store.spec.height, store.spec.width) != (m.height, m.width):
        raise UserError(f"store {store_path} has {store.spec.width}x{store.spec.height} frames, the model makes "
                        f"{m.width}x{m.height}", "continue from a store of the model's game and size")
    if abs(store.spec.fps - m.fps) > 1e-6:
        _warn(f"store {store_path} runs at {store.spec.fps:g} fps, the model's clips at {m.fps:g} fps; its frames are "
              "used as they are")
    most = used(model, 10**9) if count is None else count
    if most < 1:
        raise UserError(f"--context {count}", "read at least one context frame")
    if frame is None:
        lo, hi = 0, min(most, rec.length)
    elif not 1 <= frame <= rec.length:
        raise UserError(f"frame {frame} is out of range: episode {rec.path} has {rec.length} frames and the "
                        f"context is the frames before FRAME", f"pass a FRAME from 1 to {rec.length}")
    else:
        lo, hi = max(0, frame - most), frame
    return np.asarray(store.open_episode(rec)["frames"][lo:hi]), lo


def read_frames(store_path: Path, episode: str, start: int, count: int) -> np.ndarray:
    """uint8 (count, H, W, 3): the episode's frames from ``start``; a UserError where it ends sooner."""
    store, rec = _episode(store_path, episode)
    if start + count > rec.length:
        raise UserError(f"episode {rec.path} ends at frame {rec.length}, a video prompt needs frames {start} to "
                        f"{start + count - 1}", "continue from an earlier FRAME")
    return np.asarray(store.open_episode(rec)["frames"][start:start + count])


def _episode(store_path: Path, episode: str):
    from ..data.store import Store

    store = Store.open(store_path)
    return store, store.find(episode)


def _check_new_folder(out: Path) -> None:
    """Refuse an --out folder that exists with something in it (or is a file), before any work."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} exists", "pick a new folder for --out")


def _check_out(out: Path) -> None:
    """Refuse an --out that cannot be written, before any work."""
    if out.suffix.lower() not in (".mp4", ".gif"):
        raise UserError(f"--out {out} is not a video file name", "end it in .mp4 or .gif")
    if out.is_dir():
        raise UserError(f"--out {out} is a folder", "pass a file name, e.g. clip.mp4")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"cannot write {out}: {parent} is {'not a folder' if not parent.is_dir() else 'read-only'}",
                        "pick a writable --out")


def _write(out: Path, frames: np.ndarray, fps: float, png: bool) -> None:
    """The video (and strip) into a temporary sibling folder, then renamed into place: a failure leaves nothing."""
    from ..atomic import write_png
    from ..data.video import write_video

    target = out.absolute()
    made = [d for d in [target.parent, *target.parent.parents] if not d.exists()]
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.stem}.", dir=target.parent))
        write_video(tmp / target.name, frames, fps)
        if png:
            write_png(tmp / f"{target.stem}.png", np.concatenate(list(frames), axis=1))  # (H, F * W, 3)
        os.replace(tmp / target.name, target)
        if png:
            os.replace(tmp / f"{target.stem}.png", target.with_suffix(".png"))
    except OSError as e:
        if made:  # the outermost folder made for --out goes again, with all it holds
            shutil.rmtree(made[-1], ignore_errors=True)
        raise UserError(f"cannot write {out}: {e.strerror or e}", "pick a writable --out") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _warn(message: str) -> None:
    typer.echo(f"warning: {message}", err=True)
