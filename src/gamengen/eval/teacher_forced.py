"""Teacher-forced quality (paper §5.1, DESIGN §7): predict one frame from the true history of a
held-out episode and compare it with the real next frame.

Each sample goes through the same NeuralWorld the player uses (reset on the real context, one
step with the real action), so what is measured is what is played. Beside the model, on the same
frames: copy-last-frame, and the autoencoder's reconstruction of the truth (the ceiling for any
latent model). PSNR is quoted over all frames and over *moving* frames (copy-last below 30 dB),
because static frames make copy-last look strong (DESIGN §7).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError

MOVING_DB = 30.0  # copy-last PSNR below this: the frame changed
MAX_DB = 100.0  # identical frames are capped, not infinite


@dataclass
class TeacherForcedConfig:
    samples: int = 64
    steps: int = 4  # DDIM steps (paper: 4)
    seed: int = 0


def psnr(pred: np.ndarray, truth: np.ndarray) -> float:
    from torchmetrics.functional.image import peak_signal_noise_ratio

    if np.array_equal(pred, truth):
        return MAX_DB
    p, t = (torch.from_numpy(np.asarray(x, np.float32)) for x in (pred, truth))
    return min(MAX_DB, float(peak_signal_noise_ratio(p, t, data_range=255.0)))


def ssim(pred: np.ndarray, truth: np.ndarray) -> float:
    from torchmetrics.functional.image import structural_similarity_index_measure

    p, t = (torch.from_numpy(np.asarray(x, np.float32)).permute(2, 0, 1)[None] / 255.0 for x in (pred, truth))
    return float(structural_similarity_index_measure(p, t, data_range=1.0))


def summary(values: list[float]) -> dict:
    a = np.asarray(values, np.float64)
    if not len(a):
        return {"n": 0}
    return {"n": int(len(a)), "mean": float(a.mean()), "std": float(a.std()), "median": float(np.median(a))}


def teacher_forced(model_dir: str | Path, data: str | Path, cfg: TeacherForcedConfig,
                   report=lambda n: None) -> dict:
    from ..data.latents import split
    from ..data.store import Store
    from ..engine.world import EngineConfig, NeuralWorld

    world = NeuralWorld(model_dir, EngineConfig(steps=cfg.steps))
    store = Store.open(data)
    meta = world.meta
    if (store.spec.height, store.spec.width) != (meta["height"], meta["width"]) or \
            list(store.spec.action_set.names) != meta["actions"]:
        raise UserError(f"store {data} does not hold this model's game",
                        f"use a store of {meta['env_id']} at {meta['width']}x{meta['height']}")
    _, heldout = split(store.episodes(), 0.1)
    heldout = [r for r in heldout if r.length > 1]
    if not heldout:
        raise UserError(f"store {data} has no held-out episodes to evaluate on", "record more episodes")
    rng = np.random.default_rng(cfg.seed)
    N = world.context
    rows = []
    for i in range(cfg.samples):
        rec = heldout[int(rng.integers(len(heldout)))]
        t = int(rng.integers(1, rec.length))  # predict frame t from frames < t
        g = store.open_episode(rec)
        first = max(0, t - N)
        frames = np.asarray(g["frames"][first:t + 1])
        actions = np.asarray(g["actions"][first:t], np.int64)
        world.reset(frames[:-1], actions[:-1], seed=cfg.seed * 100_003 + i)
        pred = world.step(int(actions[-1]))
        truth, last = frames[-1], frames[-2]
        recon = world.codec.decode(world.codec.encode(truth[None]))[0]
        rows.append({"episode": rec.path, "t": t, "model": psnr(pred, truth), "copy_last": psnr(last, truth),
                     "ae": psnr(recon, truth), "model_ssim": ssim(pred, truth), "copy_last_ssim": ssim(last, truth)})
        report(1)
    moving = [r for r in rows if r["copy_last"] < MOVING_DB]
    out = {"model": str(model_dir), "data": str(data), "samples": len(rows), "ddim_steps": cfg.steps,
           "heldout_episodes": len(heldout), "moving_db": MOVING_DB}
    for name, subset in (("all", rows), ("moving", moving)):
        out[name] = {k: summary([r[k] for r in subset])
                     for k in ("model", "copy_last", "ae", "model_ssim", "copy_last_ssim")}
    out["rows"] = rows
    return out
