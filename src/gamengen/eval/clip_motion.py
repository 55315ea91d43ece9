"""Dynamic degree and motion smoothness of clips from optical flow (the offline clip evaluation,
eval/clip.py), standing in for the VBench scores GameGen-X reports (§4.3, Table 1: DD 0.80, MS 0.99).

The flow is curation's (curate/stages.py): Farneback on luma resized to REF_WIDTH (128 px), in
px per frame at the clip's own rate, so the figures share units with the curation's motion score.

- **Dynamic degree** follows VBench's rule with Farneback in place of RAFT: a frame pair moves when
  the mean of its largest 5% flow magnitudes passes 6 px at a 256-px short side, scaled to ours
  (2.25 px at 128x96); a clip is dynamic when at least a quarter of its pairs move (VBench: 4 of
  16). The top 5%, not the mean, so a monster walking across a still view counts as motion.
- **Motion smoothness** is ours: VBench's score needs a frame-interpolation network (AMT) we cannot
  download. Smooth motion keeps each point's velocity from one frame to the next, so we follow
  every pixel along the flow (Lagrangian: the next flow is read where the pixel went) and compare
  velocities: 1 - sum |u_k+1(x + u_k(x)) - u_k(x)| / sum (|u_k(x)| + |u_k+1(x + u_k(x))|), over
  pixels that move (the two magnitudes add to >= 0.5 px) and stay in the picture. By the triangle
  inequality it lies in [0, 1]: 1 for constant velocity, 0 for motion that reverses every frame;
  a clip with no moving pixel scores 1 (nothing moves, nothing jerks). Our numbers are not
  comparable to the paper's 0.99; compare generated with real clips.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from ..curate import stages

TOP_SHARE = 0.05  # VBench: the largest 5% of a pair's flow magnitudes
VBENCH_PX, VBENCH_SIDE = 6.0, 256.0  # VBench: 6 px at a 256-px short side
MOVING_PAIRS = 0.25  # VBench: 4 of 16 pairs
MOVING_PX = 0.5  # smoothness: a pixel moves when its two magnitudes add to this (Farneback on a still picture: ~0.001)


@dataclass(frozen=True)
class Motion:
    dynamic: bool  # VBench's dynamic degree of one clip
    smoothness: float  # in [0, 1]
    mean_flow: float  # mean flow magnitude, px/frame at REF_WIDTH: curation's motion score
    moving_pairs: int  # pairs whose top-5% magnitude passed the threshold
    threshold: float  # that threshold, px/frame at REF_WIDTH


def flow_fields(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 RGB -> (F - 1, h, REF_WIDTH, 2) float32 flow between consecutive frames."""
    return stages.flow_fields(stages.gray_ref(np.asarray(frames)))


def dynamic_threshold(h: int, w: int) -> float:
    """VBench's threshold at a flow field of h x w: 6 px scaled from a 256-px short side."""
    return VBENCH_PX * min(h, w) / VBENCH_SIDE


def moving_pairs(fields: np.ndarray) -> tuple[int, float]:
    """(pairs whose mean top-5% flow magnitude passes the threshold, the threshold)."""
    n, h, w, _ = fields.shape
    mag = np.hypot(fields[..., 0], fields[..., 1]).reshape(n, -1)  # (n, h * w)
    top = max(1, int(math.ceil(TOP_SHARE * h * w)))
    peaks = np.sort(mag, axis=1)[:, -top:].mean(axis=1)  # (n,)
    threshold = dynamic_threshold(h, w)
    return int((peaks > threshold).sum()), threshold


def smoothness_terms(fields: np.ndarray) -> list[tuple[float, float]]:
    """Per consecutive pair of (n, h, w, 2) flow fields: (the velocity change, the speed), each summed over
    the moving pixels that stay in view; smoothness's numerator and denominator, pair by pair."""
    n, h, w, _ = fields.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    terms = []
    for u, nxt in zip(fields[:-1], fields[1:]):
        tx, ty = xs + u[..., 0], ys + u[..., 1]  # where each pixel went
        inside = (tx >= 0) & (tx <= w - 1) & (ty >= 0) & (ty <= h - 1)
        after = cv2.remap(nxt, tx, ty, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)  # u_k+1 there
        speed = np.hypot(u[..., 0], u[..., 1]) + np.hypot(after[..., 0], after[..., 1])
        keep = inside & (speed >= MOVING_PX)
        terms.append((float(np.hypot(*(after - u)[keep].T).sum()), float(speed[keep].sum())))
    return terms


def smoothness(fields: np.ndarray) -> float:
    """Motion smoothness in [0, 1] of (n, h, w, 2) flow fields (module docstring)."""
    change = total = 0.0
    for c, t in smoothness_terms(fields):
        change += c
        total += t
    return 1.0 if total == 0 else float(np.clip(1.0 - change / total, 0.0, 1.0))


def motion(frames: np.ndarray) -> Motion:
    """The motion figures of one uint8 clip (F, H, W, 3), F >= 2."""
    fields = flow_fields(frames)
    moving, threshold = moving_pairs(fields)
    need = max(1, round(MOVING_PAIRS * len(fields)))
    return Motion(moving >= need, smoothness(fields), float(np.hypot(fields[..., 0], fields[..., 1]).mean()), moving,
                  threshold)


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a share: the range a share measured on n clips is expected in."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    mid, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (mid - half) / (1 + z * z / n)), min(1.0, (mid + half) / (1 + z * z / n))


def share(hits: list[bool]) -> dict:
    """A share as the clip reports write it: {"value": mean or None when empty, "n": count}."""
    return {"value": float(np.mean(hits)) if hits else None, "n": len(hits)}
