"""`gamengen bench`: speed figures, measured on this machine (benchmarks, never pytest assertions)."""

from __future__ import annotations

import multiprocessing as mp
import platform
import shutil
import tempfile
import time

from .record.recorder import RecordConfig, bench_env, record


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
        "machine": f"{platform.machine()}, {mp.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}",
    }

