"""`gamengen ablate`: the paper's four ablations (§5.2, Tables 1-2, Fig. 7) at a CPU budget.

- ``context``: one model per context length N; teacher-forced PSNR against N (Table 1).
- ``noise-aug``: the same model with and without context noise augmentation; autoregressive PSNR
  per step (Fig. 7: without it, quality collapses after 10-20 frames).
- ``data-policy``: the same frame budget of agent and of random play; the frame after about 3 s of
  autoregressive play, split by how far the player is from where the episode began (Table 2).
- ``steps``: one trained model sampled with 1, 2, 4, 8 and 64 DDIM steps, teacher-forced (§5.2).

Each variant trains into ``<out>/<variant>/`` with `gamengen train`'s own code, so an interrupted
ablation resumes where it stopped when the same command is run again. Models are small (a preset,
a step budget and a frame budget are the arguments), so the magnitudes are not the paper's; the
report says which way each result points.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_figure, write_json_atomic
from ..errors import UserError
from .heldout import context_at
from .metrics import psnr, summary
from .rollout import RolloutConfig, autoregressive
from .teacher_forced import TeacherForcedConfig, teacher_forced

KINDS = ("context", "noise-aug", "data-policy", "steps")
DEFAULT_VALUES = {"context": [1, 2, 4, 8, 16, 32, 64], "steps": [1, 2, 4, 8, 64], "noise-aug": ["on", "off"],
                  "data-policy": ["agent", "random"]}


def variants(kind: str, values: list | None) -> list:
    return values if values and kind in ("context", "steps") else DEFAULT_VALUES[kind]


@dataclass
class AblationConfig:
    preset: str = "tiny"
    train_steps: int = 1500  # per trained variant
    max_frames: int | None = 20_000  # training frames per variant (the same subset for every variant)
    samples: int = 64  # teacher-forced frames per variant
    episodes: int = 16  # autoregressive starts per variant
    ar_steps: int = 64  # noise-aug: steps per start
    horizon_s: float = 3.0  # data-policy: seconds of autoregressive play before the measured frame
    context: int = 64  # noise-aug and data-policy models
    seed: int = 0


def _train(data, ae, out: Path, cfg: AblationConfig, report, **changes) -> Path:
    from ..train.world_model import TrainConfig, train

    tc = TrainConfig.from_preset(cfg.preset, steps=cfg.train_steps, max_frames=cfg.max_frames, seed=cfg.seed,
                                 checkpoint_every=max(50, cfg.train_steps // 10), sample_every=0, **changes)
    done = [0]

    def tick(step, total, loss):
        report(step - done[0])
        done[0] = step

    train(data, ae, out, tc, tick)
    return out / "model"


def _world(model: Path, ddim_steps: int = 4):
    from ..engine.world import EngineConfig, NeuralWorld

    # Play's fast path gives the reference path's frames (to ~1e-5, tests/test_world_model.py) at
    # 2-3x the speed; its graph unrolls every DDIM step, so 64 steps take the eager path instead.
    return NeuralWorld(model, EngineConfig(steps=ddim_steps, runtime="onnx" if ddim_steps <= 8 else "torch"))


def horizon_steps(cfg: AblationConfig, fps: float) -> int:
    """data-policy: autoregressive steps before the measured frame (the paper's 3 s)."""
    return max(1, round(cfg.horizon_s * fps))


def work(kind: str, values: list, cfg: AblationConfig, fps: float) -> int:
    """Units of the progress bar: training steps plus world-model steps."""
    if kind == "steps":
        return len(values) * cfg.samples
    if kind == "context":
        return len(values) * (cfg.train_steps + cfg.samples)
    if kind == "data-policy":  # every model plays every test example, half from each store
        return len(values) * (cfg.train_steps + cfg.episodes // 2 * 2 * horizon_steps(cfg, fps))
    return len(values) * (cfg.train_steps + cfg.episodes * cfg.ar_steps)


def ablate(kind: str, out: str | Path, cfg: AblationConfig, data: dict[str, str], ae: str | None = None,
           model: str | None = None, values: list | None = None, report=lambda n: None) -> dict:
    """``data`` maps a name to a store (one store, or ``agent`` and ``random`` for data-policy)."""
    from .heldout import heldout_episodes

    if kind not in KINDS:
        raise UserError(f"unknown ablation '{kind}'", "use one of: " + ", ".join(KINDS))
    out = Path(out)
    values = variants(kind, values)
    t0 = time.time()
    res = {"kind": kind, "config": asdict(cfg), "data": data, "ae": ae, "model": model, "rows": []}
    store_path = next(iter(data.values()))
    if kind == "steps":
        if not model:
            raise UserError("the steps ablation samples an existing model", "pass --model MODEL_DIR")
        for s in values:
            world = _world(Path(model), int(s))
            store, held = heldout_episodes(world.meta, store_path)
            tf = teacher_forced(world, store, held, TeacherForcedConfig(cfg.samples, cfg.seed), report=report)
            res["rows"].append({"value": int(s), "psnr": tf["all"]["model"], "ssim": tf["all"]["model_ssim"],
                                "copy_last": tf["all"]["copy_last"]})
    elif kind == "context":
        for n in values:
            m = _train(store_path, ae, out / f"context-{n}", cfg, report, context=int(n))
            world = _world(m)
            store, held = heldout_episodes(world.meta, store_path)
            tf = teacher_forced(world, store, held, TeacherForcedConfig(cfg.samples, cfg.seed), report=report)
            res["rows"].append({"value": int(n), "psnr": tf["all"]["model"], "ssim": tf["all"]["model_ssim"],
                                "copy_last": tf["all"]["copy_last"]})
    elif kind == "noise-aug":
        from ..diffusion.denoiser import DenoiserConfig

        for name, level in (("on", DenoiserConfig().max_noise_level), ("off", 0.0)):
            m = _train(store_path, ae, out / f"noise-aug-{name}", cfg, report, context=cfg.context,
                       denoiser=DenoiserConfig(max_noise_level=level))
            world = _world(m)
            store, held = heldout_episodes(world.meta, store_path)
            ar = autoregressive(world, store, held, RolloutConfig(cfg.episodes, cfg.ar_steps, 0, 0, cfg.seed),
                                report=report)
            if "model" not in ar:
                raise UserError(f"noise-aug ablation: {ar['unavailable']}", "pass a smaller --ar-steps")
            res["rows"].append({"value": name, "max_noise_level": level, "curve": ar["model"]["mean"],
                                "std": ar["model"]["std"], "frozen": ar["frozen"]["mean"]})
    else:  # data-policy
        if set(data) != {"agent", "random"}:
            raise UserError("the data-policy ablation needs two stores", "pass --data agent=STORE --data random=STORE")
        res["rows"] = data_policy(data, ae, out, cfg, report)
    res["seconds"] = time.time() - t0
    write_ablation(res, out)
    return res


def data_policy(data: dict[str, str], ae, out: Path, cfg: AblationConfig, report) -> list[dict]:
    """Train on each policy's data; test both on the pooled held-out episodes of the two stores."""
    from .heldout import heldout_episodes

    models = {name: _train(path, ae, out / f"data-{name}", cfg, report, context=cfg.context)
              for name, path in data.items()}
    worlds = {name: _world(m) for name, m in models.items()}
    any_world = next(iter(worlds.values()))
    K = horizon_steps(cfg, any_world.meta.fps)
    # the same test examples for both models: (store, record, start t0), drawn once
    rng = np.random.default_rng(cfg.seed)
    examples = []
    for path in data.values():
        store, held = heldout_episodes(any_world.meta, path, min_length=K + 2)
        for _ in range(cfg.episodes // 2):
            rec = held[int(rng.integers(len(held)))]
            examples.append((store, rec, int(rng.integers(1, rec.length - K))))
    dist = [distance_from_start(store, rec, t0 + K) for store, rec, t0 in examples]
    unit = "map units" if {"POSITION_X", "POSITION_Y"} <= set(examples[0][0].spec.variables) else "frames"
    cuts = np.quantile(dist, [1 / 3, 2 / 3])
    groups = ["easy" if d <= cuts[0] else "medium" if d <= cuts[1] else "hard" for d in dist]
    rows = []
    for name, world in worlds.items():
        first, scores = [], []  # PSNR of the first predicted frame (the paper's single-frame figure), of the last
        for i, (store, rec, t0) in enumerate(examples):
            frames, past = context_at(store, rec, t0, world.context)
            g = store.open_episode(rec)
            world.reset(frames, past, seed=cfg.seed * 7919 + i)
            for k, a in enumerate(np.asarray(g["actions"][t0:t0 + K], np.int64)):
                pred = world.step(int(a))
                if k == 0:
                    first.append(psnr(pred, np.asarray(g["frames"][t0 + 1])))
            scores.append(psnr(pred, np.asarray(g["frames"][t0 + K])))
            report(K)
        for grp in ("easy", "medium", "hard", "all"):
            sel = [j for j, g in enumerate(groups) if grp in ("all", g)]
            # per-example scores too: both models play the same examples, so their difference is paired
            rows.append({"value": name, "group": grp, "psnr": summary(scores[j] for j in sel),
                         "psnr_first": summary(first[j] for j in sel), "scores": [scores[j] for j in sel],
                         "first": [first[j] for j in sel],
                         "distance": [float(cuts[0]), float(cuts[1])], "unit": unit, "horizon_steps": K})
    return rows


def paired(rows: list[dict], group: str, key: str) -> str:
    """Agent minus random over the same examples: mean ± standard error."""
    a, r = (np.asarray(next(x[key] for x in rows if x["group"] == group and x["value"] == v))
            for v in ("agent", "random"))
    d = a - r
    return f"{d.mean():+.2f} ± {d.std(ddof=1) / np.sqrt(len(d)):.2f} dB" if len(d) > 1 else "n/a"


def distance_from_start(store, rec, t: int) -> float:
    """Map units between the player's position at frame t and at the episode's first frame; stores
    without positions fall back to frames since the start."""
    names = store.spec.variables
    if {"POSITION_X", "POSITION_Y"} <= set(names):
        v = np.asarray(store.open_episode(rec)["game_variables"][[0, t]])
        ix, iy = names.index("POSITION_X"), names.index("POSITION_Y")
        return float(np.hypot(v[1, ix] - v[0, ix], v[1, iy] - v[0, iy]))
    return float(t)


# ---- report ----

PAPER_CONTEXT = {64: 22.36, 32: 22.31, 16: 22.28, 8: 22.26, 4: 22.26, 2: 22.03, 1: 20.94}  # Table 1, PSNR
PAPER_STEPS = {1: 25.47, 2: 31.91, 4: 32.58, 8: 32.55, 64: 32.19}  # App. A.4, teacher-forced PSNR
PAPER_POLICY = {("easy", "agent"): 20.94, ("easy", "random"): 20.20, ("medium", "agent"): 20.21,
                ("medium", "random"): 16.50, ("hard", "agent"): 17.51, ("hard", "random"): 15.39,  # Table 2
                ("all", "agent"): 19.02, ("all", "random"): 16.84}  # §5.2.3, after 3 s
PAPER_POLICY_FIRST = {"agent": 25.06, "random": 24.42}  # §5.2.3, single frame


def write_ablation(res: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    kind, rows = res["kind"], res["rows"]
    fmt = lambda s: f"{s['mean']:.2f} ± {s['std']:.2f}" if s.get("n") else "n/a"  # noqa: E731
    lines = [f"# Ablation: {kind}", "", f"Config: `{res['config']}`; data {res['data']}; "
             f"{res['seconds'] / 60:.1f} min.", ""]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    if kind in ("context", "steps"):
        label = "context frames N" if kind == "context" else "DDIM steps"
        paper, source = (PAPER_CONTEXT, "paper Table 1") if kind == "context" else (PAPER_STEPS, "paper App. A.4")
        lines += [f"| {label} | PSNR (teacher-forced) | SSIM | copy-last PSNR | paper PSNR |", "|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['value']} | {fmt(r['psnr'])} | {fmt(r['ssim'])} | {fmt(r['copy_last'])} | "
                         f"{paper.get(r['value'], '')} |")
        xs = [r["value"] for r in rows]
        ax.errorbar(xs, [r["psnr"]["mean"] for r in rows], yerr=[r["psnr"]["std"] / np.sqrt(r["psnr"]["n"])
                                                                 for r in rows], marker="o", capsize=3,
                    label="ours (± s.e.)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(label)
        ax.set_ylabel("teacher-forced PSNR (dB)")
        # The paper's steps table sits ~10 dB above our small model: on its own axis, to compare shapes.
        axp = ax.twinx() if kind == "steps" else ax
        axp.plot(xs, [paper.get(x, np.nan) for x in xs], "s--", color="C1", label=source)
        if axp is not ax:
            axp.set_ylabel("paper PSNR (dB)", color="C1")
    elif kind == "noise-aug":
        marks = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= len(rows[0]["curve"])]
        lines += ["| noise augmentation | " + " | ".join(f"step {s}" for s in marks) + " |",
                  "|---|" + "---|" * len(marks)]
        for r in rows:
            lines.append(f"| {r['value']} (max level {r['max_noise_level']}) | "
                         + " | ".join(f"{r['curve'][s - 1]:.2f}" for s in marks) + " |")
            steps = np.arange(1, len(r["curve"]) + 1)
            ax.plot(steps, r["curve"], label=f"noise augmentation {r['value']}")
        ax.plot(steps, rows[0]["frozen"], ":", color="gray", label="frozen start frame")
        ax.set_xlabel("autoregressive step")
        ax.set_ylabel("PSNR (dB)")
    else:
        K = rows[0]["horizon_steps"]
        lines += [f"| group | policy | n | PSNR, first frame | paper | PSNR after {K} steps | paper |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['group']} | {r['value']} | {r['psnr'].get('n', 0)} | {fmt(r['psnr_first'])} | "
                         f"{PAPER_POLICY_FIRST.get(r['value'], '') if r['group'] == 'all' else ''} | "
                         f"{fmt(r['psnr'])} | {PAPER_POLICY.get((r['group'], r['value']), '')} |")
        groups = ["easy", "medium", "hard", "all"]
        lines += ["", "| group | agent − random, first frame | agent − random, after the horizon |", "|---|---|---|"]
        lines += [f"| {g} | {paired(rows, g, 'first')} | {paired(rows, g, 'scores')} |" for g in groups]
        for j, (pol, key) in enumerate([(p, k) for k in ("psnr_first", "psnr") for p in ("agent", "random")]):
            ys = [next((r[key].get("mean", np.nan) for r in rows if r["group"] == g and r["value"] == pol), np.nan)
                  for g in groups]
            when = "first frame" if key == "psnr_first" else f"after {K} steps"
            ax.bar(np.arange(4) + 0.2 * j, ys, width=0.2, color=f"C{j % 2}", alpha=1.0 if key == "psnr" else 0.45,
                   label=f"{pol}, {when}")
        ax.set_xticks(np.arange(4) + 0.3, groups)
        ax.set_ylabel("PSNR (dB)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # room for the legend above the bars
        lines += ["", f"Groups by distance from the episode's start: easy ≤ {rows[0]['distance'][0]:.0f}, "
                      f"medium ≤ {rows[0]['distance'][1]:.0f}, hard beyond ({rows[0]['unit']} from the start; terciles "
                      "of the test set)."]
    handles = [h for a in fig.axes for h in zip(*a.get_legend_handles_labels())]  # both axes of a twin plot
    ax.legend(*zip(*handles), fontsize=7)
    ax.set_title(f"ablation: {kind}")
    fig.tight_layout()
    write_figure(out / "ablation.png", fig)
    lines += ["", "![ablation](ablation.png)", ""]
    write_bytes_atomic(out / "ablation.md", "\n".join(lines).encode())
    write_json_atomic(out / "ablation.json", res)

