"""Ghost strips (issue 17, target 5): the learned game beside the real one on the same held key.

From a start context the real game also stands at (ghost mode's replay, play/games.py), one key is
held for a few seconds in both; frames at whole seconds are set side by side, and two numbers say
whether the neural view moves as the real one does:

- PSNR of the neural frame against the real frame at the same moment, beside the "frozen"
  baseline (the start frame against the real frame): above frozen means it moved the right way;
- the pan: the horizontal shift of the view (status bar excluded) from each frame to the next,
  estimated by phase correlation and summed up to each second, for both. A turn pans the view
  (content moves right while turning left), so the two sums should have the same sign and a
  similar size; forward motion zooms rather than pans, and sums near 0 in both. Per step, because
  after a second of turning the view shares nothing with the start frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import psnr, view_rows

KEYS = ("TURN_LEFT", "TURN_RIGHT", "FORWARD")


@dataclass
class GhostStripConfig:
    seconds: tuple[int, ...] = (1, 2, 3)
    keys: tuple[str, ...] = KEYS
    start: int = 0  # which of the model's start contexts


VIEW_SHARE = 0.6  # of the 3D view's rows, from the top: the weapon sprite below never pans


def view(frame: np.ndarray) -> np.ndarray:
    """The part of a (H, W, 3) frame's 3D view that pans when turning, as grey floats: the status
    bar and the weapon (both fixed on screen, so they would pull the estimate to 0) cut off."""
    return frame[:round(view_rows(frame.shape[0]) * VIEW_SHARE)].astype(np.float32).mean(axis=-1)


def horizontal_shift(a: np.ndarray, b: np.ndarray) -> float:
    """Pixels the picture content moved right from frame ``a`` to frame ``b`` (phase correlation
    of their views, whole pixels, wrapping at half the width)."""
    fa, fb = (np.fft.fft2(v - v.mean()) for v in (view(a), view(b)))
    cross = fb * np.conj(fa)
    corr = np.fft.ifft2(cross / (np.abs(cross) + 1e-6)).real
    dx = int(np.unravel_index(np.argmax(corr), corr.shape)[1])
    return float(dx - corr.shape[1] if dx > corr.shape[1] // 2 else dx)


def ghost_strips(game, action_names: tuple[str, ...], fps: float, cfg: GhostStripConfig,
                 report=lambda n: None) -> dict:
    """``game``: a GhostGame (views "model" and "real"). Returns rows per key and the strip images."""
    rows, images = [], {}
    at = [max(1, round(fps * s)) for s in cfg.seconds]
    for key in cfg.keys:
        if key not in action_names:
            rows.append({"key": key, "unavailable": "not in the model's action set"})
            continue
        a = action_names.index(key)
        first = game.reset(cfg.start)
        start = first["real"]
        model_frames, real_frames, diverged = [first["model"]], [start], game.diverged
        prev, pan, pans = first, {"model": 0.0, "real": 0.0}, {"model": [], "real": []}
        for i in range(1, at[-1] + 1):
            f = game.step(a)
            for v in pan:
                pan[v] += horizontal_shift(prev[v], f[v])
            prev = f
            if i in at:
                model_frames.append(f["model"])
                real_frames.append(f["real"])
                for v in pan:
                    pans[v].append(pan[v])
            report(1)
        row = {"key": key, "diverged_start": bool(diverged), "steps": at, "seconds": list(cfg.seconds),
               "model_psnr": [psnr(m, r) for m, r in zip(model_frames[1:], real_frames[1:])],
               "frozen_psnr": [psnr(start, r) for r in real_frames[1:]],
               "real_pan": pans["real"], "model_pan": pans["model"]}
        rows.append(row)
        # two rows of the strip: the real game, then the learned one, at 0 s and each second
        images[key] = np.concatenate([np.concatenate(real_frames, axis=1), np.concatenate(model_frames, axis=1)])
    return {"start": cfg.start, "fps": fps, "rows": rows, "images": images}
