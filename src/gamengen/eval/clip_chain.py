"""Chained continuation, `gamengen clip eval --chain K`: what a player of `clip play` sees after the
first chunk. Each evaluated continuation is continued K more times, every time from the last frames
it made itself (as engine/clip_play.py does), and every chunk's new frames are judged:

- consistency and true game: the classifier's game on the chunk against its game on the real context,
  and against the clip's own game (as for the first continuation);
- detail: the mean absolute difference of neighbouring grey pixels (0-255); a picture that dissolves
  into flat blobs loses it, but streaks keep some and the codec's own smoothing takes half of it
  (docs/gamegen_x.md, fifteenth round), so it is read beside the pictures (strips/chain.png);
- for the first chunk, where the game's own next frames exist: PSNR and SSIM of the view (above the
  status bar) against them, per new frame, beside the frozen start (GameNGen's copy-last baseline)
  and the codec's reconstruction (the most the model could reach through its codec).

Beside them on the same clips: the real clip's frames after its context (what the game showed next,
one chunk), a frozen start (the last context frame held: a player who sees nothing move) and the
codec's reconstruction of the real frames. Chunks after the first show drift, errors a model feeds
back to itself (GameNGen §3.2.1; its noise augmentation is train/clip.py's ``context_noise``); the
first chunk against the game shows what the continuation makes of a true context.
"""

from __future__ import annotations

import numpy as np

from .clip_motion import share
from .metrics import psnr, ssim, view_rows


def detail(frames: np.ndarray) -> float:
    """uint8 (T, H, W, 3) -> mean |neighbour difference| of the grey frames, across and down (0-255)."""
    grey = frames.astype(np.float32).mean(axis=-1)  # (T, H, W)
    return float((np.abs(np.diff(grey, axis=2)).mean() + np.abs(np.diff(grey, axis=1)).mean()) / 2)


def chain(model, clip, cfg) -> list[np.ndarray]:
    """cfg.chain further continuations of ``clip.continued``, each (F, H, W, 3) from the last ``clip.used``
    frames of the one before, with the clip's caption and a seed of its own."""
    from ..engine.clip import continue_clip
    from ..train.world_model import seed_of

    out, last = [], clip.continued
    for k in range(1, cfg.chain + 1):
        last = continue_clip(model, last[-clip.used:], clip.prompt, seed_of(clip.seed, k), cfg.steps, cfg.guidance,
                             context_noise=cfg.context_noise)
        out.append(last)
    return out


def measure_chain(clf, clips) -> dict:
    """Per chunk (1 = the first continuation) and for the baselines: consistency, true game, detail."""
    context = [clf.predict(c.real[:c.used]).game for c in clips]

    def judged(parts: list[np.ndarray]) -> dict:
        games = [clf.predict(p).game for p in parts]
        return {"consistency": share([a == b for a, b in zip(games, context)]),
                "true_game": share([a == c.game for a, c in zip(games, clips)]),
                "detail": {"value": float(np.mean([detail(p) for p in parts])), "n": len(parts)}}

    chunks = [judged([c.continued[c.used:] for c in clips])]
    chunks += [judged([c.chain[k][c.used:] for c in clips]) for k in range(len(clips[0].chain))]
    frozen = [np.repeat(c.real[c.used - 1:c.used], len(c.real) - c.used, 0) for c in clips]
    return {"chunks": chunks, "against_real": against_real(clips),
            "real_next": judged([c.real[c.used:] for c in clips]),
            "frozen_start": judged(frozen), "codec": judged([c.codec[c.used:] for c in clips]),
            "new_frames_per_chunk": len(clips[0].real) - clips[0].used}


def against_real(clips) -> dict:
    """Per new frame k of the first chunk: mean PSNR and SSIM of the view against the game's frame k, for
    the continuation, the frozen start and the codec's reconstruction."""
    n = len(clips[0].real) - clips[0].used
    rows = view_rows(clips[0].real.shape[1])
    out = {}
    for name, pick in (("continuation", lambda c, k: c.continued[c.used + k]),
                       ("frozen_start", lambda c, k: c.real[c.used - 1]),
                       ("codec", lambda c, k: c.codec[c.used + k])):
        pairs = [[(pick(c, k)[:rows], c.real[c.used + k][:rows]) for c in clips] for k in range(n)]
        out[name] = {"psnr": [float(np.mean([psnr(a, b) for a, b in ps])) for ps in pairs],
                     "ssim": [float(np.mean([ssim(a, b) for a, b in ps])) for ps in pairs]}
    return out
