"""The trajectory store: the contract between recording and training (docs/dataset.md).

Layout::

    <store>/store.json                 what every episode shares: env, resolution, action set, frame skip
    <store>/<shard>/shard.json         how this shard is recorded (policy, seed, worker); resume checks it
    <store>/<shard>/manifest.jsonl     one JSON line per complete episode, append-only; readers trust only it
    <store>/<shard>/<episode>/         one zarr v3 group per episode
    <store>/<shard>/.tmp-<episode>/    an episode being written; renamed into place when complete

Optional per-step data (format version 2): ``labels`` (objects in view) and ``events`` (in-game
events fired during recording), each present in every episode of a store whose store.json says so.

One process writes one shard, so shards from several workers or machines sit side by side and merge
by copying their folders next to each other.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from ..atomic import append_line_durable, fsync_dir, write_json_atomic
from ..envs.base import ActionSet, GameEvent
from ..errors import UserError

FORMAT = "gamengen-trajectory-store"
# Version 2 adds the optional labels and events. A store that uses neither is still written as
# version 1, byte for byte as before, so older readers keep reading it; one that uses them says 2,
# so an older gamengen refuses it rather than silently mixing in episodes without them.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_LABEL_COUNT = 255  # labels are uint8 counts; more objects of one type in view saturate here
FRAME_CHUNK = 32  # frames per chunk (docs/dataset.md): a training window touches few chunks
TABLE_CHUNK = 4096  # steps per chunk for the small per-step arrays
TMP_PREFIX = ".tmp-"


@dataclass
class StoreSpec:
    """What every episode in a store shares. Two runs may add to one store only if these match."""

    env_id: str
    height: int
    width: int
    action_set: ActionSet
    frame_skip: int
    fps: float
    variables: tuple[str, ...] = ()
    images: tuple[str, ...] = ()  # extra pictures beside `frames`, e.g. ("automap",)
    compression_level: int = 1  # zstd level of the frame chunks
    labels: bool = False  # every episode has `labels` (objects in view) and attrs `label_names`
    # The fixed event vocabulary, NO_EVENT first, so `events[t] = k` names events[k]; empty: no
    # events. event_period_s is the gap range the schedule drew from (envs.base.event_schedule);
    # event_clear_s, when set, how long before each event lasting effects were ended (EnvConfig's).
    events: tuple[GameEvent, ...] = ()
    event_period_s: tuple[float, float] | None = None
    event_clear_s: float | None = None

    @property
    def version(self) -> int:
        return 2 if self.labels or self.events else 1

    def to_json(self) -> dict:
        d = {"env_id": self.env_id, "height": self.height, "width": self.width,
             "action_set": self.action_set.to_json(), "frame_skip": self.frame_skip, "fps": self.fps,
             "variables": list(self.variables), "images": list(self.images),
             "compression_level": self.compression_level}
        if self.labels:
            d["labels"] = True
        if self.events:
            d["events"] = [e.to_json() for e in self.events]
            d["event_period_s"] = list(self.event_period_s or ())
            if self.event_clear_s is not None:
                d["event_clear_s"] = self.event_clear_s
        return {"format": FORMAT, "version": self.version, **d}

    @classmethod
    def from_json(cls, d: dict, where: str) -> "StoreSpec":
        if d.get("format") != FORMAT:
            raise UserError(f"{where} is not a gamengen store description", "point at a folder made by `gamengen record`")
        if d.get("version") not in READABLE_VERSIONS:
            raise UserError(f"{where} has store format version {d.get('version')}, this gamengen reads "
                            + " and ".join(map(str, READABLE_VERSIONS)), "upgrade gamengen or re-record")
        try:
            events = tuple(GameEvent.from_json(e) for e in d.get("events", ()))
            if events and events[0].name != "none":
                raise ValueError("events[0] must be the 'none' event")
            period, clear = d.get("event_period_s"), d.get("event_clear_s")
            return cls(d["env_id"], int(d["height"]), int(d["width"]), ActionSet.from_json(d["action_set"]),
                       int(d["frame_skip"]), float(d["fps"]), tuple(d.get("variables", ())), tuple(d.get("images", ())),
                       int(d.get("compression_level", 1)), bool(d.get("labels", False)), events,
                       tuple(float(v) for v in period) if events and period else None,
                       float(clear) if events and clear is not None else None)
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{where} is missing or has a bad field ({e})", "restore store.json from a backup") from None

    def mismatch(self, other: "StoreSpec") -> str | None:
        """The first difference that makes episodes of the two specs impossible to mix, if any."""
        def events(spec: StoreSpec) -> str:
            if not spec.events:
                return "off"
            lo, hi = spec.event_period_s or (0, 0)
            return f"on ({len(spec.events) - 1} kinds, every {lo:g}-{hi:g} s)"

        checks = [
            ("env", self.env_id, other.env_id),
            ("resolution", f"{self.width}x{self.height}", f"{other.width}x{other.height}"),
            ("action set", list(self.action_set.names), list(other.action_set.names)),
            ("frame skip", self.frame_skip, other.frame_skip),
            ("extra images", list(self.images), list(other.images)),
            ("labels", "on" if self.labels else "off", "on" if other.labels else "off"),
            ("events", events(self), events(other)),
        ]
        for what, mine, theirs in checks:
            if mine != theirs:
                return f"{what} {mine} (store) vs {theirs} (this run)"
        if self.events != other.events or self.event_period_s != other.event_period_s:
            return "event vocabulary or period differs between the store and this run"
        if self.event_clear_s != other.event_clear_s:
            def clear(spec: StoreSpec) -> str:
                return "off" if spec.event_clear_s is None else f"{spec.event_clear_s:g} s before each event"

            return f"event clearing {clear(self)} (store) vs {clear(other)} (this run)"
        return None


@dataclass
class EpisodeRecord:
    """One line of a shard's manifest.jsonl."""

    id: str
    shard: str
    length: int
    sha256: str
    meta: dict = field(default_factory=dict)

    @property
    def path(self) -> str:  # relative to the store root
        return f"{self.shard}/{self.id}"


def tree_sha256(folder: Path, fsync: bool = False) -> str:
    """sha256 of a folder's files: for each file in sorted relative-path order, the path (with '/'),
    a NUL byte, the size in decimal, a NUL byte, then the bytes. Optionally fsync each file as read."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for p in files:
        rel = p.relative_to(folder).as_posix()
        with open(p, "rb") as f:
            data = f.read()
            if fsync:
                os.fsync(f.fileno())
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    if fsync:
        for d in sorted({p.parent for p in files} | {folder}, key=lambda d: -len(d.parts)):
            fsync_dir(d)
    return h.hexdigest()


def read_manifest(path: Path) -> list[EpisodeRecord]:
    records = []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            records.append(EpisodeRecord(d["id"], d["shard"], int(d["length"]), d["sha256"], d.get("meta", {})))
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{path} line {i} is corrupt (not a complete episode record)",
                "delete that line; its episode is then unlisted and `gamengen record` re-records it",
            ) from None
    return records


class Store:
    """A trajectory store on disk. Readers see only episodes listed in manifests."""

    def __init__(self, root: str | os.PathLike, spec: StoreSpec):
        self.root = Path(root)
        self.spec = spec

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike) -> "Store":
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise UserError(f"store path {root} is a file, not a folder", "pass a folder path")
        spec_path = root / "store.json"
        if not spec_path.exists():
            raise UserError(f"{root} is not a trajectory store (no store.json)", "record one with `gamengen record`")
        try:
            d = json.loads(spec_path.read_text())
        except ValueError:
            raise UserError(f"{spec_path} is not valid JSON", "restore it from a backup or re-record") from None
        return cls(root, StoreSpec.from_json(d, str(spec_path)))

    @classmethod
    def create_or_open(cls, root: str | os.PathLike, spec: StoreSpec) -> "Store":
        """Open a store for adding episodes of ``spec``, creating it if needed; refuse to mix specs."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise UserError(f"store path {root} is a file, not a folder", "pass a folder path for --out")
        if (root / "store.json").exists():
            store = cls.open(root)
            diff = store.spec.mismatch(spec)
            if diff:
                raise UserError(f"store {root} holds other data: {diff}", "record into a new --out folder")
            return store
        if root.exists() and any(p.name != ".DS_Store" for p in root.iterdir()):
            raise UserError(f"{root} is a non-empty folder that is not a trajectory store", "pick a new or empty --out folder")
        try:
            root.mkdir(parents=True, exist_ok=True)
            write_json_atomic(root / "store.json", spec.to_json())
        except PermissionError:
            raise UserError(f"cannot write to {root} (permission denied)", "pick a writable --out folder") from None
        except OSError as e:
            raise UserError(f"cannot create store at {root}: {e.strerror}", "pick a writable --out folder") from None
        return cls(root, spec)

    # -- reading -------------------------------------------------------------------------------
    def shards(self) -> list[str]:
        return sorted(p.parent.name for p in self.root.glob("*/manifest.jsonl"))

    def episodes(self) -> list[EpisodeRecord]:
        records = []
        for shard in self.shards():
            for rec in read_manifest(self.root / shard / "manifest.jsonl"):
                rec.shard = shard  # the folder holding the manifest, so a renamed shard still reads right
                records.append(rec)
        return records

    def find(self, episode_id: str) -> EpisodeRecord:
        for rec in self.episodes():
            if rec.id == episode_id or rec.path == episode_id:
                return rec
        raise UserError(f"no episode '{episode_id}' in {self.root}", "list episodes with `gamengen data info`")

    def open_episode(self, rec: EpisodeRecord) -> zarr.Group:
        return zarr.open_group(self.root / rec.path, mode="r", zarr_format=3)

    def unlisted(self) -> list[Path]:
        """Episode folders no manifest lists: in-progress temporaries and crash leftovers."""
        listed = {rec.path for rec in self.episodes()}
        out = []
        for shard_dir in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for d in sorted(p for p in shard_dir.iterdir() if p.is_dir()):
                if f"{shard_dir.name}/{d.name}" not in listed:
                    out.append(d)
        return out


class ShardWriter:
    """Writes the episodes of one shard. Holds an exclusive lock so two recorders never share a shard."""

    def __init__(self, store: Store, shard: str, shard_info: dict):
        self.store = store
        self.shard = shard
        self.dir = store.root / shard
        try:
            self.dir.mkdir(exist_ok=True)
            self._lock = open(self.dir / ".lock", "a")
        except OSError as e:
            raise UserError(f"cannot write to {self.dir}: {e.strerror}", "pick a writable --out folder") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"shard {self.dir} is being written by another recorder",
                            "wait for it to finish, or record with another --seed") from None
        info_path = self.dir / "shard.json"
        if info_path.exists():
            old = json.loads(info_path.read_text())
            if old != shard_info:
                diff = ", ".join(f"{k}={old.get(k)!r} (store) vs {v!r}" for k, v in shard_info.items() if old.get(k) != v)
                raise UserError(f"shard {shard} was recorded with other settings: {diff}",
                                "re-run with the original settings to resume, or use another --seed or --out")
        else:
            write_json_atomic(info_path, shard_info)
        self.manifest = self.dir / "manifest.jsonl"
        self.manifest.touch()
        fsync_dir(self.dir)
        self.records = read_manifest(self.manifest)
        self._recover()

    def _recover(self) -> None:
        """Clean up after a killed recorder: drop temporaries; list a renamed-but-unlisted episode."""
        listed = {r.id for r in self.records}
        for d in sorted(p for p in self.dir.iterdir() if p.is_dir()):
            if d.name.startswith(TMP_PREFIX):
                shutil.rmtree(d)
            elif d.name not in listed:
                # Killed between the rename and the manifest append: the folder is complete and
                # fsynced (it was renamed only then), so list it rather than record it again.
                try:
                    g = zarr.open_group(d, mode="r", zarr_format=3)
                    rec = EpisodeRecord(d.name, self.shard, int(g.attrs["length"]), tree_sha256(d), dict(g.attrs["meta"]))
                except Exception:
                    shutil.rmtree(d)
                    continue
                append_line_durable(self.manifest, json.dumps(asdict(rec)))
                self.records.append(rec)
        self.records.sort(key=lambda r: r.id)

    def close(self) -> None:
        self._lock.close()

    def begin(self, episode_id: str, meta: dict) -> "EpisodeWriter":
        return EpisodeWriter(self, episode_id, meta)


class EpisodeWriter:
    """Streams one episode into a temporary zarr group; ``finish`` makes it visible atomically.

    Frames go to disk chunk by chunk (FRAME_CHUNK frames at a time) so memory stays flat; the small
    per-step arrays are kept in lists and written once at the end.
    """

    def __init__(self, shard: ShardWriter, episode_id: str, meta: dict):
        spec = shard.store.spec
        self.shard, self.spec, self.id, self.meta = shard, spec, episode_id, meta
        self.tmp = shard.dir / f"{TMP_PREFIX}{episode_id}"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.group = zarr.open_group(self.tmp, mode="w", zarr_format=3)
        self._capacity = 1024
        self._buffers = {}
        self._images = {}
        for name in ("frames", *spec.images):
            self._images[name] = self.group.create_array(
                name, shape=(self._capacity, spec.height, spec.width, 3), chunks=(FRAME_CHUNK, spec.height, spec.width, 3),
                dtype="uint8",
                # zstd keeps frames lossless (PSNR is measured pixel by pixel); crc32c lets any read
                # catch a flipped byte in a chunk; "." keys keep one flat folder of chunk files.
                compressors=[ZstdCodec(level=spec.compression_level), Crc32cCodec()],
                chunk_key_encoding={"name": "default", "separator": "."},
            )
            self._buffers[name] = np.zeros((FRAME_CHUNK, spec.height, spec.width, 3), np.uint8)
        self._zstd = numcodecs.Zstd(level=spec.compression_level)
        self.actions: list[int] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.variables: list[list[float]] = []
        self.labels: list[dict[str, int]] = []
        self.events: list[int] = []

    def __len__(self) -> int:
        return len(self.actions)

    def add(self, frame: np.ndarray, action: int, reward: float, terminated: bool, truncated: bool,
            variables: dict[str, float], images: dict[str, np.ndarray] | None = None,
            labels: dict[str, int] | None = None, event: int = 0) -> None:
        """One step: ``frame`` was shown, ``action`` was taken after it and led to ``reward``/flags.
        ``labels`` (objects in view by type) belong to ``frame``; ``event`` was fired with ``action``."""
        t = len(self.actions)
        k = t % FRAME_CHUNK
        self._buffers["frames"][k] = frame
        for name in self.spec.images:
            self._buffers[name][k] = images[name]
        self.actions.append(int(action))
        self.rewards.append(float(reward))
        self.terminated.append(bool(terminated))
        self.truncated.append(bool(truncated))
        self.variables.append([variables.get(v, float("nan")) for v in self.spec.variables])
        if self.spec.labels:
            self.labels.append(dict(labels or {}))
        if self.spec.events:
            if not 0 <= event < len(self.spec.events):
                raise ValueError(f"event {event} is outside the store's vocabulary of {len(self.spec.events)}")
            self.events.append(int(event))
        if k == FRAME_CHUNK - 1:
            self._flush(t + 1)

    def _flush(self, end: int) -> None:
        """Write the chunk holding steps [.., end) straight to its file.

        This is the recorder's hot path: encoding the chunk here, exactly as the array's codecs
        (bytes -> zstd -> crc32c) and key encoding declare, avoids zarr-python's per-write thread
        hand-offs, which cost more than the compression itself on 2 cores. Reads go through zarr,
        and tests check that zarr decodes these chunks bit-exactly.
        """
        index = (end - 1) // FRAME_CHUNK
        if end > self._capacity:
            self._capacity *= 2
            for arr in self._images.values():
                arr.resize((self._capacity, *arr.shape[1:]))
        for name, buf in self._buffers.items():
            if end % FRAME_CHUNK:
                buf[end % FRAME_CHUNK :] = 0  # a partial last chunk is stored padded with the fill value
            packed = self._zstd.encode(buf)
            crc = google_crc32c.value(packed).to_bytes(4, "little")
            with open(self.tmp / name / f"c.{index}.0.0.0", "wb") as f:
                f.write(packed)
                f.write(crc)

    def abandon(self) -> None:
        """Drop an unfinished episode (nothing was listed; its temporary folder goes)."""
        shutil.rmtree(self.tmp, ignore_errors=True)

    def finish(self) -> EpisodeRecord:
        T = len(self.actions)
        if T == 0:
            raise ValueError("an episode needs at least one step")
        if T % FRAME_CHUNK:
            self._flush(T)
        for arr in self._images.values():
            arr.resize((T, *arr.shape[1:]))
        g = self.group
        codecs = [ZstdCodec(level=3), Crc32cCodec()]
        table = dict(chunks=(TABLE_CHUNK,), compressors=codecs)
        g.create_array("actions", data=np.asarray(self.actions, np.int16), **table)
        g.create_array("rewards", data=np.asarray(self.rewards, np.float32), **table)
        g.create_array("terminated", data=np.asarray(self.terminated, bool), **table)
        g.create_array("truncated", data=np.asarray(self.truncated, bool), **table)
        nv = len(self.spec.variables)
        g.create_array("game_variables", data=np.asarray(self.variables, np.float32).reshape(T, nv),
                       chunks=(TABLE_CHUNK, max(nv, 1)), compressors=codecs)
        extra_attrs = {}
        if self.spec.events:
            g.create_array("events", data=np.asarray(self.events, np.int16), **table)
        if self.spec.labels:
            names, counts = _label_table(self.labels)
            g.create_array("labels", data=counts, chunks=(TABLE_CHUNK, max(len(names), 1)), compressors=codecs)
            extra_attrs["label_names"] = list(names)
        meta = {**self.meta, "return": float(np.sum(self.rewards)), "terminated": self.terminated[-1],
                "truncated": self.truncated[-1], "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        g.attrs.update({"length": T, "meta": meta, **extra_attrs, **self.spec.to_json()})
        # Durability before visibility: fsync every file, then rename, then list in the manifest.
        digest = tree_sha256(self.tmp, fsync=True)
        os.rename(self.tmp, self.shard.dir / self.id)  # fails loudly rather than replace an episode
        fsync_dir(self.shard.dir)
        rec = EpisodeRecord(self.id, self.shard.shard, T, digest, meta)
        append_line_durable(self.shard.manifest, json.dumps(asdict(rec)))
        self.shard.records.append(rec)
        return rec


def _label_table(per_step: list[dict[str, int]]) -> tuple[tuple[str, ...], np.ndarray]:
    """Per-step {object name: count} -> (the episode's names, sorted; (T, K) uint8 counts)."""
    names = tuple(sorted({name for step in per_step for name in step}))
    column = {name: j for j, name in enumerate(names)}
    counts = np.zeros((len(per_step), len(names)), np.uint8)
    for t, step in enumerate(per_step):
        for name, n in step.items():
            counts[t, column[name]] = min(int(n), MAX_LABEL_COUNT)
    return names, counts


def read_events(group: zarr.Group, start: int = 0, end: int | None = None) -> np.ndarray | None:
    """``events[start:end]`` (int16 indices into the spec's vocabulary), or None for an episode
    recorded without events."""
    return np.asarray(group["events"][start:end], np.int16) if "events" in group else None


def read_labels(group: zarr.Group, start: int = 0, end: int | None = None) -> tuple[tuple[str, ...], np.ndarray] | None:
    """(names, counts[start:end]) of the objects in view, or None for an episode without labels.
    ``counts[t, j]`` is how many objects named ``names[j]`` frame t shows (uint8, saturating)."""
    if "labels" not in group:
        return None
    return tuple(group.attrs.get("label_names", ())), np.asarray(group["labels"][start:end], np.uint8)


def spec_of(env, compression_level: int = 1, images: tuple[str, ...] | None = None) -> StoreSpec:
    """The store spec of a game's data (``env``: an envs.base.GameEnv); ``images`` narrows which
    extra pictures are stored. Labels and events come from the adapter (ViZDoom only)."""
    c = env.config
    images = tuple(env.image_names) if images is None else images
    events = tuple(getattr(env, "events", ()))
    return StoreSpec(env.env_id, c.height, c.width, env.action_set, c.frame_skip, env.fps,
                     tuple(env.variable_names), images, compression_level, bool(getattr(env, "has_labels", False)),
                     events, tuple(c.event_period_s) if events else None, c.event_clear_s if events else None)
