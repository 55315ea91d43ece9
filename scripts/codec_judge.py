"""The codec row of `gamengen clip eval` alone: the judge's game accuracy on the codec's reconstructions
of the same held-out clips (and on the real clips beside them), without generating anything. Also
the model's 2D autoencoder alone (every frame through it, no temporal VAE) and any other 2D
autoencoder given with --ae, and the codec of any other clip model or codec folder given with --also
(a tuned codec beside the one it came from), so a codec's loss can be laid at the right stage.
--strip PNG writes one held-out frame of each game through each of them, under the real one.

    .venv/bin/python scripts/codec_judge.py --model M --classifier DIR [--also M2]... [--ae AE]... \
        [--clips N] [--strip PNG] DATA...

DIR is an earlier `clip eval`'s classifier/ folder (its judge); a folder without one gets one trained
here (about 8 minutes of one core) and saved, on the split `clip eval` draws (seed 0), so later
evaluations can pass it as --classifier. A diagnostic for codec work (a codec is scored in minutes
where the whole evaluation takes many): the clips are `clip eval`'s own, in its seeded order, the
first N per game (8: its --clips-per-game).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from gamengen.eval.clip import ClipEvalConfig, heldout_order, check_inputs, fit_classifier
from gamengen.eval.clip_classifier import META, ClipClassifier
from gamengen.curate.report import contact_sheet
from gamengen.models.autoencoder import FrameCodec
from gamengen.models.clip_model import META_FILE as CLIP_META, ClipModel
from gamengen.models.video_vae import ClipCodec


def psnr(se: list[float]) -> float:
    return float(10 * np.log10(255 ** 2 / np.mean(se)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--classifier", required=True, type=Path, help="a judge folder (trained here when empty)")
    ap.add_argument("--ae", action="append", default=[], help="another 2D autoencoder folder to judge")
    ap.add_argument("--also", action="append", default=[], help="another clip model or codec folder")
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--strip", type=Path, help="a PNG of one frame per game through every codec")
    ap.add_argument("data", nargs="+")
    a = ap.parse_args()
    cfg = ClipEvalConfig(clips_per_game=a.clips)
    have = (a.classifier / META).exists()
    unused = Path(tempfile.mkdtemp()) / "unused"
    inp = check_inputs(Path(a.model), [Path(d) for d in a.data], unused, cfg, a.classifier if have else None)
    clf: ClipClassifier = inp.classifier
    if clf is None:
        clf = fit_classifier(inp, cfg)
        clf.save(a.classifier)
        print(f"trained the judge into {a.classifier}")
    model = ClipModel.from_pretrained(a.model)
    codecs = {"codec": lambda x: model.codec.decode_clip(model.codec.encode_clip(x)),
              "2D AE alone": lambda x: model.codec.frame.decode(model.codec.frame.encode(x))}
    for path in a.also:
        other = (ClipModel.from_pretrained(path).codec if (Path(path) / CLIP_META).is_file() else ClipCodec.load(path))
        codecs[path] = lambda x, c=other: c.decode_clip(c.encode_clip(x))
    for path in a.ae:
        ae = FrameCodec.load(path)
        codecs[path] = lambda x, ae=ae: ae.decode(ae.encode(x))
    shown: dict[str, list[np.ndarray]] = {"real": [], **{k: [] for k in codecs}}  # one frame per game
    hits: dict[str, list[bool]] = {"real": [], **{k: [] for k in codecs}}
    se: dict[str, list[float]] = {k: [] for k in codecs}
    for game in inp.games:
        g = clf.games.index(game.label)
        for n, (d, i) in enumerate(heldout_order(game, cfg)[:a.clips]):
            real = inp.sets[d].frames(i)  # (17, H, W, 3) uint8
            hits["real"].append(clf.predict(real).game == g)
            if n == 0:
                shown["real"].append(real[len(real) // 2])
            for name, roundtrip in codecs.items():
                with torch.inference_mode():
                    back = roundtrip(real)
                hits[name].append(clf.predict(back).game == g)
                se[name].append(np.mean((back.astype(np.float64) - real) ** 2))
                if n == 0:
                    shown[name].append(back[len(back) // 2])
    n = len(hits["real"])
    print(f"{n} held-out clips ({a.clips} per game); game accuracy by the judge, PSNR against the real frames:")
    print(f"  real: {np.mean(hits['real']):.3f}")
    for name in codecs:
        print(f"  {name}: {np.mean(hits[name]):.3f} ({sum(hits[name])}/{n}), {psnr(se[name]):.2f} dB")
    if a.strip:
        from PIL import Image

        sheet = contact_sheet([(name, np.stack(f)) for name, f in shown.items()], thumb_width=160)
        Image.fromarray(sheet).save(a.strip)
        print(f"wrote {a.strip}")


if __name__ == "__main__":
    main()
