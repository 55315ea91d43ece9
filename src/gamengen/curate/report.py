"""The curation report: counts per stage, thresholds, score histograms and contact sheets
(report.json, report.md, figures/). Figure 3 of GameGen-X shows the same funnel for OGameData."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..atomic import write_figure, write_png
from .stages import CAMERA_LABELS

CLIP_STAGES = ("motion", "quality", "dedup")
EXAMPLES_PER_REASON = 3  # dropped clips shown per (stage, reason) on the contact sheet
KEPT_SHOWN = 12
FIXES = {"decode": "check that the files play (ffmpeg -i FILE)", "frame rate": "lower --fps",
         "length": "lower --min-seconds, or give longer videos", "motion": "widen --min-motion/--max-motion",
         "quality": "lower --dark-luma or --flat-std", "dedup": "lower --dedup-distance"}
STAND_INS = {
    "scene split": "PySceneDetect's AdaptiveDetector alone; TransNetV2 (learned) is not used: no weights offline",
    "aesthetic score (CLIP-AVA)": "rules: dark clips, blank frames, death (store); sharpness (Laplacian variance) reported only",
    "motion filter (UniMatch flow)": "OpenCV Farneback optical flow at 128 px wide",
    "near duplicates (video-CLIP)": "perceptual hashes (imagehash.phash) of 3 frames per clip",
    "camera motion (CoTracker)": "mean horizontal and radial flow; in a store also the recorded pose (ANGLE, POSITION_X/Y)",
    "captions (GPT-4o)": "store: data/captions.py templates from the log; videos: what is known, 'unknown' otherwise",
}


def _key(reason: str) -> str:
    """A reason without its particulars (which clip it duplicates, the distance)."""
    return reason.split(" of clip")[0].split(" (")[0]


class Tally:
    """Counts and examples gathered while curating; the report is made from it."""

    def __init__(self, plan):
        self.plan = plan
        self.sources = 0
        self.scenes: dict[tuple[str, int], list] = {}  # (source, scene) -> [first, last source frame, fps]
        self.pieces = self.candidates = 0
        self.dropped: dict[str, Counter] = {}
        self.scores: list[dict] = []  # every candidate clip's scores
        self.decisions: list[str] = []  # per candidate: "kept" or the stage that dropped it
        self.camera: list[dict] = []  # kept clips' camera labels
        self.kept_labels: list[str] = []  # kept clips' contact-sheet labels
        self.examples: dict[tuple[str, str], list[tuple[str, np.ndarray]]] = {}

    def scene(self, info, scene: int, src: np.ndarray) -> None:
        """Note that ``scene`` of source ``info`` holds source frames ``src`` (its pieces come in order)."""
        first, last = int(src[0]), int(src[-1])
        extent = self.scenes.setdefault((info.name, scene), [first, last, info.fps])
        extent[1] = max(extent[1], last)

    def scene_list(self) -> list[dict]:
        """Every scene the split found: its source frames (first, last kept on the target grid) and times."""
        return [{"source": name, "scene": k, "first_frame": a, "last_frame": b, "start_s": round(a / fps, 4),
                 "end_s": round((b + 1) / fps, 4)} for (name, k), (a, b, fps) in self.scenes.items()]

    def drop(self, writer, record: dict, frames: np.ndarray | None = None) -> None:
        stage, reason = record["stage"], record["reason"]
        self.dropped.setdefault(stage, Counter())[_key(reason)] += 1
        writer.drop(record)
        if stage in CLIP_STAGES:
            self.decisions.append(stage)
            shown = self.examples.setdefault((stage, _key(reason)), [])
            if frames is not None and len(shown) < EXAMPLES_PER_REASON:
                label = f"{stage}: {reason} - {record['source']} at {record['start_s']:.1f} s"
                shown.append((label, frames[np.linspace(0, len(frames) - 1, 4).round().astype(int)]))

    def keep(self, camera: dict, label: str) -> None:
        self.decisions.append("kept")
        self.camera.append(camera)
        self.kept_labels.append(label)

    def n(self, stage: str) -> int:
        return sum(self.dropped.get(stage, Counter()).values())

    def stages(self) -> list[dict]:
        """The funnel, stage by stage: what went in, what was dropped (by reason), what came out."""
        def row(stage, unit_in, n_in, n_out, unit_out=None):
            return {"stage": stage, "unit": unit_in, "in": n_in, "dropped": self.n(stage), "out": n_out,
                    "out_unit": unit_out or unit_in, "reasons": dict(sorted(self.dropped.get(stage, {}).items()))}

        rows = [row("decode", "source", self.plan.count, self.plan.count - self.n("decode")),
                row("frame rate", "source", self.plan.count - self.n("decode"), self.sources),
                row("scene split", "source", self.sources, len(self.scenes), "scene"),
                row("length", "scene", len(self.scenes), self.pieces, "piece"),
                row("windows", "piece", self.pieces, self.candidates, "clip")]
        left = self.candidates
        for stage in CLIP_STAGES:
            rows.append(row(stage, "clip", left, left - self.n(stage)))
            left -= self.n(stage)
        return rows

    def summary(self) -> str:
        parts = []
        for r in self.stages():
            if r["dropped"] or r["stage"] in ("scene split", "windows"):
                why = ", ".join(f"{n} {k}" for k, n in r["reasons"].items())
                parts.append(f"{r['stage']}: {r['in']} {r['unit']}(s) in, {r['out']} {r['out_unit']}(s) out"
                             + (f" ({why})" if why else ""))
        return "; ".join(parts)

    def fix(self) -> str:
        worst = max(self.dropped, key=lambda s: sum(self.dropped[s].values()), default="")
        return FIXES.get(worst, "give more or longer footage")


def camera_stats(camera: list[dict]) -> dict:
    """Label counts from the flow and the pose, and how often the two agree where both exist."""
    flow = Counter(c["flow"] for c in camera)
    both = [c for c in camera if c["pose"] is not None]
    out = {"flow": {k: flow[k] for k in CAMERA_LABELS}, "pose": None, "agreement": None, "pan_sign_agreement": None}
    if both:
        pose = Counter(c["pose"] for c in both)
        pans = [c for c in both if c["flow"].startswith("pan") and c["pose"].startswith("pan")]
        out.update(pose={k: pose[k] for k in CAMERA_LABELS}, compared=len(both),
                   agreement=round(float(np.mean([c["flow"] == c["pose"] for c in both])), 4),
                   pan_sign_agreement=round(float(np.mean([c["flow"] == c["pose"] for c in pans])), 4) if pans else None,
                   confusion={p: {f: sum(1 for c in both if c["pose"] == p and c["flow"] == f) for f in CAMERA_LABELS}
                              for p in CAMERA_LABELS})
    return out


def write_report(folder: Path, tally: Tally, writer) -> dict:
    p = tally.plan
    kept = len(writer)
    report = {
        "source": {"kind": p.kind, "path": str(p.path.resolve()), "sources": p.count},
        "settings": {"fps": p.fps, "resolution": f"{p.size[1]}x{p.size[0]}", "min_seconds": p.cfg.min_seconds,
                     "max_seconds": p.cfg.max_seconds, "min_frames": p.min_frames, "max_frames": p.max_frames,
                     "clip_frames": p.cfg.clip_frames, "max_windows": p.cfg.max_windows},
        "thresholds": asdict(p.cfg.thresholds),
        "stages": tally.stages(),
        "scenes": tally.scene_list(),
        "kept": kept,
        "dropped_clips": tally.candidates - kept,
        "camera": camera_stats(tally.camera),
        "scores": _score_summary(tally),
        "stand_ins": STAND_INS,
    }
    (folder / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    figures = folder / "figures"
    figures.mkdir()
    _histograms(figures, tally)
    picks = sorted({int(i) for i in np.linspace(0, kept - 1, min(kept, KEPT_SHOWN)).round()})
    kept_rows = [(f"clip {i}: {tally.kept_labels[i]}", writer.frames(i)[np.linspace(
        0, p.cfg.clip_frames - 1, 4).round().astype(int)]) for i in picks]
    write_png(figures / "contact_kept.png", contact_sheet(kept_rows))
    dropped_rows = [row for key in sorted(tally.examples) for row in tally.examples[key]]
    if dropped_rows:
        write_png(figures / "contact_dropped.png", contact_sheet(dropped_rows))
    (folder / "report.md").write_text(markdown(report, bool(dropped_rows)))
    return report


def _score_summary(tally: Tally) -> dict:
    out = {}
    for key in ("motion", "luma", "sharpness", "contrast"):
        v = np.array([s[key] for s in tally.scores], float)
        if len(v):
            out[key] = {q: round(float(np.percentile(v, p)), 4) for q, p in
                        (("min", 0), ("p5", 5), ("median", 50), ("p95", 95), ("max", 100))}
    return out


def _histograms(figures: Path, tally: Tally) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = tally.plan.cfg.thresholds
    kept = np.array([d == "kept" for d in tally.decisions])
    for key, title, lines in (("motion", "motion score (mean flow, px/frame at 128 px wide)",
                               [(t.min_motion, "--min-motion"), (t.max_motion, "--max-motion")]),
                              ("sharpness", "quality score (Laplacian variance at 128 px wide)", []),
                              ("luma", "mean luma (0-255)", [(t.dark_luma, "--dark-luma")])):
        v = np.array([s[key] for s in tally.scores], float)
        fig, ax = plt.subplots(figsize=(6, 3.2))
        bins = np.histogram_bin_edges(v, bins=30) if len(v) else 10
        ax.hist(v, bins=bins, color="#bbbbbb", label="all candidate clips")
        ax.hist(v[kept], bins=bins, color="#3b7dd8", label="kept")
        for x, name in lines:
            ax.axvline(x, color="#d83b3b", linestyle="--")
            ax.text(x, ax.get_ylim()[1] * 0.95, f" {name}", color="#d83b3b", fontsize=7, va="top")
        ax.set_xlabel(title)
        ax.set_ylabel("clips")
        ax.legend(fontsize=7)
        fig.tight_layout()
        write_figure(figures / f"hist_{key}.png", fig)


def contact_sheet(rows: list[tuple[str, np.ndarray]], thumb_width: int = 96) -> np.ndarray:
    """Rows of (label, (k, H, W, 3) uint8 frames) -> one (H', W', 3) uint8 picture, a label above each row."""
    from PIL import Image, ImageDraw, ImageFont

    k, h, w = rows[0][1].shape[:3]
    tw, th = thumb_width, max(1, round(h * thumb_width / w))
    band = 14
    sheet = Image.new("RGB", (max(k * (tw + 2) + 2, 360), len(rows) * (th + band + 4) + 2), (32, 32, 32))
    draw, font = ImageDraw.Draw(sheet), ImageFont.load_default(size=10)
    for r, (label, frames) in enumerate(rows):
        y = r * (th + band + 4) + 2
        draw.text((3, y), label[:90], fill=(255, 230, 120), font=font)
        for j, f in enumerate(frames):
            sheet.paste(Image.fromarray(f).resize((tw, th), Image.Resampling.BILINEAR), (2 + j * (tw + 2), y + band))
    return np.asarray(sheet)


def markdown(r: dict, has_dropped: bool) -> str:
    s = r["settings"]
    lines = [f"# Curation report: {r['source']['path']}", "",
             f"{r['source']['kind']}, {r['source']['sources']} source(s); clips of {s['clip_frames']} frames at "
             f"{s['fps']:g} fps, {s['resolution']}; scenes of {s['min_seconds']:g}-{s['max_seconds']:g} s "
             f"(GameGen-X §3.2). **{r['kept']} clips kept**, {r['dropped_clips']} candidate clips dropped.", "",
             "| stage | in | dropped | out | reasons |", "|---|---|---|---|---|"]
    for st in r["stages"]:
        why = ", ".join(f"{k}: {n}" for k, n in st["reasons"].items())
        lines.append(f"| {st['stage']} | {st['in']} {st['unit']}s | {st['dropped']} | {st['out']} {st['out_unit']}s | {why} |")
    lines += ["", "## Thresholds", "", "| name | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in r["thresholds"].items()]
    cam = r["camera"]
    lines += ["", "## Camera motion", "", "| label | from flow | from pose |", "|---|---|---|"]
    lines += [f"| {k} | {cam['flow'][k]} | {cam['pose'][k] if cam['pose'] else '-'} |" for k in CAMERA_LABELS]
    if cam["agreement"] is not None:
        lines += ["", f"Flow and pose labels agree on {cam['agreement']:.0%} of {cam['compared']} clips; where both "
                  f"say pan, the direction agrees on "
                  + (f"{cam['pan_sign_agreement']:.0%}." if cam["pan_sign_agreement"] is not None else "none.")]
    lines += ["", "## What stands in for the paper's models", ""]
    lines += [f"- {k}: {v}" for k, v in r["stand_ins"].items()]
    lines += ["", "## Figures", "", "![motion](figures/hist_motion.png) ![quality](figures/hist_sharpness.png) "
              "![luma](figures/hist_luma.png)", "", "Kept clips:", "", "![kept](figures/contact_kept.png)"]
    if has_dropped:
        lines += ["", "Dropped clips (a few per reason):", "", "![dropped](figures/contact_dropped.png)"]
    return "\n".join(lines) + "\n"
