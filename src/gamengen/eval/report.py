"""`gamengen eval`: every measure of one world model on held-out play, as markdown + HTML + JSON.

The report is built as a list of blocks (headings, paragraphs, tables, pictures) and rendered twice:
``report.md`` with the pictures as PNG files beside it, and ``report.html`` with them inlined, so
the HTML is one self-contained file to mail or attach. ``report.json`` holds every number.
"""

from __future__ import annotations

import base64
import html
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_figure, write_json_atomic, write_png
from .rollout import RolloutConfig, action_following, autoregressive, long_rollout
from .teacher_forced import TeacherForcedConfig, teacher_forced

# Paper §5.1 (DOOM, 5 levels, TPU-scale model), for the "paper" column.
PAPER = {"tf_psnr": 29.43, "tf_lpips": 0.249, "fvd16": 114.02, "fvd32": 186.23}


@dataclass
class EvalConfig:
    ddim_steps: int | None = None  # None: the model's (4, or 1 for a distilled model)
    teacher_forced: TeacherForcedConfig = field(default_factory=TeacherForcedConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    i3d: str | None = None  # TorchScript I3D for FVD; None = eval/fvd.default_i3d_path()
    runtime: str = "onnx"  # engine/world.py EngineConfig.runtime; "torch" is the fp32 reference


def work(cfg: EvalConfig, n_actions: int) -> int:
    """World steps the whole evaluation takes (for the progress bar)."""
    r = cfg.rollout
    return cfg.teacher_forced.samples + r.episodes * r.steps + r.long_steps + r.action_contexts * n_actions


def evaluate(model_dir, data, cfg: EvalConfig, report=lambda n: None) -> dict:
    from ..engine.world import EngineConfig, NeuralWorld
    from .fvd import fvd, load_i3d
    from .heldout import heldout_episodes
    from .metrics import perceptual

    world = NeuralWorld(model_dir, EngineConfig(steps=cfg.ddim_steps, runtime=cfg.runtime))
    store, held = heldout_episodes(world.meta, data)
    lpips, lpips_why = perceptual()
    t0 = time.time()
    res = {"model": str(model_dir), "data": str(data), "config": asdict(cfg), "env_id": world.meta.env_id,
           "context": world.context, "ddim_steps": world.steps,
           "guidance": world.guidance, "train_steps": world.meta.train_steps,
           "lpips": lpips_why or "AlexNet LPIPS (torchmetrics)"}
    res["teacher_forced"] = teacher_forced(world, store, held, cfg.teacher_forced, lpips, report)
    if cfg.rollout.steps:
        res["autoregressive"] = autoregressive(world, store, held, cfg.rollout, lpips, report)
    if cfg.rollout.long_steps:
        res["long_rollout"] = long_rollout(world, store, held, cfg.rollout, report)
    if cfg.rollout.action_contexts:
        res["action_following"] = action_following(world, store, held, cfg.rollout, report)
    detector, why = load_i3d(cfg.i3d)
    res["fvd"] = {"note": why}
    clips = res.get("autoregressive", {}).get("clips", [])
    for T in (16, 32):
        if detector is not None and clips and len(clips[0][0]) >= T:
            real, fake = np.stack([c[0][:T] for c in clips]), np.stack([c[1][:T] for c in clips])
            res["fvd"][f"fvd{T}"] = fvd(detector, real, fake)
    res["fvd"]["n_clips"] = len(clips)
    res["seconds"] = time.time() - t0
    return res


# ---- rendering ----

def _fmt(s: dict, digits: int = 2) -> str:
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}" if s.get("n") else "unavailable"


def _strip_image(rows: list[np.ndarray]) -> np.ndarray:
    pad = [np.pad(r, ((2, 2), (2, 2), (0, 0)), constant_values=255) for r in rows]
    width = max(p.shape[1] for p in pad)
    return np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1]), (0, 0)), constant_values=255) for p in pad])


def _plot_autoregressive(ar: dict, ae_psnr: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("PSNR (dB) ↑", "model", "frozen")] + ([("LPIPS ↓", "model_lpips", "frozen_lpips")]
                                                    if "model_lpips" in ar else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.6), squeeze=False)
    steps = np.arange(1, ar["steps"] + 1)
    for ax, (title, model, frozen) in zip(axes[0], panels):
        mu, sd = np.asarray(ar[model]["mean"]), np.asarray(ar[model]["std"])
        ax.plot(steps, mu, label="model")
        ax.fill_between(steps, mu - sd, mu + sd, alpha=0.2)
        ax.plot(steps, ar[frozen]["mean"], "--", label="frozen start frame")
        if model == "model" and ae_psnr is not None:
            ax.axhline(ae_psnr, color="gray", lw=0.8, label="AE ceiling (teacher-forced)")
        ax.set_xlabel("autoregressive step")
        ax.set_title(title)
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)


def _plot_long(lr: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = np.asarray(lr["stats"])
    k = max(1, len(s) // 200)  # a running mean keeps 10,000 steps readable
    smooth = np.stack([np.convolve(s[:, i], np.ones(k) / k, mode="valid") for i in range(s.shape[1])], axis=1)
    x = np.arange(len(smooth)) + k
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
    for i, ax in enumerate(axes):
        ax.axhspan(lr["real"]["p1"][i], lr["real"]["p99"][i], color="green", alpha=0.12,
                   label="real frames, 1st-99th percentile")
        ax.axhline(lr["real"]["mean"][i], color="green", lw=0.8)
        ax.plot(x, smooth[:, i], label=f"rollout (running mean of {k})")
        ax.set_title(lr["stat_names"][i])
        ax.set_xlabel("autoregressive step")
        ax.set_xscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)


def blocks_of(res: dict, out: Path, command: str | None) -> list[tuple]:
    """The report's content, section by section; writes its pictures into ``out``."""
    return (_header(res, command) + _teacher_forced(res, out) + _autoregressive(res, out) + _fvd(res)
            + _long_rollout(res, out) + _action_following(res))


def _header(res: dict, command: str | None) -> list[tuple]:
    b: list[tuple] = [("h1", f"World model evaluation: {res['env_id']}")]
    b.append(("p", f"Model `{res['model']}` (context {res['context']}, {res['train_steps']} training steps), "
                   f"held-out episodes of `{res['data']}`, {res['ddim_steps']} DDIM steps, CFG weight {res['guidance']}, "
                   f"{res['config'].get('runtime', 'torch')} runtime. "
                   f"LPIPS: {res['lpips']}. Took {res['seconds'] / 60:.1f} min."))
    if command:
        b.append(("code", command))
    return b


def _teacher_forced(res: dict, out: Path) -> list[tuple]:
    """One step from the real history (paper §5.1), beside copy-last and the AE ceiling."""
    b: list[tuple] = []
    tf = res["teacher_forced"]
    b.append(("h2", "Teacher-forced (one step from the real history; paper §5.1)"))
    rows = []
    for name in ("all", "moving"):
        r = tf[name]
        label = "all frames" if name == "all" else f"moving frames (copy-last < {tf['moving_db']:.0f} dB)"
        rows.append([label, str(r["model"].get("n", 0)), _fmt(r["model"]), _fmt(r["copy_last"]), _fmt(r["ae"]),
                     _fmt(r["model_ssim"], 3), _fmt(r["model_lpips"], 3), _fmt(r["copy_last_lpips"], 3)])
    for action, r in sorted(tf.get("moving_by_action", {}).items()):
        rows.append([f"moving, action {action}", str(r["model"].get("n", 0)), _fmt(r["model"]), _fmt(r["copy_last"]),
                     _fmt(r["ae"]), "", "", ""])
    rows.append(["paper (DOOM, TPU-scale model)", "", f"{PAPER['tf_psnr']}", "", "", "", f"{PAPER['tf_lpips']}", ""])
    b.append(("table", ["frames", "n", "model PSNR", "copy-last PSNR", "AE ceiling PSNR", "model SSIM",
                        "model LPIPS", "copy-last LPIPS"], rows))
    if tf["strips"]:
        write_png(out / "teacher_forced.png", _strip_image(tf["strips"]))
        b.append(("img", "teacher_forced.png", "each row: last context frame | truth | prediction"))
    return b


def _autoregressive(res: dict, out: Path) -> list[tuple]:
    """The model on its own frames (paper Fig. 6), beside the frozen start frame."""
    b: list[tuple] = []
    tf = res["teacher_forced"]
    ar = res.get("autoregressive")
    if ar and "model" in ar:
        b.append(("h2", f"Autoregressive ({ar['steps']} steps on the model's own frames, real actions; paper Fig. 6)"))
        m, f = ar["model"]["mean"], ar["frozen"]["mean"]
        marks = [s for s in (1, 2, 4, 8, 16, 32, 64, 128, 256) if s <= ar["steps"]]
        b.append(("table", ["step"] + [str(s) for s in marks],
                  [["model PSNR"] + [f"{m[s - 1]:.2f}" for s in marks],
                   ["frozen start frame PSNR"] + [f"{f[s - 1]:.2f}" for s in marks]]
                  + ([["model LPIPS"] + [f"{ar['model_lpips']['mean'][s - 1]:.3f}" for s in marks]]
                     if "model_lpips" in ar else [])))
        _plot_autoregressive(ar, tf["all"]["ae"].get("mean"), out / "autoregressive.png")
        b.append(("img", "autoregressive.png", f"mean over {ar['episodes']} held-out starts"))
        strip_rows = []
        for s in ar["strips"]:
            strip_rows += [np.concatenate(list(s["truth"]), axis=1), np.concatenate(list(s["model"]), axis=1)]
        if strip_rows:
            write_png(out / "autoregressive_strip.png", _strip_image(strip_rows))
            steps = ", ".join(str(s) for s in ar["strips"][0]["steps"])
            b.append(("img", "autoregressive_strip.png", f"pairs of rows: truth, then model, at steps {steps}"))
    elif ar:
        b.append(("p", f"Autoregressive: {ar['unavailable']}."))
    return b


def _fvd(res: dict) -> list[tuple]:
    """FVD of autoregressive clips, or why it is unavailable."""
    b: list[tuple] = []
    fv = res["fvd"]
    b.append(("h2", "FVD (autoregressive clips vs the real ones; paper §5.1)"))
    if "fvd16" in fv:
        b.append(("table", ["frames", "ours", "paper", "clips"],
                  [[str(T), f"{fv[f'fvd{T}']:.1f}" if f"fvd{T}" in fv else "unavailable", str(PAPER[f"fvd{T}"]),
                    str(fv["n_clips"])] for T in (16, 32)]))
        b.append(("p", "FVD from a handful of clips is noisy and biased upwards; the paper used 512."))
    else:
        b.append(("p", f"FVD {fv['note']}. Paper: {PAPER['fvd16']} (16 frames), {PAPER['fvd32']} (32 frames)."))
    return b


def _long_rollout(res: dict, out: Path) -> list[tuple]:
    """The long rollout's frame statistics against the real frames' range."""
    b: list[tuple] = []
    lr = res.get("long_rollout")
    if lr:
        b.append(("h2", f"Long rollout ({lr['steps']:,} steps): does it stay in the real frames' range?"))
        names = lr["stat_names"]
        rows = [["real frames (mean)"] + [f"{v:.1f}" for v in lr["real"]["mean"]] + [""]]
        for w in lr["windows"][:1] + lr["windows"][-1:]:
            rows.append([f"steps {w['from'] + 1}-{w['to']}"] + [f"{v:.1f} (z {z:+.1f})" for v, z in
                                                                zip(w["mean"], w["z"])] + [f"{w['inside']:.0%}"])
        b.append(("table", ["frames"] + names + ["frames inside the real 1-99% range (all three)"], rows))
        b.append(("p", "z: distance of the window's mean from the real frames' mean, in real standard deviations. "
                       "A rollout that collapses to a flat or blurred picture shows as contrast and sharpness "
                       "falling far below the real range."))
        sb = lr.get("status_bar_db")
        if sb and sb["real"].get("n"):
            b.append(("p", "Drift statistic: PSNR of the status bar against the closest real status bar of "
                           f"held-out frames. Real frames of other episodes score a median {sb['real']['median']:.1f} dB "
                           f"(10th percentile {sb['real']['p10']:.1f}; identical bars count as 100); "
                           "the rollout, mean of the 10 steps ending at step "
                      + ", ".join(f"{k} ({int(k) / sb['fps']:.0f} s): {v:.1f} dB" for k, v in sb["at"].items())
                      + "."))
        _plot_long(lr, out / "long_rollout.png")
        b.append(("img", "long_rollout.png", "frame statistics over the rollout against the real frames' range"))
        write_png(out / "long_rollout_strip.png", np.concatenate([f for _, f in lr["snapshots"]], axis=1))
        b.append(("img", "long_rollout_strip.png",
                  "frames at steps " + ", ".join(f"{s:,}" for s, _ in lr["snapshots"])
                  + (f" ({sb['fps']:g} steps per second of play)" if sb else "")))
    return b


def _action_following(res: dict) -> list[tuple]:
    """Whether the true action gives the prediction closest to the truth."""
    b: list[tuple] = []
    af = res.get("action_following")
    if af:
        b.append(("h2", "Action following: does the model tell the actions apart?"))
        mov = f"{af['accuracy_moving']:.0%}" if af["accuracy_moving"] is not None else "n/a"
        b.append(("table", ["contexts", "actions", "chance", "true action closest to truth",
                            "on moving frames", "PSNR(true) - mean PSNR(other actions)"],
                  [[str(af["contexts"]), str(af["actions"]), f"{af['chance']:.0%}", f"{af['accuracy']:.0%}",
                    f"{mov} (n={af['moving']})", _fmt(af["margin_db"]) + " dB"]]))
        b.append(("p", "For each held-out context the model predicts the next frame once per action, with the "
                       "same noise; a hit is when the prediction closest to the real next frame (PSNR) is the one "
                       "made with the action really taken. Actions with the same visible effect (e.g. firing "
                       "with no ammo) make 100% unreachable."))
    return b


def render_md(blocks: list[tuple]) -> str:
    lines = []
    for kind, *a in blocks:
        if kind in ("h1", "h2"):
            lines += [("# " if kind == "h1" else "## ") + a[0], ""]
        elif kind == "p":
            lines += [a[0], ""]
        elif kind == "code":
            lines += ["```", a[0], "```", ""]
        elif kind == "table":
            head, rows = a
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
        elif kind == "img":
            lines += [f"![{a[1]}]({a[0]})", "", f"*{a[1]}*", ""]
    return "\n".join(lines)


def render_html(blocks: list[tuple], out: Path) -> str:
    e = html.escape
    body = []
    for kind, *a in blocks:
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{e(a[0])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{e(a[0])}</p>")
        elif kind == "code":
            body.append(f"<pre>{e(a[0])}</pre>")
        elif kind == "table":
            head, rows = a
            body.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
                        + "</table>")
        elif kind == "img":
            data = base64.b64encode((out / a[0]).read_bytes()).decode()
            body.append(f'<figure><img alt="{e(a[1])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{e(a[1])}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}"
             "img{max-width:100%;image-rendering:pixelated}figcaption{font-size:90%;color:#555}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>gamengen eval</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def _jsonable(res: dict) -> dict:
    """The numbers only: pictures and clips stay out of report.json."""
    drop = {"strips", "clips", "snapshots"}

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if k not in drop}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return clean(res)


def write_report(res: dict, out: str | Path, command: str | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    blocks = blocks_of(res, out, command)
    write_bytes_atomic(out / "report.md", render_md(blocks).encode())
    write_bytes_atomic(out / "report.html", render_html(blocks, out).encode())
    write_json_atomic(out / "report.json", _jsonable(res))
    return out

