"""`gamengen bench`: speed figures, measured on this machine (benchmarks, never pytest assertions)."""

from __future__ import annotations

import multiprocessing as mp
import platform
import shutil
import tempfile
import time

from .record.recorder import RecordConfig, bench_env, record


def machine() -> str:
    return f"{platform.machine()}, {mp.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"


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


def bench_train(preset: str = "cpu", steps: int = 10, height: int = 120, width: int = 160, n_actions: int = 12,
                report=lambda n: None) -> dict:
    """World-model training samples/s of a preset, fp32 and bf16 autocast in the same run, on
    synthetic batches of the real shapes (the data path is measured by the store benchmarks), plus
    the process's peak resident memory."""
    import resource

    import torch

    from .diffusion.denoiser import Denoiser, TrainingNoise
    from .models.autoencoder import AE_PRESETS, padded_size
    from .train.world_model import TrainConfig, UNET_PRESETS
    from .models.unet import ActionConditionedUNet

    cfg = TrainConfig.from_preset(preset)
    ae = AE_PRESETS[preset]
    levels = len(UNET_PRESETS[preset]["block_out_channels"]) - 1
    ph, pw = padded_size(height, width, ae.downsample * 2**levels)
    shape = (ae.latent_channels, ph // ae.downsample, pw // ae.downsample)
    net = ActionConditionedUNet(latent_channels=shape[0], latent_height=shape[1], latent_width=shape[2],
                                context=cfg.context, n_actions=n_actions, **UNET_PRESETS[preset])
    den = Denoiser(net, cfg.denoiser)
    opt = torch.optim.Adafactor(net.parameters(), lr=cfg.learning_rate)
    B = cfg.batch_size
    ctx, tgt = torch.randn(B, cfg.context, *shape), torch.randn(B, *shape)
    acts = torch.randint(0, n_actions, (B, cfg.context))
    draws = TrainingNoise.draw([torch.Generator().manual_seed(i) for i in range(B)], shape, cfg.context, cfg.denoiser)
    out = {"preset": preset, "batch": B, "context": cfg.context, "latent": list(shape),
           "params_m": sum(p.numel() for p in net.parameters()) / 1e6, "machine": machine(),
           "threads": torch.get_num_threads()}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        times = []
        for i in range(steps + 2):  # two warm-up steps
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = den.loss(tgt, ctx, acts, draws)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            report(1)
        out[f"{name}_samples_per_s"] = B / (sum(times[2:]) / steps)
    out["bf16_vs_fp32"] = out["bf16_samples_per_s"] / out["fp32_samples_per_s"]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out



def bench_play(model_dir, frames: int = 200, steps: int = 4, report=lambda n: None) -> dict:
    """End-to-end play speed through the real server: a WebSocket client on loopback asks for one
    frame at a time, as the page does, holding a changing key, with no frame pacing.

    Latency is the client's send-to-received time for each frame, so it includes the model step,
    JPEG encoding and the socket, everything but the browser's drawing. The per-stage times come
    from the frame headers the server sends."""
    import asyncio
    import json
    import statistics
    import threading

    import numpy as np
    import torch
    import uvicorn
    import websockets

    from .engine.world import EngineConfig
    from .play.players import neural_player
    from .play.server import ServerConfig, bind, create_app, unpack_frame

    config = ServerConfig(port=0, fps=1e6)
    player = neural_player(model_dir, engine=EngineConfig(steps=steps))
    sock = bind(config)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(player, config, port), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    keys = [["KeyW"], ["KeyW", "KeyA"], ["KeyD"], ["Space"], []]

    async def drive():
        url, origin = f"ws://127.0.0.1:{port}/ws?token={config.token}", f"http://127.0.0.1:{port}"
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

    try:
        t0 = time.perf_counter()
        lat, stages = asyncio.run(drive())
        wall = time.perf_counter() - t0
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    lat_a = np.asarray(lat)
    return {
        "machine": machine(), "threads": torch.get_num_threads(), "model": str(model_dir), "ddim_steps": steps,
        "frames": frames, "fps": frames / float(lat_a.sum() / 1e3), "wall_s": wall,
        "latency_ms": {"p50": float(np.percentile(lat_a, 50)), "p95": float(np.percentile(lat_a, 95)),
                       "mean": float(lat_a.mean())},
        "stages_ms": {k: statistics.median(s[k] for s in stages) for k in stages[0]},
    }
