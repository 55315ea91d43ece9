"""The autoencoder's ceiling (paper §3.2.2, docs/evaluation.md): how well any latent world model
could do, measured before a world model exists.

A latent model can at best output the decoder's reconstruction of the truth, so the AE's PSNR on
held-out frames bounds every teacher-forced figure. It is quoted, as the world-model eval quotes
it, over all frames and over *moving* frames (copy-last below 30 dB), beside copy-last on those
same frames: an AE below copy-last there cannot give a model that beats copy-last (issue 17).
The status bar is scored on its own, because its digits are what a player reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .heldout import context_at
from .metrics import psnr, status_bar, summary
from .teacher_forced import MOVING_DB


@dataclass
class AECeilingConfig:
    samples: int = 256
    seed: int = 0
    batch: int = 32


def ae_ceiling(codec, store, heldout, cfg: AECeilingConfig, report=lambda n: None) -> dict:
    """``heldout``: store records of at least 2 frames. Same frame draw as ``teacher_forced`` for
    the same seed, so the two tables can be read side by side."""
    rng = np.random.default_rng(cfg.seed)
    picks = []
    for _ in range(cfg.samples):
        rec = heldout[int(rng.integers(len(heldout)))]
        picks.append((rec, int(rng.integers(1, rec.length))))
    rows, strips = [], []
    for a in range(0, len(picks), cfg.batch):
        pairs = [context_at(store, rec, t, 1)[0] for rec, t in picks[a:a + cfg.batch]]  # (2, H, W, 3) each
        truth = np.stack([p[-1] for p in pairs])
        recon = codec.decode(codec.encode(truth))
        for (rec, t), p, r, x in zip(picks[a:a + cfg.batch], pairs, recon, truth):
            rows.append({"episode": rec.path, "t": t, "ae": psnr(r, x), "copy_last": psnr(p[0], x),
                         "ae_status_bar": psnr(status_bar(r), status_bar(x))})
            if len(strips) < 4:
                strips.append(np.concatenate([x, r], axis=1))
        report(len(pairs))
    moving = [r for r in rows if r["copy_last"] < MOVING_DB]
    out = {"samples": len(rows), "heldout_episodes": len(heldout), "moving_db": MOVING_DB,
           "latent_shape": list(codec.latent_shape()), "padded": list(codec.padded)}
    for name, subset in (("all", rows), ("moving", moving)):
        out[name] = {k: summary(r[k] for r in subset) for k in ("ae", "copy_last", "ae_status_bar")}
    out["rows"], out["strips"] = rows, strips  # strips are images: truth | reconstruction
    return out
