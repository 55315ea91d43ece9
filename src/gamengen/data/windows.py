"""Random access to training windows with the time indexing of DESIGN.md §3.1.

``frames[t]`` is shown at step t; ``actions[t]`` is taken after seeing it and produces ``frames[t+1]``.
A window for target step n holds ``frames[n-N:n]``, ``actions[n-N:n]`` and ``frames[n]``. Near an
episode's start the missing context steps repeat ``frames[0]`` with action 0, and ``context_mask``
marks them False, so the model can tell padding from play.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .store import Store


@dataclass
class Window:
    frames: np.ndarray  # (N, H, W, 3) uint8, the context
    actions: np.ndarray  # (N,) int64, actions[i] was taken after frames[i]
    target: np.ndarray  # (H, W, 3) uint8, the frame produced by actions[-1]
    context_mask: np.ndarray  # (N,) bool, False for padding before the episode start
    episode: str
    n: int  # the target's step index in its episode


class WindowSampler:
    """Index every valid target step of a store; fetch any window by number.

    ``min_context`` drops targets with fewer real context steps than that (1 = every target n >= 1).
    """

    def __init__(self, store: Store, context: int, min_context: int = 1):
        if context < 1:
            raise ValueError("context must be >= 1")
        self.store = store
        self.context = context
        self.records = store.episodes()
        lo = max(1, min(min_context, context))
        # targets n in [lo, T-1]: the last stored action's result is not in the store
        counts = np.array([max(0, r.length - lo) for r in self.records], np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self._lo = lo
        self._groups: dict[int, object] = {}

    def __len__(self) -> int:
        return int(self._starts[-1])

    def locate(self, i: int) -> tuple[int, int]:
        """Window number -> (episode index, target step n)."""
        if not 0 <= i < len(self):
            raise IndexError(i)
        e = int(np.searchsorted(self._starts, i, side="right") - 1)
        return e, self._lo + i - int(self._starts[e])

    def _group(self, e: int):
        if e not in self._groups:
            self._groups[e] = self.store.open_episode(self.records[e])
        return self._groups[e]

    def __getitem__(self, i: int) -> Window:
        e, n = self.locate(i)
        g = self._group(e)
        N = self.context
        start = max(0, n - N)
        frames = g["frames"][start : n + 1]  # (k+1, H, W, 3): real context then target
        actions = g["actions"][start:n].astype(np.int64)
        pad = N - (n - start)
        if pad:
            frames = np.concatenate([np.repeat(frames[:1], pad, 0), frames])
            actions = np.concatenate([np.zeros(pad, np.int64), actions])
        mask = np.arange(N) >= pad
        return Window(frames[:-1], actions, frames[-1], mask, self.records[e].path, n)

    def sample(self, rng: np.random.Generator) -> Window:
        return self[int(rng.integers(len(self)))]
