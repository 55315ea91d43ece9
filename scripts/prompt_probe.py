"""Does the encoded motion prompt still say which way the camera turns (issue 19)?

    .venv/bin/python scripts/prompt_probe.py MODEL CACHE DATASET [DATASET ...]

MODEL is a clip model folder, CACHE a folder holding its codec's latents of the clip datasets and of
their video prompts (a `clip train-instruct` run's cache/; encoded there if missing), DATASET a clip
dataset (`gamengen curate`'s output). InstructNet reads a video prompt only through the codec's
latents (§3.4: "encoded by the 3D-VAE"), and the codec was trained on game frames, not on flow
pictures; if it lost the direction, no training could steer by the prompt.

A linear probe (logistic regression, L2 1e-3) on each clip's per-channel latent means over the
generated latent frames (1..L-1) predicts the curation's camera label, pan left or pan right, of the
clips where the flow and the recorded pose agree on one of the two. It is fitted on a seeded 70% of
those clips and scored on the other 30%, for each prompt kind and, as the reference, for the clip's
own frame latents (their mean colours should say little about the direction).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gamengen.curate.dataset import ClipDataset
from gamengen.curate.prompts import KINDS
from gamengen.models.clip_model import ClipModel
from gamengen.train.clip_data import cache_latents

LABELS = ("pan left", "pan right")


def fit_and_score(x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """Held-out accuracy of a logistic regression of y (N,) bool on x (N, D)."""
    order = np.random.default_rng(seed).permutation(len(y))
    train, test = order[:int(0.7 * len(y))], order[int(0.7 * len(y)):]
    mu, sd = x[train].mean(0), x[train].std(0) + 1e-6
    xt, yt = torch.tensor((x - mu) / sd, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200)

    def loss() -> torch.Tensor:
        opt.zero_grad()
        v = F.binary_cross_entropy_with_logits(xt[train] @ w + b, yt[train]) + 1e-3 * (w ** 2).sum()
        v.backward()
        return v

    opt.step(loss)
    return float(((xt[test] @ w + b > 0).float() == yt[test]).float().mean())


def main(model_dir: str, cache: str, *datasets: str) -> None:
    model = ClipModel.from_pretrained(model_dir)
    feats: dict[str, list[np.ndarray]] = {k: [] for k in ("frames", *KINDS)}
    labels: list[np.ndarray] = []
    for d in datasets:
        ds = ClipDataset.open(d)
        cams = [ds.meta(i)["camera"] for i in range(len(ds))]
        keep = np.array([c["flow"] == c["pose"] and c["flow"] in LABELS for c in cams])
        labels.append(np.array([c["flow"] == "pan right" for c in cams])[keep])
        for k in feats:
            z = cache_latents(ds, model.codec, Path(cache), prompt=None if k == "frames" else k)  # (N, L, C, h, w)
            feats[k].append(z[keep, 1:].astype(np.float32).mean((1, 3, 4)))  # (n, C)
    y = np.concatenate(labels)
    print(f"{len(y)} clips panning left or right ({y.mean():.0%} right); held-out 30%, majority "
          f"{max(y.mean(), 1 - y.mean()):.2f}")
    for k, f in feats.items():
        print(f"{k:>7} latents, per-channel means: accuracy {fit_and_score(np.concatenate(f), y):.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
