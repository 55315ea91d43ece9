"""`curate`: OGameData's curation (GameGen-X §3.2) of a store or a folder of videos into clips."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from .common import app, parse_resolution, progress_bar


@app.command()
def curate(
    source: Path = typer.Option(..., "--from", help="A trajectory store (has store.json) or a folder of videos "
                                                    "(.mp4 .webm .avi .mkv .mov)."),
    out: Path = typer.Option(..., "--out", help="New folder for the clip dataset and its report."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace --out if it exists and is not empty."),
    fps: Optional[float] = typer.Option(None, help="Clip frame rate (default: a store's own; 24 for videos, the "
                                                   "paper's). Never above the source's."),
    resolution: Optional[str] = typer.Option(None, help="WIDTHxHEIGHT of the clips (default: a store's own; 160x120 "
                                                        "for videos). Other aspect ratios are centre-cropped."),
    min_seconds: float = typer.Option(4.0, help="Drop scenes shorter than this (paper: 4 s)."),
    max_seconds: float = typer.Option(16.0, help="Cut longer scenes into pieces of this length (paper: 16 s)."),
    clip_frames: int = typer.Option(17, help="Frames per clip (17 = 1 + 4x4 for the 4x temporal video VAE)."),
    max_windows: int = typer.Option(0, help="Clips per piece at most, spread evenly over it (0: all that fit)."),
    scene_threshold: float = typer.Option(3.0, help="PySceneDetect AdaptiveDetector threshold (lower: more cuts)."),
    min_motion: float = typer.Option(0.5, help="Drop clips whose mean optical flow (px/frame at 128 px wide) is below."),
    max_motion: float = typer.Option(6.0, help="Drop clips whose mean optical flow is above."),
    dark_luma: float = typer.Option(20.0, help="Drop clips whose mean luma (0-255) is below."),
    flat_std: float = typer.Option(6.0, help="Drop clips with a blank frame: luma standard deviation below this."),
    dedup_distance: int = typer.Option(6, help="Drop a clip whose perceptual hashes are within this Hamming "
                                               "distance (of 64 bits) of a kept clip's."),
):
    """Curate gameplay into a clip dataset, offline: scene split, length filter, motion, quality and
    near-duplicate filters, camera-motion labels, structured captions, and a report (docs/curation.md)."""
    from ..curate.pipeline import CurateConfig, plan, run
    from ..curate.stages import Thresholds

    size = parse_resolution(resolution) if resolution else None
    thresholds = Thresholds(scene_threshold=scene_threshold, min_motion=min_motion, max_motion=max_motion,
                            dark_luma=dark_luma, flat_std=flat_std, dedup_distance=dedup_distance)
    cfg = CurateConfig(fps, size, min_seconds, max_seconds, clip_frames, max_windows, thresholds)
    _check_out(source, out, overwrite)
    p = plan(source, cfg)
    missing = [d for d in [out.absolute().parent, *out.absolute().parent.parents] if not d.exists()]
    try:
        with progress_bar(f"curating {p.path.name} ({'episodes' if p.kind == 'store' else 'videos'})", p.count) as advance:
            report = run(p, out, advance)
    except BaseException:
        for d in missing:  # deepest first: folders made for --out go again, so nothing is left on disk
            try:
                d.rmdir()
            except OSError:
                break
        raise
    typer.echo(f"{out}: {report['kept']} clips of {p.cfg.clip_frames} frames at {p.fps:g} fps, "
               f"{p.size[1]}x{p.size[0]}, from {p.count} source(s); {report['dropped_clips']} candidate clips dropped "
               f"(report.md, dropped.jsonl)")


def _check_out(source: Path, out: Path, overwrite: bool) -> None:
    src, dst = source.resolve(), out.resolve()
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file", "pick a new folder for --out")
    if dst == src or src in dst.parents or dst in src.parents:
        raise UserError(f"--out {out} and --from {source} overlap", "pick an --out folder outside --from")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"--out {out} exists and is not empty", "pick a new folder, or pass --overwrite to replace it")
