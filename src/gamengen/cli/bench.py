"""`gamengen bench`: speed figures measured on this machine (never asserted in tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from .common import bench_app, BUNDLED_MODEL, CONTROL_GUIDANCE, ENV_HELP, interactive_threads, progress_bar, record_config


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
    from ..bench import bench_record

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
    preset: str = typer.Option("cpu", help="tiny, cpu, cpu-m, cpu-l or paper (the paper's at 320x240)."),
    steps: int = typer.Option(10, help="Timed steps per precision (after 2 warm-up steps)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """World-model training samples/s in fp32 and bf16 (same run), one frame's sampling time (4 DDIM
    steps + CFG), and peak memory; on a GPU when there is one."""
    from ..bench import bench_train
    from ..train.world_model import TrainConfig

    TrainConfig.from_preset(preset)  # an unknown preset is a one-line error
    with progress_bar(f"training steps ({preset} preset)", 2 * (steps + 2)) as advance:
        res = bench_train(preset, steps, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{preset} preset at {res['frame']}: {res['params_m']:.1f}M parameters, batch {res['batch']}, "
               f"context {res['context']}, latent {res['latent']}; {res['machine']}, {res['device']}, "
               f"{res['threads']} threads")
    typer.echo(f"  fp32: {res['fp32_samples_per_s']:.1f} samples/s")
    typer.echo(f"  bf16: {res['bf16_samples_per_s']:.1f} samples/s ({res['bf16_vs_fp32']:.2f}x fp32)")
    typer.echo(f"  one frame, 4 DDIM steps + CFG (fp32, batch 1): {res['sample_ms']:.1f} ms")
    typer.echo(f"  peak resident memory: {res['peak_rss_mb']:.0f} MB"
               + (f", GPU {res['peak_gpu_mb']:.0f} MB" if "peak_gpu_mb" in res else ""))


@bench_app.command("agent")
def bench_agent_cmd(
    env: str = typer.Option("vizdoom:freedoom1/E1M1", help=ENV_HELP),
    n_steps: int = typer.Option(128, help="Decisions per game per rollout (the real run uses 512)."),
    rollouts: int = typer.Option(2, help="Rollouts, each followed by its PPO update."),
    as_json: bool = typer.Option(False, "--json"),
):
    """PPO env steps/s, updates included: our agent beside stock SB3 CnnPolicy, same run, same map."""
    from ..bench import bench_agent

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


@bench_app.command("model")
def bench_model_cmd(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder."),
    repeats: int = typer.Option(20, help="Timed calls per path."),
    compile: bool = typer.Option(True, "--compile/--no-compile", help="Also time torch.compile (slow to build)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """FLOPs per frame against this machine's GEMM peak, and U-Net/decode time per path vs eager fp32."""
    interactive_threads()  # measured as the commands it times run
    from ..bench import bench_model

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
    typer.echo(f"  GFLOP, fast path: context shares {g['context_shares']:.2f} once, U-Net call from them "
               f"{g['unet_call_from_share']:.2f}, frame {g['frame_fast_path']:.2f}")
    typer.echo(f"  fast path's limit at the peak: fp32 {res['limit_fps']['fp32']:.0f} FPS, bf16 {res['limit_fps']['bf16']:.0f} FPS")
    for k, v in res["unet_call_ms"].items():
        typer.echo(f"  U-Net call, {k:14s} {v:6.1f} ms  ({res['vs_baseline'][k]:.2f}x eager fp32)")
    typer.echo(f"  decode, eager fp32       {res['decode_ms']:6.1f} ms")


@bench_app.command("play")
def bench_play_cmd(
    model: Path = typer.Option(BUNDLED_MODEL, help="World model folder with start contexts."),
    frames: int = typer.Option(200, help="Timed frames (after 5 warm-up frames)."),
    steps: Optional[int] = typer.Option(None, help="DDIM steps per frame (default: the model's, 4 or 1 if distilled)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """End-to-end play FPS and input-to-frame latency through the real server on loopback, for the
    fast path (ONNX Runtime) and the eager fp32 reference of the same model; start to first frame,
    cold and warm."""
    interactive_threads()  # measured as the commands it times run
    from ..bench import bench_play

    with progress_bar("frames", 2 * frames) as advance:
        res = bench_play(model, frames, steps, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    typer.echo(f"{res['model']}, {res['ddim_steps']} DDIM steps, CFG weight {res['guidance']}; {res['machine']}, "
               f"{res['threads']} threads")
    st = res["start_s"]
    typer.echo(f"  start to first frame (fast path): cold {st['cold']:.1f} s (graph {st['cold_graph']}), "
               f"warm {st['warm']:.1f} s (graph from the {st['warm_graph']})")
    for runtime, name in (("onnx", "fast path (ONNX Runtime)"), ("torch", "reference (eager PyTorch fp32)")):
        r, lat = res[runtime], res[runtime]["latency_ms"]
        typer.echo(f"  {name}: {r['fps']:.1f} FPS end to end, latency p50 {lat['p50']:.0f} ms, p95 {lat['p95']:.0f} ms; "
                   "median ms per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in r["stages_ms"].items()))
    typer.echo(f"  fast / reference: {res['onnx_vs_torch']:.2f}x; the game's own rate is {res['game_fps']:g} "
               f"frames/s (frame skip {res['frame_skip']}), so the fast path plays at "
               f"{res['onnx']['real_time']:.2f}x real time")


@bench_app.command("clip")
def bench_clip_cmd(
    model: Path = typer.Option(..., help="Clip model folder (`gamengen clip train`'s OUT/model)."),
    prompt: str = typer.Option("A 1.0-second first-person clip of Freedoom: Phase 1, map E1M1 \"Outer Prison\": "
                               "the player walks forward.", help="The text to generate from."),
    repeats: int = typer.Option(3, help="Timed clips per kind (after one warm-up)."),
    steps: Optional[int] = typer.Option(None, help="Euler steps (default: the model's)."),
    instruct: Optional[Path] = typer.Option(None, "--instruct", help="An InstructNet trained beside --model: also "
                                                                     "time a continuation it steers."),
    as_json: bool = typer.Option(False, "--json"),
):
    """Seconds per clip from text and per continuation, with time per stage (text, Euler + CFG, decode)."""
    interactive_threads()  # measured as the commands it times run
    from ..bench import bench_clip

    if repeats < 1:
        raise UserError("--repeats must be at least 1", "pass a positive number")
    with progress_bar("timed clips and stages", (5 if instruct else 4) * repeats) as advance:
        res = bench_clip(model, prompt, repeats, steps, report=advance, instruct_dir=instruct)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    st = res["stages_s"]
    typer.echo(f"{res['model']}: {res['frames']} frames of {res['resolution']} at {res['fps']:g} fps, "
               f"{res['euler_steps']} Euler steps, CFG {res['guidance']:g} ({res['msdit_calls']} MSDiT calls); "
               f"{res['machine']}, {res['threads']} threads")
    typer.echo(f"  text to clip: {res['text_to_clip_s']:.2f} s per clip (text {st['text'] * 1e3:.0f} ms, Euler "
               f"{st['euler']:.2f} s, decode {st['decode']:.2f} s); {res['real_time']:.2f}x real time")
    typer.echo(f"  continuation (5 context frames, CFG {res['continuation_guidance']:g}): {res['continuation_s']:.2f} s "
               f"per clip; model load {res['load_s']:.1f} s")
    if res["steered_continuation_s"] is not None:
        typer.echo(f"  steered by InstructNet (a key and its instruction): {res['steered_continuation_s']:.2f} s per "
                   "continuation, the least time from a key to its effect")


@bench_app.command("clip-play")
def bench_clip_play_cmd(
    model: Path = typer.Option(..., help="Clip model folder."),
    instruct: Optional[Path] = typer.Option(None, "--instruct", help="The InstructNet trained beside --model (without "
                                                                     "it keys steer nothing: the time is a lower bound)."),
    presses: int = typer.Option(6, help="Timed key changes (after two warm-up chunks)."),
    steps: Optional[int] = typer.Option(None, help="Euler steps per chunk (default: clip play's, 4)."),
    guidance: Optional[float] = typer.Option(None, help="CFG weight (default: the model's; 1: one branch)."),
    context: int = typer.Option(5, help="Context frames per chunk (1 + 4k)."),
    control_guidance: float = CONTROL_GUIDANCE,
    bf16: Optional[bool] = typer.Option(None, "--bf16/--fp32", help="As `clip play`'s (default: bf16 where the CPU "
                                                                  "has bf16 units)."),
    as_json: bool = typer.Option(False, "--json"),
):
    """Key press to visible effect in clip play, through the real server on loopback (`gamengen clip play`)."""
    interactive_threads()  # measured as the commands it times run
    from ..bench import bench_clip_play
    from .clip import EXAMPLE_PROMPT

    if presses < 1:
        raise UserError("--presses must be at least 1", "pass a positive number")
    with progress_bar("key changes", presses) as advance:
        res = bench_clip_play(model, instruct, EXAMPLE_PROMPT, presses, steps, guidance, context,
                              control_guidance=control_guidance, bf16=bf16, report=advance)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    k = res["key_to_visible_s"]
    typer.echo(f"{res['model']}" + (f" + {res['instruct']}" if res["instruct"] else " (no InstructNet)") +
               f"; {res['machine']}, {res['threads']} threads, {res['precision']}")
    typer.echo(f"  {res['euler_steps']} Euler steps, CFG weight {res['guidance']:g} (controls "
               f"{res['control_guidance']:g}), {res['context_frames']} context "
               f"frames -> {res['chunk_frames']} new frames per chunk at {res['fps']:g} fps")
    typer.echo(f"  key to visible effect: median {k['median']:.2f} s, p90 {k['p90']:.2f} s, max {k['max']:.2f} s "
               f"({res['presses']} key changes, {res['restarts']} chunks begun again)")
    typer.echo(f"  chunk: {res['chunk_generate_ms'] / 1e3:.2f} s to make; {res['shown_fps']:.1f} frames shown per second")
