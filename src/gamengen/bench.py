"""`gamengen bench`: speed figures, measured on this machine (benchmarks, never pytest assertions)."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import platform
import shutil
import tempfile
import time
from pathlib import Path

from .record.recorder import RecordConfig, bench_env, record


def machine() -> str:
    """The CPU a figure was measured on: its kernels' instruction set and whether it has bf16 units
    decide the speed as much as its cores (docs/performance.md)."""
    import torch

    from .precision import native_bf16

    units = {True: "bf16 units", False: "no bf16 units", None: "bf16 units unknown"}[native_bf16()]
    return (f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} ({units}), {mp.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}")


def bench_record(cfg: RecordConfig, report=lambda n: None) -> dict:
    """Raw env frames/s and frames/s written to a store, in one run, with the same workers and policy.

    Each is given two ways: total frames over the wall time of the phase (process and game start-up
    included), and "steady": the sum over workers of frames / seconds once their game is running.
    """
    W = cfg.workers
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    with ctx.Pool(W) as pool:
        raw = pool.starmap(bench_env, [(cfg, w, cfg.budget(w)) for w in range(W)])
    raw_wall = time.perf_counter() - t0
    raw_frames = sum(n for n, _ in raw)
    tmp = tempfile.mkdtemp(prefix="gamengen-bench-")
    try:
        t0 = time.perf_counter()
        timings = []
        store = record(f"{tmp}/store", cfg, report, timings)
        store_wall = time.perf_counter() - t0
        stored = sum(r.length for r in store.episodes())
        disk = sum(p.stat().st_size for p in store.root.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "env_id": cfg.env_id, "resolution": f"{cfg.env.width}x{cfg.env.height}", "workers": W,
        "policy": cfg.policy, "frames": stored,
        "env_fps": raw_frames / raw_wall, "env_fps_steady": sum(n / dt for n, dt in raw),
        "store_fps": stored / store_wall, "store_fps_steady": sum(n / dt for n, dt in timings),
        "store_vs_env": sum(n / dt for n, dt in timings) / sum(n / dt for n, dt in raw),
        "bytes_per_frame": disk / max(stored, 1),
        "machine": machine(),
    }


def bench_train(preset: str = "cpu", steps: int = 10, height: int | None = None, width: int | None = None,
                n_actions: int = 12, report=lambda n: None) -> dict:
    """World-model training samples/s of a preset, fp32 and bf16 autocast in the same run, on
    synthetic batches of the real shapes (the data path is measured by the store benchmarks), plus
    the time of one frame's sampling (4 DDIM steps + CFG, batch 1, fp32) and the peak memory. On a
    GPU when there is one. Frames are 160x120, or the paper's 320x240 for the paper preset."""
    import resource

    import torch

    from .diffusion.denoiser import Denoiser, TrainingNoise
    from .models.autoencoder import AE_PRESETS, padded_size
    from .train.world_model import TrainConfig, UNET_PRESETS
    from .models.unet import ActionConditionedUNet
    from .models.world_model import SamplerConfig

    height, width = height or (240 if preset == "paper" else 120), width or (320 if preset == "paper" else 160)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = TrainConfig.from_preset(preset)
    ae = AE_PRESETS.get(preset, AE_PRESETS["cpu"])
    levels = len(UNET_PRESETS[preset]["block_out_channels"]) - 1
    ph, pw = padded_size(height, width, ae.downsample * 2**levels)
    shape = (ae.latent_channels, ph // ae.downsample, pw // ae.downsample)
    net = ActionConditionedUNet(latent_channels=shape[0], latent_height=shape[1], latent_width=shape[2],
                                context=cfg.context, n_actions=n_actions, **UNET_PRESETS[preset]).to(device)
    den = Denoiser(net, cfg.denoiser)
    opt = torch.optim.Adafactor(net.parameters(), lr=cfg.learning_rate)
    B = cfg.batch_size
    ctx, tgt = torch.randn(B, cfg.context, *shape, device=device), torch.randn(B, *shape, device=device)
    acts = torch.randint(0, n_actions, (B, cfg.context), device=device)
    draws = TrainingNoise.draw([torch.Generator().manual_seed(i) for i in range(B)], shape, cfg.context, cfg.denoiser)
    out = {"preset": preset, "batch": B, "context": cfg.context, "latent": list(shape), "frame": f"{width}x{height}",
           "params_m": sum(p.numel() for p in net.parameters()) / 1e6, "machine": machine(),
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
           "threads": torch.get_num_threads()}

    def timed(f) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def train_step(bf16: bool) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = den.loss(tgt, ctx, acts, draws)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for name, bf16 in (("fp32", False), ("bf16", True)):
        times = []
        for i in range(steps + 2):  # two warm-up steps
            times.append(timed(lambda: train_step(bf16)))
            report(1)
        out[f"{name}_samples_per_s"] = B / (sum(times[2:]) / steps)
    out["bf16_vs_fp32"] = out["bf16_samples_per_s"] / out["fp32_samples_per_s"]
    net.eval()
    noise = torch.randn(1, *shape, device=device)
    frame = lambda: den.sample(ctx[:1], acts[:1], noise, SamplerConfig())  # noqa: E731
    out["sample_ms"] = 1000 * sorted(timed(frame) for _ in range(7))[3]  # median of 7, after the first calls above
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def bench_play(model_dir, frames: int = 200, steps: int | None = None, report=lambda n: None) -> dict:
    """End-to-end play speed through the real server, for play's default fast path (ONNX Runtime)
    and, in the same run, the reference path (eager PyTorch fp32) of the same model.

    A WebSocket client on loopback asks for one frame at a time, as the page does, holding a
    changing key, with no frame pacing. Latency is the client's send-to-received time for each
    frame, so it includes the model step, JPEG encoding and the socket, everything but the
    browser's drawing. The per-stage times come from the frame headers the server sends."""
    import torch

    from .models.world_model import WorldModel

    meta, sampler = WorldModel.read_meta(model_dir)
    steps = steps or sampler.steps
    out = {"machine": machine(), "threads": torch.get_num_threads(), "model": str(model_dir), "ddim_steps": steps,
           "guidance": sampler.guidance, "frames": frames, "frame_skip": meta.frame_skip, "game_fps": meta.fps}
    out["start_s"] = start_to_first_frame(model_dir, steps)
    for runtime in ("onnx", "torch"):
        out[runtime] = _play_through_server(model_dir, frames, steps, runtime, report)
    out["onnx_vs_torch"] = out["onnx"]["fps"] / out["torch"]["fps"]
    # the game's own clock: a frame is frame_skip tics, and real time is the game's rate
    # (DOOM: 35 tics/s; issue 17's target 6)
    for runtime in ("onnx", "torch"):
        out[runtime]["real_time"] = out[runtime]["fps"] / meta.fps
    return out


def start_to_first_frame(model_dir, steps: int) -> dict:
    """Seconds from loading the model to its first frame on the fast path: "cold" with an empty
    frame-graph cache (the graph is exported), then "warm" with the graph that run cached. In this
    process, so Python's own start and imports are not counted."""
    import gc
    import os

    import numpy as np

    from .engine.world import EngineConfig, NeuralWorld

    out, before = {}, os.environ.get("GAMENGEN_CACHE")
    with tempfile.TemporaryDirectory(prefix="gamengen-bench-cache-") as cache:
        os.environ["GAMENGEN_CACHE"] = cache
        try:
            for kind in ("cold", "warm"):
                t0 = time.perf_counter()
                world = NeuralWorld(model_dir, EngineConfig(steps=steps))
                h, w = world.codec.height, world.codec.width
                start = world.starts[0] if world.starts else None
                world.reset(start.frames if start else np.zeros((1, h, w, 3), np.uint8),
                            start.actions if start else np.zeros(0, np.int64))
                world.step(0)
                out[kind] = time.perf_counter() - t0
                out[f"{kind}_graph"] = world.runtime.source
                del world  # its ONNX Runtime session and threads must not linger into the timed play
                gc.collect()
        finally:
            if before is None:
                os.environ.pop("GAMENGEN_CACHE", None)
            else:
                os.environ["GAMENGEN_CACHE"] = before
    return out


@contextlib.contextmanager
def serving(make_app, config):
    """The real server (uvicorn) on a free loopback port in a thread: yields (WebSocket URL, Origin)."""
    import threading

    import uvicorn

    from .play.server import bind

    sock = bind(config)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_app(port), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"ws://127.0.0.1:{port}/ws?token={config.token}", f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _play_through_server(model_dir, frames: int, steps: int, runtime: str, report) -> dict:
    import asyncio
    import json
    import statistics

    import numpy as np
    import websockets

    from .engine.world import EngineConfig
    from .play.compute import on_compute
    from .play.players import neural_player
    from .play.server import ServerConfig, create_app, unpack_frame

    config = ServerConfig(port=0, fps=1e6)
    player = on_compute(neural_player, model_dir, engine=EngineConfig(steps=steps, runtime=runtime))  # as `play` does
    keys = [["KeyW"], ["KeyW", "KeyA"], ["KeyD"], ["Space"], []]

    async def drive(url: str, origin: str):
        lat, stages = [], []
        async with websockets.connect(url, origin=origin) as ws:
            json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "reset", "start": 0}))
            await ws.recv()
            for i in range(frames + 5):  # the first 5 warm up
                t0 = time.perf_counter()
                await ws.send(json.dumps({"type": "step", "seq": i + 1, "keys": keys[(i // 10) % len(keys)]}))
                header, _ = unpack_frame(await ws.recv())
                if i >= 5:
                    lat.append((time.perf_counter() - t0) * 1e3)
                    stages.append(header["ms"])
                    report(1)
        return lat, stages

    with serving(lambda port: create_app(player, config, port), config) as (url, origin):
        t0 = time.perf_counter()
        lat, stages = asyncio.run(drive(url, origin))
        wall = time.perf_counter() - t0
    lat_a = np.asarray(lat)
    return {
        "fps": frames / float(lat_a.sum() / 1e3), "wall_s": wall,
        "latency_ms": {"p50": float(np.percentile(lat_a, 50)), "p95": float(np.percentile(lat_a, 95)),
                       "mean": float(lat_a.mean())},
        "stages_ms": {k: statistics.median(s[k] for s in stages) for k in stages[0]},
    }


def bench_agent(env_id: str = "vizdoom:freedoom1/E1M1", n_steps: int = 128, rollouts: int = 2,
                report=lambda n: None) -> dict:
    """PPO env steps/s, updates included, for our agent (`gamengen agent`, recording on) and for
    stock SB3 ``CnnPolicy`` on the same map, in one run, with the same 8 games, rollout length,
    epochs and minibatch. Only `learn()` is timed: process and game start-up are left out of both.

    Steps are counted both ways: game frames (our store's unit) and PPO decisions (frames / hold).
    """
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from .agent.stock import StockDoomEnv
    from .agent.train import AgentConfig, replace, train

    # Checkpoints at the frame interval of a default run (one per 512-decision rollout), so the
    # short bench rollouts do not pay for four times as many saves.
    default = AgentConfig()
    cfg = replace(default, n_steps=n_steps, eval_every=10**12,
                  checkpoint_every=max(1, default.n_steps * default.checkpoint_every // n_steps))
    hold, n_envs = cfg.env.hold, cfg.n_envs
    frames = n_envs * n_steps * hold * rollouts
    out = {"env_id": env_id, "machine": machine(), "threads": torch.get_num_threads(), "n_envs": n_envs,
           "n_steps": n_steps, "rollouts": rollouts, "n_epochs": cfg.n_epochs, "batch_size": cfg.batch_size,
           "hold": hold, "frames": frames}

    marks: list[tuple[float, int]] = []

    def tick(done: int, total: int) -> None:
        marks.append((time.perf_counter(), done))
        if len(marks) > 1:
            report(done - marks[-2][1])

    tmp = tempfile.mkdtemp(prefix="gamengen-bench-agent-")
    try:
        train(f"{tmp}/run", replace(cfg, steps=frames, **{"env.env_id": env_id}), report=tick)
        disk = sum(p.stat().st_size for p in Path(tmp, "run", "store").rglob("*") if p.is_file())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ours_s = marks[-1][0] - marks[0][0]  # first report: models and games ready; last: learn() done
    out["ours"] = {"setup": "gamengen agent: frame + automap CNNs (bf16), 32-action history, "
                            f"{cfg.vec_env} games, every frame recorded", "seconds": ours_s,
                   "stored_mb": disk / 1e6}

    venv = make_vec_env(lambda: StockDoomEnv(env_id, hold, cfg.env.max_episode_frames), n_envs=n_envs, seed=0)
    try:
        model = PPO("CnnPolicy", venv, n_steps=n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
                    learning_rate=cfg.learning_rate, gamma=cfg.gamma, ent_coef=cfg.ent_coef, seed=0, verbose=0)
        t0 = time.perf_counter()
        model.learn(frames // hold)
        stock_s = time.perf_counter() - t0
        report(frames)
    finally:
        venv.close()
    out["stock"] = {"setup": "SB3 PPO('CnnPolicy') on the screen only, make_vec_env (DummyVecEnv), fp32",
                    "seconds": stock_s}
    for k in ("ours", "stock"):
        out[k]["frames_per_s"] = frames / out[k]["seconds"]
        out[k]["decisions_per_s"] = frames / hold / out[k]["seconds"]
    out["ours_vs_stock"] = out["ours"]["frames_per_s"] / out["stock"]["frames_per_s"]
    return out


def gemm_peak(n: int = 2048, repeats: int = 10) -> dict:
    """This machine's matmul GFLOP/s in fp32 and bf16: the roof the models are measured against."""
    import torch

    out = {}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dt), torch.randn(n, n, dtype=dt)
        a @ b
        t0 = time.perf_counter()
        for _ in range(repeats):
            a @ b
        out[name] = 2 * n**3 * repeats / (time.perf_counter() - t0) / 1e9
    return out


def bench_model(model_dir, repeats: int = 20, compile: bool = True, report=lambda n: None) -> dict:
    """Per-stage FLOPs of one played frame against the GEMM peak, and measured time per U-Net call
    (both CFG branches, as played) and per decode, for each PyTorch path beside the eager fp32
    baseline. (The ONNX Runtime fast path runs whole frames; `bench play` measures it end to end.)"""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from .diffusion.denoiser import ContextShares
    from .engine.world import EngineConfig, NeuralWorld

    world = NeuralWorld(model_dir, EngineConfig(runtime="torch"))
    net, codec = world.denoiser.net, world.codec
    C, h, w = codec.latent_shape()
    N = world.context
    args = (torch.randn(2, C, h, w), torch.full((2,), 500), torch.randn(2, N, C, h, w),
            torch.randint(0, world.n_actions, (2, N)), torch.zeros(2, dtype=torch.long))
    z = torch.randn(1, C, h, w)

    def flops(f) -> float:
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            f()
        return fc.get_total_flops() / 1e9

    def ms(f) -> float:
        with torch.no_grad():
            for _ in range(3):
                f()
            t0 = time.perf_counter()
            for _ in range(repeats):
                f()
        report(1)
        return (time.perf_counter() - t0) / repeats * 1e3

    unet_gf, dec_gf = flops(lambda: net(*args)), flops(lambda: codec.ae.decode(z))
    # the fast path: the context's conv_in share once per frame, then each step from the share
    shares = ContextShares(net)(args[2][:1]).detach()
    share_gf = flops(lambda: ContextShares(net)(args[2][:1]))
    step_gf = flops(lambda: net.forward_from_share(args[0], args[1], shares, args[3], args[4]))
    steps = world.steps
    peak = gemm_peak()
    out = {"model": str(model_dir), "machine": machine(), "threads": torch.get_num_threads(), "ddim_steps": steps,
           "gemm_gflops": peak,
           "gflop": {"unet_call": unet_gf, "decode": dec_gf, "frame": steps * unet_gf + dec_gf,
                     "context_shares": share_gf, "unet_call_from_share": step_gf,
                     "frame_fast_path": share_gf + steps * step_gf + dec_gf}}
    out["limit_fps"] = {k: peak[k] / out["gflop"]["frame_fast_path"] for k in peak}
    paths = {"eager fp32": lambda: net(*args)}

    def bf16():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return net(*args)

    paths["eager bf16"] = bf16
    if compile:
        compiled = torch.compile(net)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(*args)
        out["compile_s"] = time.perf_counter() - t0
        paths["compiled fp32"] = lambda: compiled(*args)
    out["unet_call_ms"] = {k: ms(f) for k, f in paths.items()}
    out["decode_ms"] = ms(lambda: codec.ae.decode(z))
    base = out["unet_call_ms"]["eager fp32"]
    out["vs_baseline"] = {k: base / v for k, v in out["unet_call_ms"].items()}
    return out


def bench_clip(model_dir, prompt: str, repeats: int = 3, steps: int | None = None, report=lambda n: None,
               instruct_dir=None) -> dict:
    """Seconds per clip from text (the whole of `clip generate` after loading: text encoding, the
    Euler steps with CFG, decoding) and per continuation, median of ``repeats`` after one warm-up,
    with the time per stage of one generation. With ``instruct_dir``, also per continuation steered by
    InstructNet (a key held and its instruction): the least time from a key to its effect on screen."""
    import numpy as np
    import torch

    from .engine.clip import continue_clip, generate
    from .models.clip_model import ClipModel

    t0 = time.perf_counter()
    model = ClipModel.from_pretrained(model_dir)
    load_s = time.perf_counter() - t0
    s, m = model.sampler, model.meta
    steps = s.steps if steps is None else steps

    def median_s(f) -> float:
        f(-1)  # warm-up: first-call allocations and thread start-up are not the steady cost
        times = []
        for i in range(repeats):
            t = time.perf_counter()
            f(i)
            times.append(time.perf_counter() - t)
            report(1)
        return float(np.median(times))

    clip = generate(model, prompt, 0, steps)
    text_s = median_s(lambda i: model.text.encode([prompt]))
    gen_s = median_s(lambda i: generate(model, prompt, i + 1, steps))
    with torch.inference_mode():
        latents = model.codec.encode_clip(clip)  # (L, C, h, w)
    decode_s = median_s(lambda i: model.codec.decode_clip(latents))
    cont_s = median_s(lambda i: continue_clip(model, clip[:5], prompt, i + 1, steps))
    steered_s = None
    if instruct_dir is not None:
        from .engine.clip import Steering
        from .data.captions import key_request
        from .models.instruct_model import InstructModel

        instruct = InstructModel.from_pretrained(instruct_dir, model)
        key = instruct.meta.key_names[0]
        steer = Steering(instruct, (key,), key_request(key))
        steered_s = median_s(lambda i: continue_clip(model, clip[:5], prompt, i + 1, steps, steer=steer))
    calls = steps * (2 if s.guidance != 1 else 1)  # text-to-clip's; a continuation's CFG weight may differ
    return {"model": str(model_dir), "machine": machine(), "threads": torch.get_num_threads(),
            "frames": m.frames, "resolution": f"{m.width}x{m.height}", "fps": m.fps, "euler_steps": steps,
            "guidance": s.guidance, "continuation_guidance": s.for_task(True)[0], "msdit_calls": calls,
            "load_s": load_s, "text_to_clip_s": gen_s, "continuation_s": cont_s, "steered_continuation_s": steered_s,
            "stages_s": {"text": text_s, "decode": decode_s, "euler": max(0.0, gen_s - text_s - decode_s)},
            "clip_seconds": m.frames / m.fps, "real_time": (m.frames / m.fps) / gen_s}


CLIP_PLAY_KEYS = (["ArrowLeft"], ["ArrowRight"], ["ArrowUp"], [], ["ArrowDown"], ["ArrowLeft", "KeyW"])


def bench_clip_play(model_dir, instruct_dir=None, prompt: str = "", presses: int = 6, steps: int | None = None,
                    guidance: float | None = None, context: int = 5, seed: int = 0,
                    control_guidance: float | None = None, bf16: bool | None = None,
                    report=lambda n: None) -> dict:
    """Key-to-visible time through the real clip-play server on loopback, with a client that plays
    like the page: chunks are shown at the model's fps, each as soon as it has arrived and the one
    before it has played out, and "played" is sent when one starts. The keys change at a random
    moment while a chunk is shown; the time to the first frame of the first chunk made under them is
    one key-to-visible sample. The first two chunks (the text-to-clip and the first continuation)
    warm up and are not counted."""
    import asyncio
    import json

    import numpy as np
    import torch
    import websockets

    from .engine.clip_play import ClipPlayConfig, ClipWorld, load_clip_play_models
    from .play.clip_server import ClipPlayer, create_clip_app
    from .play.compute import on_compute
    from .play.keymap import Keymap
    from .play.server import ServerConfig, unpack_frame

    model, instruct = on_compute(load_clip_play_models, model_dir, instruct_dir)  # as `clip play` does
    cfg = ClipPlayConfig(guidance=guidance, context=context, seed=seed, bf16=bf16,  # None: clip play's defaults
                         **({} if steps is None else {"steps": steps}),
                         **({} if control_guidance is None else {"control_guidance": control_guidance}))
    world = ClipWorld(model, instruct, cfg)  # a bad context or control guidance fails before the server starts
    keymap = Keymap.for_clips(model.meta.env_ids)
    player = ClipPlayer(lambda: ClipWorld(model, instruct, cfg), keymap, "bench", prompt, fps=model.meta.fps)
    config = ServerConfig(port=0)
    rng = np.random.default_rng(seed)
    fps = model.meta.fps

    async def drive(url: str, origin: str) -> dict:
        arrivals: asyncio.Queue = asyncio.Queue()
        samples, generate_ms, shows, frames_shown, restarts, last = [], [], [], 0, 0, 0
        async with websockets.connect(url, origin=origin, max_size=2**26) as ws:
            hello = json.loads(await ws.recv())

            async def receive():
                while True:
                    data = await ws.recv()
                    if isinstance(data, str):
                        raise RuntimeError(f"the server answered {data}")
                    header, images = unpack_frame(data)
                    await arrivals.put((time.perf_counter(), header, len(images)))

            receiver = asyncio.ensure_future(receive())
            await ws.send(json.dumps({"type": "start", "prompt": prompt, "seed": seed}))
            seq, pending, end = 0, None, 0.0
            try:
                while len(samples) < presses:
                    arrived, header, n = await arrivals.get()
                    show = max(arrived, end)
                    await asyncio.sleep(max(0.0, show - time.perf_counter()))
                    await ws.send(json.dumps({"type": "played", "chunk": header["chunk"]}))
                    end = show + n / fps
                    if header["chunk"] >= 2:
                        generate_ms.append(header["ms"]["generate"])
                        shows.append(show)
                        frames_shown, last = frames_shown + n, n
                        restarts = header["restarts"]
                        if pending is not None and header["keys_seq"] >= pending[0]:
                            samples.append(show - pending[1])
                            pending = None
                            report(1)
                    if header["chunk"] >= 1 and pending is None:  # a new press while this chunk plays
                        await asyncio.sleep(rng.uniform(0, n / fps))
                        seq += 1
                        await ws.send(json.dumps({"type": "keys", "seq": seq,
                                                  "keys": CLIP_PLAY_KEYS[seq % len(CLIP_PLAY_KEYS)]}))
                        pending = (seq, time.perf_counter())
            finally:
                receiver.cancel()
        span = shows[-1] - shows[0] if len(shows) > 1 else float("nan")
        return {"hello": hello, "key_to_visible_s": samples, "generate_ms": generate_ms,
                "shown_fps": (frames_shown - last) / span if span > 0 else float("nan"), "restarts": restarts}

    with serving(lambda port: create_clip_app(player, config, port), config) as (url, origin):
        res = asyncio.run(drive(url, origin))
    k = np.asarray(res["key_to_visible_s"])
    s = model.sampler
    return {"model": str(model_dir), "instruct": None if instruct_dir is None else str(instruct_dir),
            "machine": machine(), "threads": torch.get_num_threads(), "precision": "bf16" if world.bf16 else "fp32",
            "fps": fps,
            "euler_steps": cfg.steps, "guidance": s.for_task(True)[0] if guidance is None else guidance,
            "control_guidance": cfg.control_guidance, "context_frames": context,
            "chunk_frames": res["hello"]["chunk_frames"], "presses": presses,
            "key_to_visible_s": {"median": float(np.median(k)), "p90": float(np.percentile(k, 90)), "max": float(k.max())},
            "chunk_generate_ms": float(np.median(res["generate_ms"])), "shown_fps": res["shown_fps"],
            "restarts": res["restarts"], "samples_s": [round(float(x), 3) for x in k]}
