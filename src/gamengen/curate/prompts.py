"""GameGen-X's video prompts (§3.4): a clip's frames turned into a structure or motion video.

InstructNet reads them, encoded by the video VAE like any clip, as an optional scaffold for what
the generated frames should follow. The paper uses Canny edges, motion vectors and pose sequences;
we make the first two with OpenCV (pure functions: frames in, frames out). DOOM has no skeleton to
track; ViZDoom's depth or labels buffer would stand in for the pose prompt, but stores do not keep
those buffers yet, so there is no third kind.
"""

from __future__ import annotations

import cv2
import numpy as np

from .stages import flow_fields

KINDS = ("canny", "flow")
CANNY_THRESHOLDS = (100, 200)  # OpenCV's usual pair for 8-bit pictures (hysteresis low, high)
FLOW_FULL_SCALE = 8.0  # px/frame at the clip's own size shown at full brightness: fixed, so speed reads the same in every clip


def canny(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 RGB -> (F, H, W, 3) uint8: each frame's Canny edges, white on black."""
    edges = [cv2.Canny(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), *CANNY_THRESHOLDS) for f in frames]
    return np.repeat(np.stack(edges)[..., None], 3, axis=-1)


def motion(frames: np.ndarray) -> np.ndarray:
    """(F, H, W, 3) uint8 RGB -> (F, H, W, 3) uint8: the Farneback flow into each frame from the one
    before as a picture, hue = direction, brightness = speed (FLOW_FULL_SCALE px/frame = 255); frame 0,
    with no frame before it, is black."""
    gray = np.stack([cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames])
    out = np.zeros_like(frames)
    for k, fl in enumerate(flow_fields(gray), start=1):  # (H, W, 2)
        mag, ang = cv2.cartToPolar(fl[..., 0], fl[..., 1])
        hsv = np.stack([ang * (90 / np.pi), np.full_like(mag, 255), np.clip(mag * (255 / FLOW_FULL_SCALE), 0, 255)], -1)
        out[k] = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2RGB)
    return out


def video_prompt(kind: str, frames: np.ndarray) -> np.ndarray:
    """The ``kind`` prompt ("canny" or "flow") of (F, H, W, 3) uint8 frames."""
    if kind == "canny":
        return canny(frames)
    if kind == "flow":
        return motion(frames)
    raise ValueError(f"unknown video prompt kind {kind!r}: use one of {', '.join(KINDS)}")
