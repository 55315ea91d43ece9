"""Training windows: the one indexing rule for frames and cached latents (docs/dataset.md, "Training windows").

``frames[t]`` is shown at step t; ``actions[t]`` is taken after seeing it and produces ``frames[t+1]``.
The window for target step n holds the context steps n-N..n-1 with their actions, and step n. Before
the episode start (n < N) the missing steps repeat step 0 and their action is ``n_actions``, the
"no action" token; ``context_mask`` marks them False. This is the rule the world model is trained
with, whatever is read: ``FrameWindows`` reads stored frames, ``data.latents.LatentWindows`` reads
cached latents, and both go through ``Windows`` and ``read_window`` below.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from .store import EpisodeRecord, Store


@dataclass
class Window:
    context: np.ndarray  # (N, ...) the context steps: frames (N, H, W, 3) uint8 or latents (N, C, h, w) float32
    actions: np.ndarray  # (N,) int64, actions[i] was taken after context[i]; n_actions ("no action") for padding
    target: np.ndarray  # the step-n frame or latent, produced by actions[-1]
    context_mask: np.ndarray  # (N,) bool, False for padding before the episode start
    episode: str  # the episode's path in the store
    n: int  # the target's step index in its episode


def context_steps(n: int, context: int) -> np.ndarray:
    """The step each of the N context slots shows for target n: n-N..n-1, with steps before the
    episode start clipped to step 0 (their actions are "no action", see ``read_window``)."""
    return np.maximum(np.arange(n - context, n), 0)


def read_window(values, actions, n: int, context: int, no_action: int, dtype=None):
    """-> (context (N, ...), actions (N,) int64, target, context_mask (N,) bool) for target step n.

    ``values`` is one episode's per-step array (frames or latents; zarr, memory-mapped or in memory),
    ``actions`` its action indices, ``no_action`` the token for padded steps (the action set's size).
    Steps lo..n are read in one slice and converted to ``dtype`` (None keeps the stored dtype)."""
    if n < 1:
        raise ValueError(f"target step {n}: the first target is step 1 (step 0 has no action before it)")
    lo = max(0, n - context)
    pad = context - (n - lo)
    block = np.array(values[lo : n + 1], dtype)  # the real context steps, then the target
    ctx, acts = block[:-1], np.array(actions[lo:n], np.int64)
    if pad:
        ctx = np.concatenate([np.repeat(block[:1], pad, 0), ctx])  # lo == 0 here: block[0] is step 0
        acts = np.concatenate([np.full(pad, no_action, np.int64), acts])
    return ctx, acts, block[-1], np.arange(context) >= pad


class Windows:
    """Every target step n in [first, T-1] of the given episodes, numbered 0..len-1 episode by episode
    (the frame produced by an episode's last action is not stored, so T-1 is the last target).

    Subclasses say what a step's value is with ``values(e)`` (and ``dtype``). ``min_context`` drops
    targets with fewer real context steps than that: the default 1 keeps every n >= 1, as training does.
    """

    dtype = None

    def __init__(self, store: Store, records: list[EpisodeRecord], context: int, min_context: int = 1):
        if context < 1:
            raise ValueError("context must be >= 1")
        self.store, self.records, self.context = store, records, context
        self.n_actions = len(store.spec.action_set)  # also the "no action" token of padded steps
        self.actions = [np.asarray(store.open_episode(r)["actions"][:], np.int64) for r in records]
        self.first = max(1, min(min_context, context))  # the first target step of each episode
        counts = np.array([max(0, r.length - self.first) for r in records], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)])  # window number of each episode's first target

    def __len__(self) -> int:
        return int(self.starts[-1])

    def values(self, e: int):
        """Episode e's per-step array, indexed by step t."""
        raise NotImplementedError

    def locate(self, i: int) -> tuple[int, int]:
        """Window number -> (episode index, target step n)."""
        i = operator.index(i)
        if not 0 <= i < len(self):
            raise IndexError(i)
        e = int(np.searchsorted(self.starts, i, side="right") - 1)
        return e, self.first + i - int(self.starts[e])

    def locate_many(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``locate`` for an array of window numbers (B,) -> episode indices (B,), target steps (B,)."""
        i = np.asarray(i, np.int64)
        if i.size and not (0 <= i.min() and i.max() < len(self)):
            raise IndexError(f"window numbers outside 0..{len(self) - 1}")
        e = np.searchsorted(self.starts, i, side="right") - 1
        return e, self.first + i - self.starts[e]

    def window(self, i: int) -> Window:
        e, n = self.locate(i)
        ctx, acts, target, mask = read_window(self.values(e), self.actions[e], n, self.context, self.n_actions,
                                              self.dtype)
        return Window(ctx, acts, target, mask, self.records[e].path, n)


class FrameWindows(Windows):
    """Windows of stored frames: ``w[i].context`` (N, H, W, 3) uint8, ``w[i].target`` (H, W, 3) uint8.

    The same windows as training's latent windows (``data.latents.LatentWindows``) over the same
    episodes, in pixels. ``records`` defaults to every episode of the store."""

    def __init__(self, store: Store, context: int, min_context: int = 1, records: list[EpisodeRecord] | None = None):
        super().__init__(store, store.episodes() if records is None else records, context, min_context)
        self._frames: dict[int, object] = {}

    def values(self, e: int):
        if e not in self._frames:
            self._frames[e] = self.store.open_episode(self.records[e])["frames"]
        return self._frames[e]

    def __getitem__(self, i: int) -> Window:
        return self.window(i)
