"""Where a world model's teacher-forced error lies, on moving held-out frames (issue 17).

    .venv/bin/python scripts/tf-diagnostics.py MODEL STORE [--samples 60] [--split train] [--strip OUT.png]

For each moving frame (copy-last below 30 dB) of STORE's held-out episodes, beside the model's
prediction: a second prediction with other noise (do the model's samples agree, i.e. is the error
a confident bias rather than spread?), the AE reconstruction, copy-last and the best horizontal
shift of the last frame (is the change a pan?), and the latent MSE of the prediction and of the
last frame against the truth's latent. Means per action taken into the frame, then the model's and
the AE's squared error per sixth of the frame's height (is the error where the monsters are, or
everywhere?). ``--split train`` draws from the training episodes instead (over-fitting?). ``--strip`` writes
rows of: two frames before, the last frame, the truth and their difference (x3).
"""

from __future__ import annotations

import argparse

import numpy as np

from gamengen.data.latents import split
from gamengen.data.store import Store
from gamengen.engine.world import NeuralWorld
from gamengen.eval.heldout import context_at
from gamengen.eval.metrics import psnr
from gamengen.eval.teacher_forced import MOVING_DB

COLUMNS = ("model", "model_other_noise", "samples_agree", "ae", "copy_last", "best_shift_copy", "shift_px",
           "latent_mse_model", "latent_mse_last", "latent_power")


def best_shift(last: np.ndarray, truth: np.ndarray, reach: int = 40) -> tuple[float, int]:
    """The PSNR of the last frame shifted horizontally by the best of -reach..reach pixels (overlap only)."""
    w = truth.shape[1]
    return max((psnr(np.roll(last, s, axis=1)[:, max(0, s):w + min(0, s)], truth[:, max(0, s):w + min(0, s)]), s)
               for s in range(-reach, reach + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("store")
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--split", choices=("heldout", "train"), default="heldout")
    ap.add_argument("--strip", default=None)
    a = ap.parse_args()
    world, store = NeuralWorld(a.model), Store.open(a.store)
    held = split(store.episodes(), world.meta.heldout)[a.split == "heldout"]
    rng, rows, acts, strip, bands = np.random.default_rng(1), [], [], [], []
    while len(rows) < a.samples:
        rec = held[int(rng.integers(len(held)))]
        t = int(rng.integers(3, rec.length))
        frames, actions = context_at(store, rec, t, world.context + 1)
        truth, last = frames[-1], frames[-2]
        if psnr(last, truth) >= MOVING_DB:
            continue
        preds = []
        for seed in (1, 2):
            world.reset(frames[:-1], actions[:-1], seed=seed)
            preds.append(world.step(int(actions[-1])))
        z = {k: world.codec.encode(v[None]) for k, v in (("truth", truth), ("last", last), ("model", preds[0]))}
        recon = world.codec.decode(z["truth"])[0]
        shifted, px = best_shift(last, truth)
        rows.append((psnr(preds[0], truth), psnr(preds[1], truth), psnr(preds[0], preds[1]), psnr(recon, truth),
                     psnr(last, truth), shifted, px, float(((z["model"] - z["truth"]) ** 2).mean()),
                     float(((z["last"] - z["truth"]) ** 2).mean()), float((z["truth"] ** 2).mean())))
        acts.append(world.actions[int(actions[-1])])
        bands.append([np.array_split(((x.astype(float) - truth) ** 2).mean(axis=(1, 2)), 6) for x in (preds[0], recon)])
        if a.strip and len(strip) < 6:
            diff = (np.abs(truth.astype(int) - last.astype(int)) * 3).clip(0, 255).astype(np.uint8)
            strip.append(np.concatenate([frames[-3], last, truth, diff], axis=1))
    rows, acts = np.array(rows), np.array(acts)
    print("| action | n | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for name in ["all", *dict.fromkeys(acts)]:
        r = rows if name == "all" else rows[acts == name]
        print(f"| {name} | {len(r)} | " + " | ".join(f"{v:.2f}" for v in r.mean(0)) + " |")
    mse = np.array([[[b.mean() for b in x] for x in row] for row in bands]).mean(0)  # (model/AE, 6 bands)
    print("squared error per sixth of the height, top to bottom: model " + " ".join(f"{v:.0f}" for v in mse[0])
          + "; AE " + " ".join(f"{v:.0f}" for v in mse[1]) + "; model/AE " + " ".join(f"{v:.1f}" for v in mse[0] / mse[1]))
    if strip:
        from gamengen.atomic import write_png

        write_png(a.strip, np.concatenate(strip, axis=0))


if __name__ == "__main__":
    main()
