"""Videos of stored episodes: previews with the actions written on them, and plain exports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..errors import UserError


def overlay(frame: np.ndarray, lines: list[str], scale: int) -> np.ndarray:
    """Upscale a frame (nearest, so pixels stay visible) and write text lines on a band below it,
    so the game's own status bar stays visible."""
    size = max(10, 5 * scale)
    band = (size + 4) * len(lines) + 4
    band += band % 2  # H.264 wants even sizes
    h, w = frame.shape[0] * scale, frame.shape[1] * scale
    img = Image.new("RGB", (w, h + band))
    img.paste(Image.fromarray(frame).resize((w, h), Image.Resampling.NEAREST))
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=size)
    for i, line in enumerate(lines):
        draw.text((4, h + 2 + i * (size + 4)), line, fill=(255, 255, 0), font=font)
    return np.asarray(img)


def write_video(path: Path, frames, fps: float, crf: int = 18) -> None:
    """Write an iterable of (H, W, 3) uint8 frames to .mp4 (H.264, via imageio-ffmpeg's bundled
    ffmpeg) or .gif. Written to a temporary name and renamed, so a crash leaves no half video."""
    import imageio.v2 as imageio

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".mp4", ".gif"):
        raise UserError(f"cannot write video '{path.name}'", "use an .mp4 or .gif file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {path.parent}: {e.strerror}", "pick a writable output path") from None
    tmp = path.with_name(f".{path.stem}.tmp{suffix}")
    if suffix == ".gif":
        imageio.mimsave(tmp, list(frames), duration=1000.0 / fps, loop=0)
    else:
        writer = imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=2, pixelformat="yuv420p",
                                    ffmpeg_params=["-crf", str(crf)])
        with writer:
            for f in frames:
                writer.append_data(f)
    tmp.replace(path)
