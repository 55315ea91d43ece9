"""The held-out episodes a model is evaluated on, checked against the model's game.

The split is the one training used (``data/latents.split`` with the model's own ``heldout`` share,
stored in gamengen_wm.json), so evaluation only ever reads episodes the model never saw.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UserError


def check_store_fits(meta: dict, store, data) -> None:
    """A store of another game (resolution or action set) than the model's gets one clear line."""
    if (store.spec.height, store.spec.width) != (meta["height"], meta["width"]) or \
            list(store.spec.action_set.names) != meta["actions"]:
        raise UserError(f"store {data} ({store.spec.env_id}, {store.spec.width}x{store.spec.height}) does not hold "
                        f"this model's game", f"use a store of {meta['env_id']} at {meta['width']}x{meta['height']}")


def heldout_episodes(meta: dict, data: str | Path, min_length: int = 2):
    """(store, held-out records of at least ``min_length`` frames) for a model's meta."""
    from ..data.latents import split
    from ..data.store import Store

    store = Store.open(data)
    check_store_fits(meta, store, data)
    _, held = split(store.episodes(), float(meta.get("heldout", 0.1)))
    if not held:
        raise UserError(f"store {data} has no held-out episodes (the split holds out about "
                        f"{float(meta.get('heldout', 0.1)):.0%} of episodes)", "record more episodes into it")
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
