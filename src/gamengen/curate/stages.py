"""The clip-level stages of OGameData's curation (GameGen-X §3.2), as pure functions: frames in,
scores and decisions out. Nothing here reads or writes files.

The paper scores clips with learned models (CLIP-AVA aesthetics, UniMatch flow, video-CLIP for
duplicates, CoTracker for camera motion). None of their weights can be had offline, so each stands
in with a classical measure (docs/curation.md says which for which):

- motion: OpenCV's Farneback optical flow instead of UniMatch;
- quality: luma, contrast and sharpness rules instead of the learned aesthetic score;
- near duplicates: perceptual hashes (imagehash.phash) instead of video-CLIP embeddings;
- camera motion: the mean flow's horizontal and radial (outward) parts instead of CoTracker's point
  tracks, and, in a trajectory store, the recorded pose.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import cv2
import numpy as np

if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # OpenCV's own thread pool ignores it; honour the budget
    cv2.setNumThreads(int(os.environ["OMP_NUM_THREADS"]))

REF_WIDTH = 128  # flow and sharpness are measured on luma resized to this width
CAMERA_LABELS = ("static", "pan left", "pan right", "forward", "backward", "mixed")


@dataclass(frozen=True)
class Thresholds:
    """Every number a decision depends on; report.json records them. The defaults were chosen on
    real DOOM recordings (docs/curation.md, "Thresholds", has the distributions and the reasons)."""

    scene_threshold: float = 3.0  # AdaptiveDetector's adaptive_threshold (PySceneDetect's default)
    min_motion: float = 0.5  # mean flow, px/frame at REF_WIDTH: below is too static
    max_motion: float = 6.0  # above is too fast (and near where Farneback stops tracking at this size)
    dark_luma: float = 20.0  # a clip whose mean luma (0-255) is below this is too dark
    flat_std: float = 6.0  # a frame whose luma std is below this is blank (fade, black or loading screen)
    dedup_distance: int = 6  # phash Hamming distance (of 64 bits) at or below which clips are duplicates
    static_flow: float = 0.75  # mean flow below this: the camera label is "static"
    pan_flow: float = 0.75  # |mean horizontal flow| to call a pan (when it beats the radial flow)
    zoom_flow: float = 0.3  # |mean radial flow| to call a move forward or backward

    def check(self) -> str | None:
        """What is inconsistent, if anything (the CLI turns it into one line)."""
        if not 0 <= self.min_motion < self.max_motion:
            return f"need 0 <= --min-motion < --max-motion, got {self.min_motion} and {self.max_motion}"
        if self.scene_threshold <= 0:
            return f"--scene-threshold must be positive, got {self.scene_threshold}"
        if not 0 <= self.dedup_distance <= 64:
            return f"--dedup-distance must be 0..64 (bits of a 64-bit hash), got {self.dedup_distance}"
        if min(self.dark_luma, self.flat_std, self.static_flow, self.pan_flow, self.zoom_flow) < 0:
            return "luma, contrast and flow thresholds must not be negative"
        return None


# -- shared helpers -----------------------------------------------------------------------------------
def gray_ref(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 RGB -> (F, h, REF_WIDTH) uint8 luma, aspect kept (frames narrower than
    REF_WIDTH are upscaled, so scores are comparable across resolutions)."""
    f, h, w = frames.shape[:3]
    size = (REF_WIDTH, max(8, round(h * REF_WIDTH / w)))
    interp = cv2.INTER_AREA if w >= REF_WIDTH else cv2.INTER_LINEAR
    return np.stack([cv2.resize(cv2.cvtColor(x, cv2.COLOR_RGB2GRAY), size, interpolation=interp) for x in frames])


def fit(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """(H, W, 3) -> (height, width, 3): crop the centre to the target aspect ratio, then resize
    (INTER_AREA), so nothing is stretched; a frame of the target size is returned as is."""
    h, w = frame.shape[:2]
    if (h, w) == (height, width):
        return frame
    if w * height > h * width:  # too wide: crop the sides
        cw = round(h * width / height)
        frame = frame[:, (w - cw) // 2:(w - cw) // 2 + cw]
    elif w * height < h * width:  # too tall: crop top and bottom
        ch = round(w * height / width)
        frame = frame[(h - ch) // 2:(h - ch) // 2 + ch]
    interp = cv2.INTER_AREA if frame.shape[1] >= width else cv2.INTER_LINEAR
    return cv2.resize(np.ascontiguousarray(frame), (width, height), interpolation=interp)


# -- motion (stands in for UniMatch) ------------------------------------------------------------------
@dataclass(frozen=True)
class Flow:
    """A clip's mean optical flow, px per frame (of the clip, at the target fps) at REF_WIDTH."""

    motion: float  # mean flow magnitude: the motion score
    dx: float  # mean horizontal flow, + = the content moves right (the camera pans left)
    dy: float  # mean vertical flow, + = down
    radial: float  # mean flow along the direction away from the centre, + = expanding (moving forward)


def flow_fields(gray: np.ndarray) -> np.ndarray:
    """(F, h, w) uint8 luma -> (F - 1, h, w, 2) float32 Farneback flow between consecutive frames:
    the one flow of curation and of the clip evaluation (eval/clip_motion.py)."""
    return np.stack([cv2.calcOpticalFlowFarneback(a, b, None, 0.5, 3, 15, 3, 5, 1.2, 0)
                     for a, b in zip(gray[:-1], gray[1:])])


def flow(gray: np.ndarray) -> Flow:
    """Farneback flow between consecutive frames of (F, h, w) uint8 luma, F >= 2, averaged."""
    f, h, w = gray.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    rx, ry = xs - (w - 1) / 2, ys - (h - 1) / 2
    norm = np.maximum(np.hypot(rx, ry), 1.0)
    ux, uy = rx / norm, ry / norm  # unit vectors away from the centre
    mags, dxs, dys, rads = [], [], [], []
    for fl in flow_fields(gray):  # (h, w, 2)
        u, v = fl[..., 0], fl[..., 1]
        mags.append(float(np.hypot(u, v).mean()))
        dxs.append(float(u.mean()))
        dys.append(float(v.mean()))
        rads.append(float((u * ux + v * uy).mean()))
    return Flow(*(float(np.mean(x)) for x in (mags, dxs, dys, rads)))


def motion_reason(fl: Flow, t: Thresholds) -> str | None:
    if fl.motion < t.min_motion:
        return "too static"
    if fl.motion > t.max_motion:
        return "too fast"
    return None


def flow_camera_label(fl: Flow, t: Thresholds) -> str:
    """Camera motion from the mean flow. A pan moves the whole picture sideways, so it shows in the
    mean horizontal flow (content moving right = the camera turning left); walking forward makes
    the picture expand from the centre, so it shows in the mean radial flow."""
    if fl.motion < t.static_flow:
        return "static"
    if abs(fl.dx) >= t.pan_flow and abs(fl.dx) >= abs(fl.radial):
        return "pan left" if fl.dx > 0 else "pan right"
    if abs(fl.radial) >= t.zoom_flow:
        return "forward" if fl.radial > 0 else "backward"
    return "mixed"


def pose_camera_label(angle: np.ndarray, x: np.ndarray, y: np.ndarray, fps: float) -> str:
    """The same labels from the recorded pose (ANGLE in degrees, counter-clockwise; POSITION_X/Y),
    with data/captions.py's thresholds: a turn is a pan, else a walk forward or back."""
    from ..data.captions import camera_motion

    m = camera_motion(angle, x, y, fps)
    if m.turn in ("left", "right"):
        return f"pan {m.turn}"
    if m.move in ("forward", "backward"):
        return m.move
    if not m.turn and not m.move:
        return "static"
    return "mixed"


# -- quality (stands in for the CLIP-AVA aesthetic score) ---------------------------------------------
@dataclass(frozen=True)
class Quality:
    luma: float  # mean luma (0-255) over the clip
    min_std: float  # the lowest per-frame luma standard deviation: a blank frame has ~0
    contrast: float  # mean per-frame luma standard deviation
    sharpness: float  # mean variance of the Laplacian at REF_WIDTH: the reported quality score


def quality(frames: np.ndarray, gray: np.ndarray) -> Quality:
    """(F, H, W, 3) uint8 RGB and its gray_ref (F, h, w) -> the clip's luma, contrast and sharpness."""
    luma = np.stack([cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) for x in frames]).astype(np.float32)  # (F, H, W)
    std = luma.reshape(len(luma), -1).std(axis=1)
    sharp = [float(cv2.Laplacian(g, cv2.CV_64F).var()) for g in gray]
    return Quality(float(luma.mean()), float(std.min()), float(std.mean()), float(np.mean(sharp)))


def quality_reason(q: Quality, t: Thresholds, dead: bool = False) -> str | None:
    """Why a clip fails the quality stage, or None. ``dead``: the store says the player is dead
    in some frame of it (DEAD or HEALTH <= 0): a death animation and red fade are not gameplay."""
    if dead:
        return "death"
    if q.min_std < t.flat_std:
        return "blank frame"
    if q.luma < t.dark_luma:
        return "dark"
    return None


# -- near duplicates (stands in for video-CLIP) -------------------------------------------------------
HASH_POSITIONS = 3  # frames hashed per clip: first, middle, last


def hashes(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 -> (HASH_POSITIONS,) uint64 perceptual hashes (imagehash.phash, 64 bits)."""
    import imagehash
    from PIL import Image

    idx = np.linspace(0, len(frames) - 1, HASH_POSITIONS).round().astype(int)
    out = []
    for i in idx:
        bits = imagehash.phash(Image.fromarray(frames[i])).hash.flatten()  # (64,) bool
        out.append(int("".join("1" if b else "0" for b in bits), 2))
    return np.array(out, np.uint64)


class HashIndex:
    """The hashes of the clips kept so far, (N, HASH_POSITIONS) uint64, grown by doubling."""

    def __init__(self) -> None:
        self._h = np.zeros((64, HASH_POSITIONS), np.uint64)
        self.ids: list[int] = []  # the dataset index of each kept clip

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, h: np.ndarray, clip: int) -> None:
        if len(self.ids) == len(self._h):
            self._h = np.concatenate([self._h, np.zeros_like(self._h)])
        self._h[len(self.ids)] = h
        self.ids.append(clip)

    def nearest(self, h: np.ndarray) -> tuple[int, int]:
        """(dataset index, distance) of the kept clip nearest to ``h`` (HASH_POSITIONS,); a clip's
        distance is the largest over its hashed frames, so two clips are near-duplicates only if
        every hashed frame is. (-1, 65) while none is kept."""
        n = len(self.ids)
        if n == 0:
            return -1, 65
        d = np.bitwise_count(self._h[:n] ^ h[None, :]).max(axis=1)  # (n,)
        i = int(np.argmin(d))  # the earliest of equally near ones
        return self.ids[i], int(d[i])


# -- placing windows ----------------------------------------------------------------------------------
def windows(length: int, frames: int, most: int = 0) -> list[int]:
    """Starts of non-overlapping windows of ``frames`` frames in a piece of ``length`` frames: as
    many as fit (at most ``most`` if > 0), spread evenly from the first frame to the last, so the
    spare frames fall between them; a single window sits in the middle."""
    n = length // frames
    if most > 0:
        n = min(n, most)
    if n <= 0:
        return []
    if n == 1:
        return [(length - frames) // 2]
    # spacing (length - frames) / (n - 1) >= frames, so rounded starts never overlap
    return [math.floor(k * (length - frames) / (n - 1) + 0.5) for k in range(n)]
