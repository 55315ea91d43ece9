"""`gamengen curate`: OGameData's curation (GameGen-X §3.2) run end to end, offline.

sources -> scene split and length filter (sources.py) -> fixed windows -> motion -> quality ->
near duplicates (stages.py) -> camera labels and captions -> the clip dataset (dataset.py) and the
report (report.py), written as one folder with atomic.write_folder_atomic.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..atomic import sha256_file, write_folder_atomic
from ..errors import UserError
from . import stages as S
from .captions import caption_record, store_fields, video_fields
from .dataset import ClipWriter
from .report import Tally, write_report
from .sources import Drop, SourceInfo, describe, open_video, scan, store_sources, video_files

VIDEO_FPS = 24.0  # default rate for videos: the paper's clips are 24 fps (§3.2)
VIDEO_SIZE = (120, 160)  # default (height, width) for videos: the project's 160x120


@dataclass(frozen=True)
class CurateConfig:
    fps: float | None = None  # None: a store's own rate, VIDEO_FPS for videos
    size: tuple[int, int] | None = None  # (height, width); None: a store's own, VIDEO_SIZE for videos
    min_seconds: float = 4.0
    max_seconds: float = 16.0
    clip_frames: int = 17
    max_windows: int = 0  # windows per piece at most; 0: as many as fit
    thresholds: S.Thresholds = field(default_factory=S.Thresholds)


@dataclass
class Plan:
    """What a run will read, with every setting resolved and checked."""

    path: Path
    kind: str  # "store" or "videos"
    fps: float
    size: tuple[int, int]
    cfg: CurateConfig
    store: object = None
    files: list[Path] = field(default_factory=list)
    sources: list[SourceInfo] = field(default_factory=list)  # a store's episodes

    @property
    def count(self) -> int:
        return len(self.sources) if self.kind == "store" else len(self.files)

    @property
    def min_frames(self) -> int:
        return math.ceil(self.cfg.min_seconds * self.fps - 1e-9)

    @property
    def max_frames(self) -> int:
        return math.floor(self.cfg.max_seconds * self.fps + 1e-9)


def plan(path: Path, cfg: CurateConfig) -> Plan:
    """Check the options and the source; UserError (one line) for anything wrong."""
    problem = cfg.thresholds.check()
    if problem:
        raise UserError(problem, "see `gamengen curate --help`")
    if not 0 < cfg.min_seconds <= cfg.max_seconds:
        raise UserError(f"need 0 < --min-seconds <= --max-seconds, got {cfg.min_seconds:g} and {cfg.max_seconds:g}",
                        "e.g. --min-seconds 4 --max-seconds 16 (the paper's range)")
    if cfg.clip_frames < 2:
        raise UserError(f"--clip-frames must be at least 2, got {cfg.clip_frames}", "e.g. --clip-frames 17")
    if cfg.max_windows < 0:
        raise UserError(f"--max-windows must be 0 (all) or more, got {cfg.max_windows}", "e.g. --max-windows 4")
    if cfg.fps is not None and not (math.isfinite(cfg.fps) and cfg.fps > 0):
        raise UserError(f"--fps must be a positive number, got {cfg.fps}", "e.g. --fps 17.5")
    if cfg.size is not None and min(cfg.size) < 16:
        raise UserError(f"--resolution {cfg.size[1]}x{cfg.size[0]} is too small", "use at least 16x16, e.g. 160x120")
    path = Path(path)
    kind = describe(path)
    if kind == "store":
        from ..data.store import Store

        store = Store.open(path)
        spec = store.spec
        fps = cfg.fps or spec.fps
        if fps > spec.fps + 1e-9:
            raise UserError(f"--fps {fps:g} is above the store's {spec.fps:g} frames per second",
                            f"pass --fps {spec.fps:g} or lower (frames are never repeated)")
        p = Plan(path, kind, fps, cfg.size or (spec.height, spec.width), cfg, store=store)
        p.sources = store_sources(store)
        if not p.sources:
            raise UserError(f"{path} lists no episodes", "record some with `gamengen record`")
    else:
        p = Plan(path, kind, cfg.fps or VIDEO_FPS, cfg.size or VIDEO_SIZE, cfg, files=video_files(path))
    if cfg.clip_frames > p.min_frames:
        raise UserError(f"--clip-frames {cfg.clip_frames} do not fit in --min-seconds {cfg.min_seconds:g} at "
                        f"{p.fps:g} fps ({p.min_frames} frames)", "lower --clip-frames or raise --min-seconds")
    return p


def run(p: Plan, out: Path, advance: Callable[[int], None] = lambda n: None) -> dict:
    """Curate ``p`` into the folder ``out`` (written whole, atomically); returns the report."""
    report: dict = {}

    def write(tmp: Path) -> None:
        report.update(_curate(p, tmp, advance))

    write_folder_atomic(out, write)
    return report


def _curate(p: Plan, folder: Path, advance) -> dict:
    h, w = p.size
    source = {"kind": p.kind, "path": str(p.path.resolve())}
    writer = ClipWriter(folder, p.cfg.clip_frames, h, w, p.fps, source)
    tally = Tally(p)
    hashes = S.HashIndex()
    for index in range(p.count):
        info = _open(p, index, writer, tally)
        if info is not None:
            tally.sources += 1
            variables, keys = _variables(p, info), _keys(p, info)
            for item in scan(info, index, p.fps, p.size, p.min_frames, p.max_frames, p.cfg.thresholds.scene_threshold):
                tally.scene(info, item.scene, item.src)
                if isinstance(item, Drop):
                    tally.drop(writer, {"stage": item.stage, "reason": item.reason, "source": info.name,
                                        "scene": item.scene, "start_s": _r(item.start / p.fps),
                                        "seconds": _r(item.frames / p.fps)})
                    continue
                tally.pieces += 1
                for s in S.windows(len(item.frames), p.cfg.clip_frames, p.cfg.max_windows):
                    _clip(p, info, variables, keys, item, s, writer, tally, hashes)
        if index < p.count - 1:
            advance(1)
    writer.finish()
    if len(writer) == 0:
        raise UserError(f"no clip survived curation: {tally.summary()}", tally.fix())
    advance(1)  # only now, so that a run that keeps nothing prints its one error line alone
    return write_report(folder, tally, writer)


def _open(p: Plan, index: int, writer: ClipWriter, tally) -> SourceInfo | None:
    if p.kind == "store":
        return p.sources[index]
    path = p.files[index]
    info = open_video(path)
    if isinstance(info, str):
        tally.drop(writer, {"stage": "decode", "reason": info, "source": path.name})
        return None
    if info.fps + 1e-6 < p.fps:
        tally.drop(writer, {"stage": "frame rate", "reason": f"{info.fps:g} fps is below --fps {p.fps:g}",
                            "source": path.name})
        return None
    info.sha256 = sha256_file(path)
    return info


def _clip(p: Plan, info: SourceInfo, table: dict[str, np.ndarray] | None, keys: tuple[list[str], np.ndarray] | None,
          piece, s: int, writer: ClipWriter, tally, hashes: S.HashIndex) -> None:
    t, F = p.cfg.thresholds, p.cfg.clip_frames
    frames, src = piece.frames[s:s + F], piece.src[s:s + F]  # (F, H, W, 3) uint8, (F,) source frames
    gray = S.gray_ref(frames)
    fl, q = S.flow(gray), S.quality(frames, gray)
    start = piece.start + s
    meta = {"source": _source(p, info, src), "scene": piece.scene, "start_s": _r(start / p.fps),
            "seconds": _r(F / p.fps), "scores": {k: _r(v) for k, v in {**asdict(fl), **asdict(q)}.items()}}
    tally.candidates += 1
    tally.scores.append(meta["scores"])
    # the store's variables over every step the clip spans (the pose is summed step by step)
    a, b = _steps(src)
    variables = None if table is None else {n: v[a:b] for n, v in table.items()}
    dead = variables is not None and _dead(variables)
    reason = S.motion_reason(fl, t)
    stage = "motion"
    if reason is None:
        stage, reason = "quality", S.quality_reason(q, t, dead)
    if reason is None:
        hs = S.hashes(frames)
        other, dist = hashes.nearest(hs)
        meta["scores"]["dedup_distance"] = dist if other >= 0 else None
        if dist <= t.dedup_distance:
            stage, reason = "dedup", f"near-duplicate of clip {other} (distance {dist})"
    if reason is not None:
        record = {**meta, "source": info.name, "source_frames": meta["source"]["frames"]}
        tally.drop(writer, {"stage": stage, "reason": reason, **record}, frames)
        return
    camera = {"flow": S.flow_camera_label(fl, t), "pose": None}
    if variables is not None and all(v in variables for v in ("ANGLE", "POSITION_X", "POSITION_Y")):
        camera["pose"] = S.pose_camera_label(variables["ANGLE"], variables["POSITION_X"], variables["POSITION_Y"],
                                             p.store.spec.fps)
    meta["camera"] = camera
    if p.kind == "store":
        fields = store_fields(p.store, info.episode, a, min(b, info.episode.length))
    else:
        luma = gray.reshape(F, -1).mean(axis=1)
        fields = video_fields(info.name, start / p.fps, F / p.fps, info.fps, p.fps, luma, camera["flow"], fl.motion)
    meta["captions"] = caption_record(fields)
    if keys is not None:
        meta["keys"] = _clip_keys(keys, src, min(b, len(keys[1])))
    hashes.add(hs, writer.add(frames, meta))
    tally.keep(camera, f"{info.name} at {start / p.fps:.1f} s, {camera['flow']}"
               + (f" (pose: {camera['pose']})" if camera["pose"] else ""))


def _source(p: Plan, info: SourceInfo, src: np.ndarray) -> dict:
    out = {"kind": info.kind, "name": info.name, "frames": [int(v) for v in src]}
    if info.kind == "episode":
        out["sha256"] = info.episode.sha256
        a, b = _steps(src)
        out["steps"] = [a, min(b, info.episode.length)]
    else:
        out["sha256"] = info.sha256
        out["fps"] = info.fps
    return out


def _steps(src: np.ndarray) -> tuple[int, int]:
    """The source steps a clip spans: from its first frame's to its last frame's plus one stride
    (at --fps below a store's rate, each clip frame stands for the steps until the next one)."""
    stride = max(1, int(src[-1] - src[-2])) if len(src) > 1 else 1
    return int(src[0]), int(src[-1]) + stride


def _variables(p: Plan, info: SourceInfo) -> dict[str, np.ndarray] | None:
    """A store episode's game variables (name -> (T,) float64); None for a video."""
    if info.kind != "episode":
        return None
    names, rec = p.store.spec.variables, info.episode
    table = np.asarray(p.store.open_episode(rec)["game_variables"][:], np.float64).reshape(rec.length, len(names))
    return {n: table[:, j] for j, n in enumerate(names)}


def _keys(p: Plan, info: SourceInfo) -> tuple[list[str], np.ndarray] | None:
    """A store episode's keys: (key names, (T, K) 0/1 held at each step); None for a video. The keys are
    the action set's buttons (ViZDoom's MOVE_FORWARD, TURN_LEFT, ...), or its action names where it has
    no buttons (Atari): what a player presses, so InstructNet's operation signal (GameGen-X §3.4) has
    one meaning across games that share buttons but not action sets."""
    if info.kind != "episode":
        return None
    spec = p.store.spec.action_set
    combos = np.asarray(spec.combos, np.float32) if spec.buttons else np.eye(len(spec.names), dtype=np.float32)
    actions = np.asarray(p.store.open_episode(info.episode)["actions"][:], np.int64)
    return list(spec.buttons or spec.names), combos[actions]


def _clip_keys(keys: tuple[list[str], np.ndarray], src: np.ndarray, end: int) -> dict:
    """clips.jsonl's ``keys``: per clip frame k, the share of the steps from frame k to frame k + 1 (the
    last frame: to ``end``) in which each key was held. The keys held after frame k lead to frame k + 1."""
    names, held = keys
    bounds = [int(v) for v in src[1:]] + [end]
    rows = [held[a:max(a + 1, b)].mean(axis=0) for a, b in zip((int(v) for v in src), bounds)]
    return {"names": names, "held": [[round(float(v), 3) for v in r] for r in rows]}


def _dead(v: dict[str, np.ndarray]) -> bool:
    """The player is dead in some frame: DEAD set, or HEALTH at or below 0 (§3.2 keeps gameplay only)."""
    return bool(("DEAD" in v and np.nan_to_num(v["DEAD"]).max(initial=0) > 0)
                or ("HEALTH" in v and np.any(v["HEALTH"] <= 0)))


def _r(x):
    return None if x is None else round(float(x), 4)
