"""Where in a clip the motion loses its smoothness: eval/clip_motion's smoothness split by frame triplet.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/smoothness_by_frame.py --model MODEL --judge DIR [--out OUT.json] DATA...

For `clip eval`'s held-out clips (seed 0, the judge's split, 4 a game): the real clip, the codec's
reconstruction and the model's continuation of the first 5 frames (its own sampler, `clip eval`'s
seeds). Triplet k is frames k, k+1, k+2: the change of velocity from the flow k -> k+1 to the flow
k+1 -> k+2 (eval/clip_motion.smoothness_terms), summed over all clips. The
video VAE packs frames 1-4, 5-8, 9-12, 13-16 into one latent frame each, so triplets 3, 7 and 11 are
the ones whose second flow crosses into the next latent frame.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from continuation_sweep import heldout_clips  # beside this file

from gamengen.engine.clip import continue_clip
from gamengen.eval.clip import ClipEvalConfig, check_inputs
from gamengen.eval.clip_motion import flow_fields, smoothness_terms
from gamengen.models.clip_model import ClipModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--judge", required=True, type=Path, help="an earlier eval's classifier/ (for its split)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("data", nargs="+", type=Path)
    a = ap.parse_args()
    cfg = ClipEvalConfig(clips_per_game=4)
    inp = check_inputs(a.model, a.data, Path("/nonexistent/unused"), cfg, a.judge)
    model = ClipModel.from_pretrained(a.model)
    terms = {"real": [], "codec": [], "continuation": []}
    for _, real, codec, prompt, seed in heldout_clips(model, inp, cfg):
        made = continue_clip(model, real[:5], prompt, seed, None, None)
        for k, v in (("real", real), ("codec", codec), ("continuation", made)):
            terms[k].append(np.array(smoothness_terms(flow_fields(v))))
    res = {}
    for k, v in terms.items():
        t = np.stack(v)  # (clips, F - 2, 2)
        res[k] = {"smoothness_per_triplet": [round(float(x), 3) for x in 1 - t[..., 0].sum(0) / t[..., 1].sum(0)],
                  "clips": len(v)}
        print(k, " ".join(f"{x:.2f}" for x in res[k]["smoothness_per_triplet"]))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
