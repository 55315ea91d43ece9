"""The latent cache and latent training windows (docs/world_model.md): frames are encoded once per encoder.

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
from .windows import Windows


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


class LatentWindows(Windows):
    """Training windows over cached latents, with the one rule of ``data.windows`` (docs/dataset.md,
    "Training windows"): the target is step n, the context is steps n-N..n-1 with their actions.
    Before the episode start the context repeats the first latent and the action is ``n_actions``
    ("no action")."""

    dtype = np.float32

    def __init__(self, store: Store, cache: LatentCache, records: list[EpisodeRecord], context: int):
        self.cache = cache
        self._latents: dict[int, np.ndarray] = {}
        super().__init__(store, records, context)  # targets n in [1, T-1]

    def latents(self, e: int) -> np.ndarray:
        if e not in self._latents:
            self._latents[e] = self.cache.load(self.records[e])
        return self._latents[e]

    values = latents

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """-> context (N, C, h, w) float32, actions (N,) int64, target (C, h, w) float32."""
        w = self.window(i)
        return w.context, w.actions, w.target


class DeviceWindows:
    """The windows of a ``LatentWindows``, gathered a whole batch at a time from one tensor holding
    every latent on the training device, by the same rule (``data.windows.context_steps``: steps
    before the episode start repeat step 0 with the "no action" token). On a GPU, reading windows one
    by one in Python starves the device: issue 17's first GPU run trained at 3 steps/s that way."""

    def __init__(self, windows: LatentWindows, device):
        self.windows, self.device = windows, torch.device(device)
        lengths = [r.length for r in windows.records]
        self.offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)  # each episode's first row
        self.latents = torch.cat([torch.from_numpy(np.array(windows.latents(e))) for e in range(len(lengths))]
                                 ).to(self.device)  # (F, C, h, w) as cached (float16)
        self.actions = torch.from_numpy(np.concatenate(windows.actions)).to(self.device)  # (F,) int64

    def batch(self, idx) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Window numbers (B,) -> context (B, N, C, h, w) float32, actions (B, N) int64, target
        (B, C, h, w) float32, on the device: ``LatentWindows[i]`` for each i, stacked."""
        e, n = self.windows.locate_many(idx)
        steps = n[:, None] + np.arange(-self.windows.context, 0)  # (B, N) context steps n-N..n-1
        rows = torch.from_numpy(self.offsets[e][:, None] + np.maximum(steps, 0)).to(self.device)
        pad = torch.from_numpy(steps < 0).to(self.device)
        target = torch.from_numpy(self.offsets[e] + n).to(self.device)
        actions = torch.where(pad, self.windows.n_actions, self.actions[rows])
        return self.latents[rows].float(), actions, self.latents[target].float()
