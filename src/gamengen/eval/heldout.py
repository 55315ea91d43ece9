"""The held-out episodes a model is evaluated on, checked against the model's game.

The split is the one training used (``data/latents.split`` with the model's own ``heldout`` share,
kept in its folder's meta), so evaluation only ever reads episodes the model never saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UserError

if TYPE_CHECKING:
    from ..models.world_model import WorldModelMeta


def heldout_episodes(meta: WorldModelMeta, data: str | Path, min_length: int = 2):
    """(store, held-out records of at least ``min_length`` frames) for a model's meta."""
    from ..data.latents import split
    from ..data.store import Store

    store = Store.open(data)
    meta.check_store(store.spec, data)
    _, held = split(store.episodes(), meta.heldout)
    if not held:
        raise UserError(f"store {data} has no held-out episodes (the split holds out about "
                        f"{meta.heldout:.0%} of episodes)", "record more episodes into it")
    long_enough = [r for r in held if r.length >= min_length]
    if not long_enough:
        raise UserError(f"no held-out episode in {data} has {min_length} frames or more",
                        "record longer episodes, or ask for fewer steps")
    return store, long_enough


def context_at(store, rec, t: int, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Frames ``t-context..t`` (fewer at an episode's start) and the actions between them: what
    NeuralWorld.reset takes to continue from frame t."""
    g = store.open_episode(rec)
    first = max(0, t - context)
    return np.asarray(g["frames"][first:t + 1]), np.asarray(g["actions"][first:t], np.int64)
