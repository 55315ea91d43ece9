"""`gamengen agent report`: how the agent's play changed over training, and how it compares.

Every measure is computed from what the store holds (game variables per frame), so a random-policy
store made by `gamengen record` is measured exactly like the agent's own episodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_figure, write_json_atomic
from ..data.store import EpisodeRecord, Store
from ..errors import UserError
from .reward import CELL

MEASURES = ("shaped_return", "kills", "coverage")


def episode_measures(store: Store, rec: EpisodeRecord) -> dict:
    """Kills and map coverage (distinct 64x64-unit cells) of one stored episode."""
    names = store.spec.variables
    if not {"POSITION_X", "POSITION_Y", "KILLCOUNT"} <= set(names):
        raise UserError(f"store {store.root} has no position/kill variables", "record a ViZDoom map such as "
                        "vizdoom:freedoom1/E1M1")
    v = np.asarray(store.open_episode(rec)["game_variables"][:])
    x, y, k = (v[:, names.index(n)] for n in ("POSITION_X", "POSITION_Y", "KILLCOUNT"))
    cells = {(int(a // CELL), int(b // CELL)) for a, b in zip(x, y)}
    out = {"kills": int(k[-1] - k[0]), "coverage": len(cells), "frames": rec.length}
    if "shaped_return" in rec.meta:
        out["shaped_return"] = float(rec.meta["shaped_return"])
    return out


def summarize(values: list[float]) -> dict:
    a = np.asarray(values, float)
    return {"mean": float(a.mean()), "std": float(a.std()), "n": int(a.size)} if a.size else {"n": 0}


def store_summary(path: str | Path) -> dict:
    store = Store.open(path)
    eps = [episode_measures(store, r) for r in store.episodes()]
    if not eps:
        raise UserError(f"store {path} has no complete episodes", "record some first")
    return {m: summarize([e[m] for e in eps if m in e]) for m in (*MEASURES, "frames")}


def training_curve(store: Store, bins: int = 20) -> dict:
    """Mean and std of each measure over training, binned by the training step at episode start."""
    rows = [(r.meta["phase"], int(r.meta["training_step"]), episode_measures(store, r))
            for r in store.episodes() if r.meta.get("policy") == "agent"]
    if not rows:
        raise UserError(f"{store.root} holds no agent episodes", "point at a run folder made by `gamengen agent`")
    train = [(s, e) for p, s, e in rows if p == "train"]
    top = max(s for s, _ in train) + 1 if train else 1
    edges = np.linspace(0, top, bins + 1)
    curve = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = [e for s, e in train if lo <= s < hi]
        if sel:
            curve.append({"step": float((lo + hi) / 2), **{m: summarize([e[m] for e in sel]) for m in MEASURES}})
    evals = [{"step": s, **e} for p, s, e in rows if p == "eval"]
    return {"train": curve, "eval": evals, "episodes": len(rows),
            "frames": int(sum(r.length for r in store.episodes()))}


def plot(curve: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    titles = {"shaped_return": "shaped reward per episode", "kills": "kills per episode",
              "coverage": "map coverage (64x64 cells)"}
    for ax, m in zip(axes, MEASURES):
        xs = np.array([c["step"] for c in curve["train"]])
        mu = np.array([c[m]["mean"] for c in curve["train"]])
        sd = np.array([c[m]["std"] for c in curve["train"]])
        ax.plot(xs, mu, label="training episodes (mean)")
        ax.fill_between(xs, mu - sd, mu + sd, alpha=0.25, label="± std")
        if curve["eval"]:
            ax.scatter([e["step"] for e in curve["eval"]], [e[m] for e in curve["eval"]], s=10, c="k",
                       label="evaluation episodes")
        ax.set_title(titles[m])
        ax.set_xlabel("training step (game frames)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)


def fmt(s: dict) -> str:
    return f"{s['mean']:.1f} ± {s['std']:.1f} (n={s['n']})" if s.get("n") else "n/a"


def report(run: str | Path, compare: dict[str, str], out: str | Path | None = None) -> dict:
    """Write agent_report.{json,md,png} into ``out`` (default: the run folder)."""
    run = Path(run)
    store_path = run / "store" if (run / "store" / "store.json").exists() else run
    curve = training_curve(Store.open(store_path))
    table = {name: store_summary(path) for name, path in compare.items()}
    out = Path(out) if out else run
    out.mkdir(parents=True, exist_ok=True)
    result = {"run": str(run), "curve": curve, "compare": table}
    write_json_atomic(out / "agent_report.json", result)
    plot(curve, out / "agent_report.png")
    lines = [f"# Agent report: {run}", "",
             f"{curve['episodes']} recorded agent episodes, {curve['frames']:,} frames.", "",
             "![training curves](agent_report.png)", ""]
    if table:
        lines += ["| policy | map coverage (cells) | kills | shaped reward | frames/episode |",
                  "|---|---|---|---|---|"]
        lines += [f"| {n} | {fmt(t['coverage'])} | {fmt(t['kills'])} | {fmt(t['shaped_return'])} | "
                  f"{fmt(t['frames'])} |" for n, t in table.items()]
        lines.append("")
    lines += ["| training step (frames) | coverage | kills | shaped reward |", "|---|---|---|---|"]
    lines += [f"| {c['step']:,.0f} | {fmt(c['coverage'])} | {fmt(c['kills'])} | {fmt(c['shaped_return'])} |"
              for c in curve["train"]]
    write_bytes_atomic(out / "agent_report.md", ("\n".join(lines) + "\n").encode())
    return result
