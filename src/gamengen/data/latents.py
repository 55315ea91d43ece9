"""The latent cache and latent training windows (DESIGN §3): frames are encoded once per encoder.

Cache layout: ``<cache>/<encoder id>/<episode sha256>.npy``, float16 (T, C, h, w). Keys are content
digests, so a renamed or merged store still hits, and a decoder fine-tune (same encoder) keeps it.
Each file is written to a temporary name and renamed, so a kill never leaves a half file behind.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..atomic import fsync_dir
from .store import EpisodeRecord, Store


def is_heldout(rec: EpisodeRecord, fraction: float) -> bool:
    """A fixed, content-independent split by episode path: the same episodes are held out for every
    model and every run, and training never reads them (tests/test_world_model.py checks)."""
    h = int(hashlib.sha256(rec.path.encode()).hexdigest()[:8], 16)
    return h / 2**32 < fraction


def split(records: list[EpisodeRecord], fraction: float) -> tuple[list[EpisodeRecord], list[EpisodeRecord]]:
    train = [r for r in records if not is_heldout(r, fraction)]
    held = [r for r in records if is_heldout(r, fraction)]
    return train, held


class LatentCache:
    def __init__(self, codec, root: str | os.PathLike):
        self.codec = codec
        self.dir = Path(root) / codec.encoder_id()

    def path(self, rec: EpisodeRecord) -> Path:
        return self.dir / f"{rec.sha256}.npy"

    def build(self, store: Store, records: list[EpisodeRecord], report: Callable[[int], None] = lambda n: None,
              batch: int = 64) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for rec in records:
            if not self.path(rec).exists():
                frames = store.open_episode(rec)["frames"]
                parts = [self.codec.encode(frames[i : i + batch]).to(torch.float16).cpu().numpy()
                         for i in range(0, rec.length, batch)]
                tmp = self.dir / f".tmp-{rec.sha256}-{os.getpid()}.npy"
                with open(tmp, "wb") as f:
                    np.save(f, np.concatenate(parts))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path(rec))
                fsync_dir(self.dir)
            report(1)

    def load(self, rec: EpisodeRecord) -> np.ndarray:
        return np.load(self.path(rec), mmap_mode="r")  # memory-mapped: stores larger than RAM train


class LatentWindows:
    """Training windows over cached latents with DESIGN §3.1's indexing: the target is step n, the
    context is steps n-N..n-1 with their actions. Before the episode start the context repeats the
    first latent and the action is ``n_actions`` ("no action")."""

    def __init__(self, store: Store, cache: LatentCache, records: list[EpisodeRecord], context: int):
        self.context, self.records, self.cache = context, records, cache
        self.n_actions = len(store.spec.action_set)
        self.actions = [np.asarray(store.open_episode(r)["actions"][:], np.int64) for r in records]
        counts = np.array([r.length - 1 for r in records], np.int64)  # targets n in [1, T-1]
        self.starts = np.concatenate([[0], np.cumsum(counts)])
        self._latents: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.starts[-1])

    def latents(self, e: int) -> np.ndarray:
        if e not in self._latents:
            self._latents[e] = self.cache.load(self.records[e])
        return self._latents[e]

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> context (N, C, h, w) float32, actions (N,) int64, target (C, h, w) float32."""
        e = int(np.searchsorted(self.starts, i, side="right") - 1)
        n = 1 + i - int(self.starts[e])
        N, lat, act = self.context, self.latents(e), self.actions[e]
        lo = max(0, n - N)
        ctx = np.asarray(lat[lo:n], np.float32)
        acts = act[lo:n]
        pad = N - (n - lo)
        if pad:
            ctx = np.concatenate([np.repeat(np.asarray(lat[:1], np.float32), pad, 0), ctx])
            acts = np.concatenate([np.full(pad, self.n_actions, np.int64), acts])
        return ctx, acts, np.asarray(lat[n], np.float32)
