"""Reading a trajectory store or a folder of videos into scene pieces: the scene split and the
length filter of OGameData's curation (GameGen-X §3.2), streamed so memory stays bounded.

Each source (a video file, or one episode of a store) is read frame by frame at its own rate.
Every frame goes through PySceneDetect's AdaptiveDetector (a rolling-average content detector,
the library's choice for fast camera motion); the frames that fall on the target rate's grid are
cropped and resized to the target resolution and kept. A scene ends at a detected cut, at a cut
the source forces (a store's teleports and respawns: a jump in POSITION_X/Y), and at the end of
the source (a store's episode boundaries); a detected cut right after an in-game event a store
logged is the event, not a new scene, and is ignored. A scene shorter than the minimum is dropped; a longer
one is cut into pieces of the maximum length from its start, and a last remainder shorter than
the minimum is dropped (§3.2: clips of 4-16 s, longer scenes cut into 16 s segments). The paper
also runs TransNetV2, a learned detector; it is not used here (no weights offline).

Only the frames of the scene being read are held: a piece is handed on once it is full and no
later cut can fall inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import cv2
import numpy as np

from ..errors import UserError
from .stages import fit

VIDEO_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov")
DETECT_WIDTH = 256  # frames wider than this are shrunk before the detector, as PySceneDetect's own CLI does
MIN_SCENE_S = 0.5  # the detector emits no two cuts closer than this (a flash is not two scenes)
# A store's player moving farther than this in one game tic has teleported or respawned: DOOM's
# fastest straferun covers about 17 map units per tic, a teleport hundreds.
JUMP_UNITS_PER_TIC = 64.0


@dataclass
class Piece:
    """A stretch of one scene, at the target rate and resolution, ready to be cut into windows."""

    source: int  # index of the source in the run's list
    scene: int  # scene number within the source
    start: int  # index of the first frame on the source's target-rate grid
    frames: np.ndarray  # (P, H, W, 3) uint8 RGB
    src: np.ndarray  # (P,) int64: the source frame (video) or store step each frame was taken from


@dataclass
class Drop:
    """A scene or remainder dropped before it became windows (one line of dropped.jsonl)."""

    source: int
    scene: int
    start: int  # first frame on the target grid
    frames: int  # how many target-rate frames it held
    stage: str
    reason: str
    src: np.ndarray  # (frames,) int64: the source frames they were taken from


@dataclass
class SourceInfo:
    """What a source is, for the records; ``read`` yields its frames, (H, W, 3) uint8 RGB."""

    name: str  # the video's file name, or the episode's path in the store
    kind: str  # "video" or "episode"
    fps: float  # its own frame rate
    read: Callable[[], Iterator[np.ndarray]]
    cuts: frozenset[int] = field(default_factory=frozenset)  # frames that begin a scene, known beforehand
    events: frozenset[int] = field(default_factory=frozenset)  # frames where a detected cut is an in-game event
    episode: object = None  # the store's EpisodeRecord, for an episode
    sha256: str = ""  # of the video file (an episode's is episode.sha256)


def scan(info: SourceInfo, index: int, fps: float, size: tuple[int, int], min_frames: int, max_frames: int,
         threshold: float) -> Iterator[Piece | Drop]:
    """Split one source into pieces of min_frames..max_frames frames at ``fps`` and ``size``
    (height, width); yield them and the dropped scenes in order. ``fps`` must not exceed the
    source's own rate (frame i of the target grid is source frame floor(i * ratio))."""
    from scenedetect import AdaptiveDetector, FrameTimecode

    ratio = info.fps / fps
    detector = AdaptiveDetector(adaptive_threshold=threshold, min_scene_len=max(1, round(MIN_SCENE_S * info.fps)))
    # a cut is reported up to event_buffer_length source frames late; one more target frame for rounding
    lag = math.ceil(detector.event_buffer_length / ratio) + 1
    buf: list[np.ndarray] = []  # the current scene's target frames not handed on yet
    src: list[int] = []
    state = {"scene": 0, "start": 0, "done": 0}  # scene number, grid index of buf[0], pieces handed on

    def piece(n: int) -> Piece:
        p = Piece(index, state["scene"], state["start"], np.stack(buf[:n]), np.array(src[:n], np.int64))
        del buf[:n], src[:n]
        state["start"] += n
        state["done"] += 1
        return p

    def end_scene(k: int) -> Iterator[Piece | Drop]:
        """The scene ends before buf[k]: hand on or drop buf[:k]; buf[k:] starts the next scene."""
        if k >= min_frames:
            yield piece(k)
        elif k > 0:
            why = "remainder shorter than --min-seconds" if state["done"] else "scene shorter than --min-seconds"
            yield Drop(index, state["scene"], state["start"], k, "length", why, np.array(src[:k], np.int64))
            del buf[:k], src[:k]
            state["start"] += k
        if k > 0 or state["done"]:
            state["scene"] += 1
            state["done"] = 0

    grid = 0  # next target frame's index on the grid
    last = -1
    for i, frame in enumerate(info.read()):
        last = i
        small = frame if frame.shape[1] <= DETECT_WIDTH else fit(
            frame, round(frame.shape[0] * DETECT_WIDTH / frame.shape[1]), DETECT_WIDTH)
        cuts = [c.frame_num for c in detector.process_frame(FrameTimecode(i, info.fps), small[:, :, ::-1].copy())
                if c.frame_num not in info.events]
        if i in info.cuts and i > 0:
            cuts.append(i)
        for c in sorted(set(cuts)):
            yield from end_scene(int(np.searchsorted(src, c)))  # frames taken from source frame >= c move on
        if i == math.floor(grid * ratio + 1e-9):
            buf.append(fit(frame, *size))
            src.append(i)
            grid += 1
        # a full piece is final once no cut can still be reported inside it
        while len(buf) >= max_frames + lag:
            yield piece(max_frames)
    if last < 0:
        return
    for c in sorted({c.frame_num for c in detector.post_process(FrameTimecode(last, info.fps))}):
        yield from end_scene(int(np.searchsorted(src, c)))
    while len(buf) >= max_frames:
        yield piece(max_frames)
    yield from end_scene(len(buf))


# -- sources ------------------------------------------------------------------------------------------
def is_store(path: Path) -> bool:
    return (path / "store.json").is_file()


def video_files(path: Path) -> list[Path]:
    """The video files directly in ``path``, sorted by name (so runs are reproducible)."""
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES
                  and not p.name.startswith("."))


def open_video(path: Path) -> SourceInfo | str:
    """A video file as a source, or why it cannot be read (the first frame must decode)."""
    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            return "cannot be opened as a video"
        fps = float(cap.get(cv2.CAP_PROP_FPS))
        ok, frame = cap.read()
        if not ok or frame is None:
            return "no frame decodes"
        if not math.isfinite(fps) or fps <= 0:
            return "its frame rate is unknown"
    finally:
        cap.release()

    def read() -> Iterator[np.ndarray]:
        cap = cv2.VideoCapture(str(path))
        try:
            while True:
                ok, frame = cap.read()
                if not ok or frame is None:
                    return  # the end, or the first frame that does not decode: what came before is kept
                yield cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        finally:
            cap.release()

    return SourceInfo(path.name, "video", fps, read)


def store_sources(store) -> list[SourceInfo]:
    """One source per listed episode of a data.store.Store, in the store's order."""
    spec = store.spec
    out = []
    for rec in store.episodes():
        def read(rec=rec) -> Iterator[np.ndarray]:
            frames = store.open_episode(rec)["frames"]
            for s in range(0, rec.length, 256):
                yield from np.asarray(frames[s:min(s + 256, rec.length)])

        out.append(SourceInfo(rec.path, "episode", spec.fps, read, pose_jumps(store, rec), event_frames(store, rec), rec))
    return out


def event_frames(store, rec) -> frozenset[int]:
    """Frames that may show the effect of an in-game event the store logged (`record --events`):
    a light or tint change, a summon's flash. The detector sees a jump there, but the scene goes
    on, and the event is what OGameData-INS clips are about (§3.2), so such a cut is ignored. An
    event fired at step t shows from frame t + 1, within data/captions.py's CONFIRM_S."""
    from ..data.captions import CONFIRM_S
    from ..data.store import read_events

    events = read_events(store.open_episode(rec))
    if events is None:
        return frozenset()
    horizon = max(1, round(CONFIRM_S * store.spec.fps))
    return frozenset(int(t) + k for t in np.nonzero(events)[0] for k in range(1, horizon + 1))


def pose_jumps(store, rec) -> frozenset[int]:
    """Steps where the player appears somewhere else than one step before (teleport, respawn)."""
    names = store.spec.variables
    if "POSITION_X" not in names or "POSITION_Y" not in names:
        return frozenset()
    table = np.asarray(store.open_episode(rec)["game_variables"][:], np.float64).reshape(rec.length, len(names))
    step = np.hypot(np.diff(table[:, names.index("POSITION_X")]), np.diff(table[:, names.index("POSITION_Y")]))
    jump = step > JUMP_UNITS_PER_TIC * max(store.spec.frame_skip, 1)
    return frozenset(int(t) + 1 for t in np.nonzero(jump)[0])


def describe(path: Path) -> str:
    """'store' or 'videos'; a UserError for anything else."""
    if not path.exists():
        raise UserError(f"--from {path} does not exist", "pass a trajectory store or a folder of video files")
    if path.is_file():
        raise UserError(f"--from {path} is a file, not a folder",
                        "pass the folder that holds the videos (or a trajectory store)")
    if is_store(path):
        return "store"
    if not video_files(path):
        raise UserError(f"--from {path} is neither a trajectory store (no store.json) nor a folder with videos "
                        f"({', '.join(VIDEO_SUFFIXES)})", "pass a store made by `gamengen record` or a folder of videos")
    return "videos"
