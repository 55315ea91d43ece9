"""How much do the keys say about the next latent frame that the context does not (issue 19)?

    .venv/bin/python scripts/latent_key_probe.py MODEL CACHE DATASET [DATASET ...]

MODEL is a clip model folder, CACHE a folder holding its codec's latents of the clip datasets
(a `clip train-instruct` run's cache/; they are encoded there if missing), DATASET a clip dataset
(`gamengen curate`'s output, e.g. data/curated/freedoom1-E1M1). A shift model in latent space, no
training: each next latent frame is predicted as the one before it moved sideways by s latent
pixels, with s

- 0 (persistence, the reference);
- the best s per transition (an oracle: how much of the change a sideways shift explains at all);
- a * turn, the turn keys (TURN_LEFT share minus TURN_RIGHT share) that led to the next frame;
- a * turn of the frame before (what the context's own keys say);
- b * the shift between the two context frames before it (the context's motion, continued).

a and b are fitted on the even transitions and scored on the odd ones. Errors are mean squares over
the view (latent rows 2-10: the status bar, which never moves, left out; 3 columns at each side left
out, where a shift runs out of picture). The last lines repeat the comparison on the transitions
where the turn keys changed between the two frames: there the context cannot know what comes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gamengen.curate.dataset import ClipDataset
from gamengen.models.clip_model import ClipModel
from gamengen.models.instructnet import latent_keys
from gamengen.train.clip_data import cache_latents

SHIFTS = np.arange(-8, 8.01, 0.5)  # latent pixels
GAINS = np.arange(-10, 10.01, 0.25)


def shift(z: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """z (N, C, h, w) moved right by s (N,) latent pixels (bilinear, edges repeated)."""
    N, C, h, w = z.shape
    theta = torch.zeros(N, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = 1
    theta[:, 0, 2] = -2 * s.float() / w
    return F.grid_sample(z, F.affine_grid(theta, z.shape, align_corners=False), padding_mode="border",
                         align_corners=False)


def err(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(N,) mean square over the view."""
    return ((a - b)[..., 2:11, 3:-3] ** 2).mean((1, 2, 3))


def probe(model: ClipModel, cache: Path, dataset: str) -> None:
    ds = ClipDataset.open(dataset)
    lat = torch.from_numpy(cache_latents(ds, model.codec, cache).astype(np.float32))  # (N, L, C, h, w)
    names = ds.keys(0)[0]
    keys = latent_keys(torch.from_numpy(np.stack([ds.keys(i)[1] for i in range(len(ds))])),
                       model.codec.vae.temporal_compression)  # (N, L, K)
    turn = keys[..., names.index("TURN_LEFT")] - keys[..., names.index("TURN_RIGHT")]  # (N, L)
    js = range(2, lat.shape[1])  # latent frame j from j - 1, with j - 2 for the context's motion
    before, prev, cur = (torch.cat([lat[:, j + d] for j in js]) for d in (-2, -1, 0))
    t_next, t_prev = (torch.cat([turn[:, j + d] for j in js]) for d in (0, -1))
    n = len(cur)
    fit_on = torch.arange(n) % 2 == 0

    def best_shift(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = torch.stack([err(shift(a, torch.full((len(a),), float(s))), b) for s in SHIFTS])  # (S, N)
        return torch.as_tensor(SHIFTS)[e.argmin(0)], e.min(0).values

    s_ctx, _ = best_shift(before, prev)
    s_true, e_oracle = best_shift(prev, cur)
    base = err(prev, cur)
    turned = (t_next - t_prev).abs() > 0.5  # the turn keys changed between the two frames
    print(f"{dataset}: {n} transitions; turn keys changed in {float(turned.float().mean()):.0%}")
    print(f"  persistence: {float(base[~fit_on].mean()):.4f}")
    print(f"  oracle shift: {float(e_oracle[~fit_on].mean() / base[~fit_on].mean() - 1):+.1%}; its median where "
          f"TURN_LEFT, TURN_RIGHT was held throughout: {float(s_true[t_next > 0.75].median()):+g}, "
          f"{float(s_true[t_next < -0.75].median()):+g} latent pixels")
    changed = turned & ~fit_on
    for name, x in (("keys to the next frame", t_next), ("keys of the frame before", t_prev), ("context motion", s_ctx)):
        gain = min(GAINS, key=lambda g: float(err(shift(prev[fit_on], g * x[fit_on]), cur[fit_on]).mean()))
        e = err(shift(prev, gain * x), cur)
        print(f"  {name} (x {gain:g}): {float(e[~fit_on].mean() / base[~fit_on].mean() - 1):+.1%}; "
              f"where the keys changed ({int(changed.sum())}): {float(e[changed].mean() / base[changed].mean() - 1):+.1%}")


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    model = ClipModel.from_pretrained(sys.argv[1])
    for dataset in sys.argv[3:]:
        probe(model, Path(sys.argv[2]), dataset)


if __name__ == "__main__":
    main()
