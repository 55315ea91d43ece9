"""Chained continuation, `gamengen clip eval --chain K`: what a player of `clip play` sees after the
first chunk. Each evaluated continuation is continued K more times, every time from the last frames
it made itself (as engine/clip_play.py does), and every chunk's new frames are judged:

- consistency and true game: the classifier's game on the chunk against its game on the real context,
  and against the clip's own game (as for the first continuation);
- detail: the mean absolute difference of neighbouring grey pixels (0-255), a picture that dissolves
  into blobs loses it; smeared streaks keep some, so it is read beside the pictures (strips/chain.png).

Beside them on the same clips: the real clip's frames after its context (what the game showed next,
one chunk), a frozen start (the last context frame held: a player who sees nothing move) and the
codec's reconstruction of the real frames. GameNGen §3.2.1 names this drift, errors a model feeds
back to itself, and its noise augmentation is the cure train/clip.py's ``context_noise`` tries.
"""

from __future__ import annotations

import numpy as np

from .clip_motion import share


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
    return {"chunks": chunks, "real_next": judged([c.real[c.used:] for c in clips]),
            "frozen_start": judged(frozen), "codec": judged([c.codec[c.used:] for c in clips]),
            "new_frames_per_chunk": len(clips[0].real) - clips[0].used}
