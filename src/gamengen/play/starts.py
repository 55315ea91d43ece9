"""Picking start contexts, the short stretches of real play the player resets to (paper §3.3).

The first start is an episode's opening; the others are later moments with a full context. They
come from held-out episodes, so the model never saw them in training. `models/world_model.Start`
says what a start holds and how the model folder keeps it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..models.world_model import Start, WorldModel


def make_starts(model_dir: str | Path, store, heldout: list, n: int = 4, seed: int = 0) -> list[Start]:
    """Pick n starts from distinct episodes of ``heldout`` (records of ``store`` with at least N + 1
    frames, eval/heldout.heldout_episodes) and write them into the model folder."""
    meta, _ = WorldModel.read_meta(model_dir)
    k = meta.context
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(heldout), size=min(n, len(heldout)), replace=False)
    starts = []
    for j, i in enumerate(sorted(picks)):
        rec = heldout[i]
        g = store.open_episode(rec)
        # The first start is an episode's opening: its first frame alone, as training windows pad
        # the context before an episode start. The others are later moments with a full context.
        t = 0 if j == 0 else int(rng.integers(k - 1, rec.length - 1))
        first = max(0, t - k + 1)
        starts.append(Start(np.asarray(g["frames"][first:t + 1]), np.asarray(g["actions"][:t], np.int64),
                            rec.path, rec.meta.get("env_seed")))
    WorldModel.save_starts(model_dir, starts)
    return starts
