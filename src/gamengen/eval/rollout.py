"""Evaluations that let the model run on its own predictions (paper §5.1, Fig. 6 and 7; docs/evaluation.md).

- ``autoregressive``: from a real held-out context, replay the episode's real actions for K steps,
  conditioning on the model's own frames, and compare step k with the real frame k. Per-frame
  metrics fall as the two trajectories drift apart even when the play looks right (paper §5.1), so
  the "frozen" baseline (the start frame shown forever) says what no motion at all would score.
- ``long_rollout``: thousands of steps, far beyond any ground truth; simple frame statistics are
  compared with the real frames' distribution to tell a stable rollout from one that collapses
  (to grey, to black, or to a blur).
- ``action_following``: from the same context and noise, predict under every action; count how often
  the prediction closest to the truth is the one made with the true action.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .heldout import context_at
from .metrics import psnr, ssim, status_bar, summary

STRIP_STEPS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class RolloutConfig:
    episodes: int = 8  # held-out starts for the autoregressive curves
    steps: int = 64  # autoregressive steps from each (paper Fig. 6: 64)
    long_steps: int = 10_000  # steps of the long rollout
    action_contexts: int = 24  # held-out contexts for action following
    seed: int = 0


def autoregressive(world, store, heldout, cfg: RolloutConfig, lpips=None, report=lambda n: None) -> dict:
    K = cfg.steps
    eligible = [r for r in heldout if r.length > K + 1]
    if not eligible:
        return {"unavailable": f"no held-out episode is longer than {K + 1} frames"}
    rng = np.random.default_rng(cfg.seed)
    picks = rng.choice(len(eligible), size=cfg.episodes, replace=len(eligible) < cfg.episodes)
    curves = {k: [] for k in ("model", "frozen", "model_ssim", "model_lpips", "frozen_lpips")}
    strips, clips = [], []
    for e, i in enumerate(picks):
        rec = eligible[int(i)]
        t0 = int(rng.integers(1, rec.length - K))
        frames, past = context_at(store, rec, t0, world.context)
        g = store.open_episode(rec)
        truth = np.asarray(g["frames"][t0 + 1:t0 + K + 1])
        actions = np.asarray(g["actions"][t0:t0 + K], np.int64)  # action t leads to frame t+1
        world.reset(frames, past, seed=cfg.seed * 7919 + e)
        preds = np.stack([world.step(int(a)) for a in actions])
        report(K)
        start = frames[-1]
        curves["model"].append([psnr(p, t) for p, t in zip(preds, truth)])
        curves["frozen"].append([psnr(start, t) for t in truth])
        curves["model_ssim"].append([ssim(p, t) for p, t in zip(preds, truth)])
        if lpips is not None:
            curves["model_lpips"].append([lpips(p, t) for p, t in zip(preds, truth)])
            curves["frozen_lpips"].append([lpips(start, t) for t in truth])
        clips.append((truth, preds))
        if e < 2:
            idx = [s - 1 for s in STRIP_STEPS if s <= K]
            strips.append({"steps": [i + 1 for i in idx], "truth": truth[idx], "model": preds[idx],
                           "episode": rec.path, "t0": t0})
    out = {"episodes": len(picks), "steps": K}
    for k, v in curves.items():
        if v:
            a = np.asarray(v)
            out[k] = {"mean": a.mean(0).tolist(), "std": a.std(0).tolist()}
    out["strips"], out["clips"] = strips, clips  # images, not JSON
    return out


def frame_stats(frames: np.ndarray) -> np.ndarray:
    """Per frame: mean brightness, contrast (std) and sharpness (mean absolute horizontal and
    vertical difference), all on 0..255 grey. A collapsing rollout drifts in one or more."""
    g = np.asarray(frames, np.float32).mean(axis=-1)
    sharp = (np.abs(np.diff(g, axis=1)).mean(axis=(1, 2)) + np.abs(np.diff(g, axis=2)).mean(axis=(1, 2))) / 2
    return np.stack([g.mean(axis=(1, 2)), g.std(axis=(1, 2)), sharp], axis=1)


STAT_NAMES = ("brightness", "contrast", "sharpness")


class StatusBarMatch:
    """Drift statistic (issue 17): PSNR of a frame's status bar against the closest real status bar
    in a bank of held-out frames. Real frames score high (the bar's layout never changes, only a
    few digits and the face do); the blob texture of a dissolved rollout scores low, whatever the
    game state, so no ground truth at step k is needed."""

    def __init__(self, bank: np.ndarray):  # bank: (N, H, W, 3) uint8 real frames
        b = status_bar(bank).reshape(len(bank), -1).astype(np.float32)
        self.bank, self.sq = b, (b * b).sum(1)

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """(n, H, W, 3) -> (n,) dB against each frame's nearest bank bar."""
        x = status_bar(frames).reshape(len(frames), -1).astype(np.float32)
        d = (x * x).sum(1)[:, None] + self.sq[None] - 2 * x @ self.bank.T  # squared distances (n, N)
        mse = np.maximum(d.min(1), 1e-6) / x.shape[1]
        return np.minimum(10 * np.log10(255.0 ** 2 / mse), 100.0)


DRIFT_AT = (100, 300, 1000)  # steps where the drift statistic is quoted (issue 17)
STRIP_SECONDS = (1, 3, 10, 30)  # play time of the long-rollout snapshots


def long_rollout(world, store, heldout, cfg: RolloutConfig, report=lambda n: None, window: int = 250) -> dict:
    """Play ``long_steps`` steps from a held-out start with held-out actions (episodes' action
    sequences one after another, so the action statistics are real play's)."""
    rng = np.random.default_rng(cfg.seed + 1)
    real = []
    for i in rng.permutation(len(heldout))[:32]:  # up to 32 episodes x 64 frames, read frame by frame
        rec = heldout[int(i)]
        g = store.open_episode(rec)
        idx = np.sort(rng.choice(rec.length, size=min(rec.length, 64), replace=False))
        real.append(np.stack([np.asarray(g["frames"][int(t)]) for t in idx]))
    # the drift statistic's bank is every other episode; the rest say what real frames score
    bars = StatusBarMatch(np.concatenate(real[::2]))
    real_bars = bars(np.concatenate(real[1::2])) if len(real) > 1 else np.zeros(0)
    real = np.concatenate([frame_stats(f) for f in real])
    lo, hi = np.percentile(real, 1, axis=0), np.percentile(real, 99, axis=0)
    acts = np.concatenate([np.asarray(store.open_episode(r)["actions"], np.int64) for r in heldout])
    rec = heldout[int(rng.integers(len(heldout)))]
    t0 = min(rec.length - 1, world.context)
    frames, actions = context_at(store, rec, t0, world.context)
    world.reset(frames, actions, seed=cfg.seed + 12345)
    snap_at = {1, 10, 100, 300, 1000, 10_000} | {max(1, round(store.spec.fps * s)) for s in STRIP_SECONDS}
    stats, bar_db, snapshots = [], [], []
    for i in range(cfg.long_steps):
        f = world.step(int(acts[i % len(acts)]))
        stats.append(frame_stats(f[None])[0])
        bar_db.append(float(bars(f[None])[0]))
        if (i + 1) in snap_at or i + 1 == cfg.long_steps:
            snapshots.append((i + 1, f))
        if (i + 1) % 50 == 0:
            report(50)
    report(cfg.long_steps % 50)
    s, bar_db = np.asarray(stats), np.asarray(bar_db)
    inside = np.all((s >= lo) & (s <= hi), axis=1)
    w = [(a, min(a + window, len(s))) for a in range(0, len(s), window)]
    return {
        "steps": int(len(s)), "window": window, "stat_names": list(STAT_NAMES),
        "real": {"p1": lo.tolist(), "p99": hi.tolist(), "mean": real.mean(0).tolist(), "frames": int(len(real))},
        # z: how many real-frame standard deviations the window's mean sits from the real mean
        "windows": [{"from": a, "to": b, "mean": s[a:b].mean(0).tolist(), "inside": float(inside[a:b].mean()),
                     "z": ((s[a:b].mean(0) - real.mean(0)) / (real.std(0) + 1e-6)).tolist()} for a, b in w],
        "inside_first": float(inside[:window].mean()), "inside_last": float(inside[-window:].mean()),
        # the drift statistic at DRIFT_AT, each the mean of the 10 steps ending there
        # (real bars often match a bank bar exactly, capped at 100 dB, so quote their median and p10)
        "status_bar_db": {"real": {**summary(real_bars), "p10": float(np.percentile(real_bars, 10))
                                   if len(real_bars) else None}, "fps": store.spec.fps,
                          "at": {str(k): float(bar_db[k - 10:k].mean()) for k in DRIFT_AT if k <= len(bar_db)}},
        "stats": s.tolist(), "snapshots": snapshots,  # snapshots are images, not JSON
    }


def action_following(world, store, heldout, cfg: RolloutConfig, report=lambda n: None) -> dict:
    rng = np.random.default_rng(cfg.seed + 2)
    n = world.n_actions
    hits, margins, rows = [], [], []
    for c in range(cfg.action_contexts):
        rec = heldout[int(rng.integers(len(heldout)))]
        t = int(rng.integers(1, rec.length))
        frames, actions = context_at(store, rec, t, world.context + 1)
        truth, true_a = frames[-1], int(actions[-1])
        world.reset(frames[:-1], actions[:-1])
        start, scores = world.state(), []
        for a in range(n):  # same context, same noise: only the action differs
            world.restore(start, seed=cfg.seed * 31 + c)
            scores.append(psnr(world.step(a), truth))
        report(n)
        best = int(np.argmax(scores))
        others = [s for a, s in enumerate(scores) if a != true_a]
        hits.append(best == true_a)
        margins.append(scores[true_a] - float(np.mean(others)))
        rows.append({"episode": rec.path, "t": t, "true": true_a, "closest": best, "psnr": scores,
                     "moving": psnr(frames[-2], truth) < 30.0})
    moving = [r for r in rows if r["moving"]]
    return {"contexts": len(rows), "actions": n, "chance": 1.0 / n, "accuracy": float(np.mean(hits)),
            "accuracy_moving": float(np.mean([r["true"] == r["closest"] for r in moving])) if moving else None,
            "moving": len(moving), "margin_db": summary(margins), "rows": rows}
