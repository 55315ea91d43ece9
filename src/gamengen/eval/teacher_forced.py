"""Teacher-forced quality (paper §5.1, docs/evaluation.md): predict one frame from the true history of a
held-out episode and compare it with the real next frame.

Each sample goes through the same NeuralWorld the player uses (reset on the real context, one
step with the real action), so what is measured is what is played. Beside the model, on the same
frames: copy-last-frame, and the autoencoder's reconstruction of the truth (the ceiling for any
latent model). PSNR is quoted over all frames and over *moving* frames (copy-last below 30 dB),
because static frames make copy-last look strong (docs/evaluation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .heldout import context_at
from .metrics import psnr, ssim, summary

MOVING_DB = 30.0  # copy-last PSNR below this: the frame changed
KEYS = ("model", "copy_last", "ae", "model_ssim", "copy_last_ssim", "model_lpips", "copy_last_lpips")


@dataclass
class TeacherForcedConfig:
    samples: int = 64
    seed: int = 0


def teacher_forced(world, store, heldout, cfg: TeacherForcedConfig, lpips=None, report=lambda n: None) -> dict:
    """``world``: a NeuralWorld; ``heldout``: records of at least 2 frames; ``lpips``: a metric or None."""
    rng = np.random.default_rng(cfg.seed)
    rows, strips = [], []
    for i in range(cfg.samples):
        rec = heldout[int(rng.integers(len(heldout)))]
        t = int(rng.integers(1, rec.length))  # predict frame t from frames < t
        frames, actions = context_at(store, rec, t, world.context + 1)
        world.reset(frames[:-1], actions[:-1], seed=cfg.seed * 100_003 + i)
        pred = world.step(int(actions[-1]))
        truth, last = frames[-1], frames[-2]
        recon = world.codec.decode(world.codec.encode(truth[None]))[0]
        row = {"episode": rec.path, "t": t, "action": world.actions[int(actions[-1])],
               "model": psnr(pred, truth), "copy_last": psnr(last, truth),
               "ae": psnr(recon, truth), "model_ssim": ssim(pred, truth), "copy_last_ssim": ssim(last, truth)}
        if lpips is not None:
            row.update(model_lpips=lpips(pred, truth), copy_last_lpips=lpips(last, truth))
        rows.append(row)
        if i < 4:  # a strip for the report: last context frame | truth | prediction
            strips.append(np.concatenate([last, truth, pred], axis=1))
        report(1)
    moving = [r for r in rows if r["copy_last"] < MOVING_DB]
    out = {"samples": len(rows), "heldout_episodes": len(heldout), "moving_db": MOVING_DB}
    for name, subset in (("all", rows), ("moving", moving)):
        out[name] = {k: summary(r[k] for r in subset if k in r) for k in KEYS}
    # Moving frames by the action taken into them: which actions the gap to the AE ceiling comes from.
    out["moving_by_action"] = {a: {k: summary(r[k] for r in moving if r["action"] == a) for k in KEYS[:3]}
                               for a in dict.fromkeys(r["action"] for r in moving)}
    out["rows"] = rows
    out["strips"] = strips  # images, not JSON: the report draws them
    return out
