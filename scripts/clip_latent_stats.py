"""How noisy a clip model's samples are, in latent space, beside real clips' latents.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/clip_latent_stats.py --report EVAL/report.json \
        --cache runs/clip-long-cache MODEL [MODEL ...] [--sampler STEPS,CFG,SHIFT ...]

For each model (and sampler setting) it samples text-to-clip latents from 8 prompts of an earlier
`gamengen clip eval` report (every 11th, seeds 0-7) and prints three figures beside those of 660 real
clips' latents (the first 60 of each game's cached latents, `clip train`'s RUN/cache):
- std: the latents' spread;
- spatial high-frequency energy: the mean |difference| of neighbouring latent pixels;
- temporal difference: the mean |difference| of consecutive latent frames.
Samples whose figures sit far above the real ones carry noise the sampler never removed: in pixels,
the blotches and the jitter `clip eval`'s motion smoothness sees (docs/gamegen_x.md, twelfth round).
The models must share the codec the cache was made with.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from gamengen.engine.clip import sample_latents
from gamengen.models.clip_model import ClipModel


def figures(latents: np.ndarray) -> str:
    """latents (N, L, C, h, w) -> std, spatial high-frequency energy, temporal difference."""
    hf = np.abs(np.diff(latents, axis=-1)).mean()
    td = np.abs(np.diff(latents, axis=1)).mean()
    return f"std {latents.std():.2f}  spatial hf {hf:.3f}  temporal diff {td:.3f}"


def sample(model: ClipModel, prompts: list[str], steps: int, cfg: float, shift: float) -> np.ndarray:
    """Text-to-clip latents (N, L, C, h, w) of ``prompts``, seeds 0..N-1, as `clip generate` samples them."""
    return np.stack([sample_latents(model, prompt, seed, None, steps, cfg, shift)[0].cpu().numpy()
                     for seed, prompt in enumerate(prompts)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--sampler", action="append", help="STEPS,CFG,SHIFT (default: each model's own)")
    args = ap.parse_args()
    real = np.concatenate([np.load(f, mmap_mode="r")[:60].astype(np.float32)
                           for f in sorted(args.cache.glob("latents-*.npy"))])
    print(f"real ({len(real)} clips): {figures(real)}")
    prompts = [c["prompt"] for c in json.loads(args.report.read_text())["clips"][::11][:8]]
    for folder in args.models:
        model = ClipModel.from_pretrained(folder)
        s = model.sampler
        for setting in args.sampler or [f"{s.steps},{s.guidance},{s.shift}"]:
            steps, cfg, shift = setting.split(",")
            gen = sample(model, prompts, int(steps), float(cfg), float(shift))
            print(f"{folder} ({model.meta.train_steps} steps), {steps} Euler steps, CFG {cfg}, shift {shift}: "
                  f"{figures(gen)}", flush=True)


if __name__ == "__main__":
    main()
