"""The clip dataset `gamengen curate` writes: its one owner (docs/curation.md, "The clip dataset").

Layout::

    <dir>/dataset.json    format, version, clip count, frames per clip, height, width, fps, source
    <dir>/frames/         zarr v3 array (N, F, H, W, 3) uint8, one chunk per clip (zstd + crc32c)
    <dir>/clips.jsonl     line i: clip i's metadata (source, times, scores, camera labels, captions, and
                          for store clips the keys held at each frame)
    <dir>/dropped.jsonl   one line per dropped source, scene or clip: stage, reason, scores
    <dir>/report.json, report.md, figures/   the curation report (curate/report.py)

Every clip's frames are copied, store clips too, so the dataset does not depend on its source
staying where it was; clips.jsonl still names the source (a store's episode with its sha256).
No pickles: JSON and zarr only.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from ..errors import UserError

FORMAT = "gamengen-clip-dataset"
VERSION = 1


class ClipWriter:
    """Writes a clip dataset into an empty folder (``curate`` runs it inside write_folder_atomic)."""

    def __init__(self, folder: Path, clip_frames: int, height: int, width: int, fps: float, source: dict):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.shape = (clip_frames, height, width, 3)
        self.fps, self.source = fps, source
        self._n, self._capacity = 0, 64
        self._frames = zarr.create_array(
            self.folder / "frames", shape=(self._capacity, *self.shape), chunks=(1, *self.shape), dtype="uint8",
            compressors=[ZstdCodec(level=3), Crc32cCodec()], chunk_key_encoding={"name": "default", "separator": "."})
        self._clips = open(self.folder / "clips.jsonl", "w")
        self._dropped = open(self.folder / "dropped.jsonl", "w")

    def __len__(self) -> int:
        return self._n

    def add(self, frames: np.ndarray, meta: dict) -> int:
        """Append one clip, frames (F, H, W, 3) uint8; returns its index."""
        if frames.shape != self.shape or frames.dtype != np.uint8:
            raise ValueError(f"clip frames {frames.shape} {frames.dtype}, expected {self.shape} uint8")
        if self._n == self._capacity:
            self._capacity *= 2
            self._frames.resize((self._capacity, *self.shape))
        self._frames[self._n] = frames
        self._clips.write(json.dumps({"index": self._n, **meta}) + "\n")  # field order kept: GEN then INS
        self._n += 1
        return self._n - 1

    def frames(self, i: int) -> np.ndarray:
        return np.asarray(self._frames[i])

    def drop(self, record: dict) -> None:
        """One line of dropped.jsonl: at least ``stage`` and ``reason``."""
        self._dropped.write(json.dumps(record) + "\n")

    def finish(self) -> None:
        self._frames.resize((self._n, *self.shape))
        self._clips.close()
        self._dropped.close()
        f, h, w, _ = self.shape
        meta = {"format": FORMAT, "version": VERSION, "clips": self._n, "clip_frames": f, "height": h, "width": w,
                "fps": self.fps, "source": self.source}
        (self.folder / "dataset.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


class ClipDataset:
    """A clip dataset on disk: ``len``, ``meta(i)`` (clip i's line of clips.jsonl) and
    ``frames(i)`` -> (clip_frames, height, width, 3) uint8 at ``fps``."""

    def __init__(self, folder: Path, info: dict, clips: list[dict], frames: zarr.Array):
        self.folder, self.info, self._clips, self._frames = folder, info, clips, frames
        self.clip_frames, self.height, self.width = info["clip_frames"], info["height"], info["width"]
        self.fps = float(info["fps"])

    @classmethod
    def open(cls, folder: str | Path) -> "ClipDataset":
        folder = Path(folder)
        path = folder / "dataset.json"
        if not path.is_file():
            raise UserError(f"{folder} is not a clip dataset (no dataset.json)", "make one with `gamengen curate`")
        try:
            info = json.loads(path.read_text())
        except ValueError:
            raise UserError(f"{path} is not valid JSON", "re-run `gamengen curate`") from None
        if info.get("format") != FORMAT:
            raise UserError(f"{path} is not a clip dataset description", "point at a folder made by `gamengen curate`")
        if info.get("version") != VERSION:
            raise UserError(f"{path} has clip dataset version {info.get('version')}, this gamengen reads {VERSION}",
                            "upgrade gamengen or re-run `gamengen curate`")
        try:
            clips = [json.loads(line) for line in (folder / "clips.jsonl").read_text().splitlines() if line.strip()]
            frames = zarr.open_array(folder / "frames", mode="r", zarr_format=3)
        except (OSError, ValueError) as e:
            raise UserError(f"{folder} is damaged ({e})", "re-run `gamengen curate`") from None
        expect = (info["clips"], info["clip_frames"], info["height"], info["width"], 3)
        if len(clips) != info["clips"] or tuple(frames.shape) != expect or frames.dtype != np.uint8:
            raise UserError(f"{folder} is damaged: dataset.json says {info['clips']} clips of {expect[1:]}, found "
                            f"{len(clips)} lines in clips.jsonl and frames {tuple(frames.shape)} {frames.dtype}",
                            "re-run `gamengen curate`")
        return cls(folder, info, clips, frames)

    def __len__(self) -> int:
        return len(self._clips)

    @property
    def env_id(self) -> str | None:
        """The game of the clips: the source store's env id while that store can be read, else None."""
        from ..data.store import Store

        src = self.info.get("source") or {}
        if src.get("kind") != "store":
            return None
        try:
            return Store.open(src["path"]).spec.env_id
        except (UserError, OSError, KeyError, ValueError, TypeError):
            return None

    def meta(self, i: int) -> dict:
        return self._clips[i]

    def keys(self, i: int) -> tuple[list[str], np.ndarray] | None:
        """Clip i's keys: (key names, (clip_frames, K) float32 share of each frame's steps each key was
        held, the keys after frame k leading to frame k + 1), or None (a video, or curated before keys
        were recorded)."""
        k = self._clips[i].get("keys")
        if not k:
            return None
        held = np.asarray(k["held"], np.float32)
        if held.shape != (self.clip_frames, len(k["names"])):
            raise UserError(f"{self.folder}: clip {i}'s keys are {held.shape}, expected "
                            f"({self.clip_frames}, {len(k['names'])})", "re-run `gamengen curate`")
        return list(k["names"]), held

    def frames(self, i: int) -> np.ndarray:
        """(clip_frames, height, width, 3) uint8 RGB, frame k shown k / fps seconds after the first."""
        if not 0 <= i < len(self):
            raise IndexError(f"clip {i} of {len(self)}")
        return np.asarray(self._frames[i])


def split_clips(ds: ClipDataset, seed: int, share: float) -> tuple[list[int], list[int], str]:
    """(classifier-train clips, held-out clips, "episode" or "clip"): `gamengen clip eval`'s split, whose
    judge trains on the first (eval/clip.py) and which `clip tune-codec` never tunes on the second of.
    Whole source episodes are held out, so no held-out clip has a neighbour from its own episode in the classifier's training set;
    a dataset of one source splits its clips. The draw is seeded by ``seed`` and the folder's name,
    so a dataset splits the same way whatever else is evaluated with it."""
    groups: dict[str, list[int]] = {}
    for i in range(len(ds)):
        src = ds.meta(i).get("source") or {}
        groups.setdefault(str(src.get("name") or src.get("path") or f"clip {i}"), []).append(i)
    name = zlib.crc32(Path(ds.folder).resolve().name.encode())
    rng = np.random.default_rng(np.random.SeedSequence([seed, name]).generate_state(1)[0])  # train's seed_of(seed, name)

    def count(n: int) -> int:  # at least one held out, at least one left to train on
        return min(n - 1, max(1, round(share * n)))

    if len(groups) >= 2:
        keys = sorted(groups)
        held_keys = [keys[j] for j in rng.permutation(len(keys))[:count(len(keys))]]
        held, by = sorted(i for k in held_keys for i in groups[k]), "episode"
    else:
        held, by = sorted(int(i) for i in rng.permutation(len(ds))[:count(len(ds))]), "clip"
    return sorted(set(range(len(ds))) - set(held)), held, by
