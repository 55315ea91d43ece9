"""How a clip model's continuation compares with the game's own next frames under sampler settings
that need no training: the context length, the CFG weight on the text, the Euler steps and shift.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/continuation_sweep.py --model MODEL --judge DIR \
        --out OUT.json [--clips-per-game 4] --setting context=5,guidance=4 --setting ... DATA...

The clips, their captions and the seeds are `clip eval`'s (seed 0, the judge's split, the first
--clips-per-game held-out clips per game), so a setting that `clip eval` also runs gives its figures.
Every setting continues each clip from the last `context` real frames before frame ``start`` (so all
settings predict the same frames), and each of the next ``horizon`` frames is scored in the view (above
the status bar) by PSNR and SSIM against the game's frame, beside the frozen start (the last context
frame held: GameNGen's copy-last) and the codec's reconstruction of the real clip (the ceiling).
A knob a setting leaves out is the model's own (its continuation sampler: `gamengen_clip.json`). Only
continuation is sampled (no text-to-clip, no judge): 1-3 s a clip and setting on two threads.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from gamengen.atomic import write_png
from gamengen.engine.clip import context_frames_used, continue_clip
from gamengen.eval.clip_chain import detail
from gamengen.eval.clip_report import _row, _stack
from gamengen.eval.clip_motion import motion
from gamengen.eval.clip import ClipEvalConfig, _key, check_inputs, heldout_order
from gamengen.eval.metrics import psnr, ssim, view_rows
from gamengen.models.clip_model import ClipModel
from gamengen.train.clip import caption_of
from gamengen.train.world_model import seed_of

KNOBS = {"context": int, "guidance": float, "steps": int, "shift": float}


def parse(setting: str) -> dict:
    out = {}
    for part in filter(None, setting.split(",")):
        k, v = part.split("=")
        out[k] = KNOBS[k](v)
    return out


def scored(frames: list[np.ndarray], truth: list[np.ndarray], rows: int) -> dict:
    """Per frame k: mean PSNR and SSIM over clips of frames[c][k] against truth[c][k], in the view; and
    the frames' own motion smoothness and detail (eval/clip_motion.py, eval/clip_chain.py), clip means."""
    n = len(truth[0])
    p = [float(np.mean([psnr(f[k][:rows], t[k][:rows]) for f, t in zip(frames, truth)])) for k in range(n)]
    s = [float(np.mean([ssim(f[k][:rows], t[k][:rows]) for f, t in zip(frames, truth)])) for k in range(n)]
    return {"psnr": p, "ssim": s, "psnr_mean": float(np.mean(p)), "ssim_mean": float(np.mean(s)),
            "smoothness": float(np.mean([motion(f).smoothness for f in frames])),
            "detail": float(np.mean([detail(f) for f in frames]))}


def heldout_clips(model: ClipModel, inp, cfg: ClipEvalConfig) -> list[tuple]:
    """`clip eval`'s held-out clips, ``cfg.clips_per_game`` a game: (game, real (F, H, W, 3) uint8, the codec's
    reconstruction of it, its caption as the model's prompt, `clip eval`'s continuation seed)."""
    clips = []
    for game in inp.games:
        for n, (d, i) in enumerate(heldout_order(game, cfg)[:cfg.clips_per_game]):
            real = inp.sets[d].frames(i)
            with torch.inference_mode():
                codec = model.codec.decode_clip(model.codec.encode_clip(real))
            prompt = caption_of(inp.sets[d].meta(i), model.meta.training.get("captions", "structured"))
            clips.append((game.label, real, codec, prompt, seed_of(cfg.seed, 3, _key(game.label), n)))
    return clips


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path)
    ap.add_argument("--judge", required=True, type=Path, help="an earlier eval's classifier/ (for its split)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--clips-per-game", type=int, default=4)
    ap.add_argument("--start", type=int, default=9, help="the first predicted frame of the 17")
    ap.add_argument("--horizon", type=int, default=8)
    ap.add_argument("--setting", action="append", required=True, type=parse)
    ap.add_argument("--strip", type=Path, help="a PNG: per game named in --strip-games, its first clip's real "
                    "frames, then each setting's (every other predicted frame)")
    ap.add_argument("--strip-games", default="E1M1,MAP01,defend_the_center,my_way_home")
    ap.add_argument("data", nargs="+", type=Path)
    a = ap.parse_args()
    cfg = ClipEvalConfig(clips_per_game=a.clips_per_game)
    inp = check_inputs(a.model, a.data, Path("/nonexistent/unused"), cfg, a.judge)
    model = ClipModel.from_pretrained(a.model)
    rows = view_rows(model.meta.height)
    clips = heldout_clips(model, inp, cfg)
    lo, hi = a.start, a.start + a.horizon
    truth = [c[1][lo:hi] for c in clips]
    res = {"model": str(a.model), "clips": len(clips), "predicted_frames": [lo, hi - 1],
           "real": scored(truth, truth, rows),
           "codec": scored([c[2][lo:hi] for c in clips], truth, rows), "settings": []}
    res["frozen_start"] = scored([np.repeat(c[1][lo - 1:lo], a.horizon, 0) for c in clips], truth, rows)
    shown = []  # per setting, its frames (clips, horizon, H, W, 3)
    for s in a.setting:
        used = context_frames_used(model, s.get("context", 5))
        if lo - used < 0 or used + a.horizon > model.meta.frames:
            raise SystemExit(f"{s}: {used} context frames before frame {lo} leave no room for {a.horizon} frames")
        t0 = time.time()
        made = []
        for label, real, codec, prompt, seed in clips:
            out = continue_clip(model, real[lo - used:lo], prompt, seed, s.get("steps"), s.get("guidance"),
                                s.get("shift"))
            made.append(out[used:used + a.horizon])
        row = {"setting": s, "context_frames": used, "seconds_per_clip": (time.time() - t0) / len(clips),
               **scored(made, truth, rows)}
        per_game = {}
        for (label, *_), m, t in zip(clips, made, truth):
            per_game.setdefault(label, []).append(float(np.mean([psnr(m[k][:rows], t[k][:rows])
                                                                for k in range(a.horizon)])))
        row["psnr_per_game"] = {k: round(float(np.mean(v)), 2) for k, v in per_game.items()}
        res["settings"].append(row)
        shown.append(made)
        print(json.dumps({k: row[k] for k in ("setting", "context_frames", "psnr_mean", "ssim_mean",
                                               "smoothness", "detail", "seconds_per_clip")}), flush=True)
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(a.out)
    if a.strip:
        picks = [j for j, c in enumerate(clips) if any(g in c[0] for g in a.strip_games.split(","))]
        firsts = [j for j in picks if not any(clips[k][0] == clips[j][0] for k in picks if k < j)]
        blocks = [[_row(truth[j][::2])] + [_row(made[j][::2]) for made in shown] for j in firsts]
        write_png(a.strip, _stack(blocks))
    print(f"frozen start {res['frozen_start']['psnr_mean']:.2f} dB, codec {res['codec']['psnr_mean']:.2f} dB "
          f"smoothness {res['codec']['smoothness']:.3f}; real smoothness {res['real']['smoothness']:.3f}")


if __name__ == "__main__":
    main()
