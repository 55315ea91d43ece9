"""The report of `gamengen clip eval` (eval/clip.py): report.json (every number), report.md (the
tables), strips/ (pictures) and classifier/ (eval/clip_classifier.py, reusable with --classifier),
all written into a temporary sibling of the output folder and renamed into place at the end, so a
failed evaluation leaves nothing."""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_folder_atomic, write_json_atomic, write_png
from .clip_motion import MOVING_PX, TOP_SHARE, VBENCH_PX, VBENCH_SIDE

# One line per measure: what it is exactly (docs/gamegen_x.md quotes them).
DEFINITIONS = {
    "game accuracy": "share of clips made from a held-out clip's GEN caption whose game (map or scenario) the "
                     "classifier, trained on other real clips, names as the prompted one (mean of per-frame logits "
                     "over the 17 frames); stands in for the paper's text-video alignment",
    "objects detected": "over (clip, object) pairs where the prompt's Frame_Desc names a vocabulary object in view, "
                        "the share the classifier finds (max over frames of its sigmoid >= 0.5)",
    "objects false-positive rate": "over (clip, object) pairs where the caption says a vocabulary object is not in "
                                   "view (unlisted, its category's list not cut by 'N more'), the share the "
                                   "classifier finds anyway; a detector blind to the picture scores the same on both",
    "continuation consistency": "a held-out clip's first 5 frames continued with its caption: share whose new "
                                "frames the classifier gives the game it gives the real context frames",
    "continuation true game": "share of continuations whose new frames the classifier gives the clip's own game",
    "dynamic degree": f"VBench's rule on Farneback flow at 128 px wide: a frame pair moves when the mean of its "
                      f"largest {TOP_SHARE:.0%} flow magnitudes exceeds {VBENCH_PX:g} px x short side / "
                      f"{VBENCH_SIDE:g}; a clip is dynamic when a quarter of its pairs move; the share of dynamic "
                      "clips",
    "motion smoothness": "ours, in [0, 1]: 1 - sum |u_k+1(x + u_k(x)) - u_k(x)| / "
                         "sum (|u_k(x)| + |u_k+1(x + u_k(x))|) "
                         f"over pixels that move (>= {MOVING_PX:g} px) and stay in view, per clip, averaged; 1 = "
                         f"constant velocity, 0 = motion reversing every frame (stands in for VBench's AMT score)",
    "mean flow": "mean Farneback flow magnitude, px per frame at 128 px wide: the curation's motion score",
    "chained continuation": "with --chain K, each continuation continued K more times, each time from the last "
                            "5 frames it made, with the same caption: per chunk, the consistency and true game "
                            "above and the detail, the mean |difference| of neighbouring grey pixels (0-255), "
                            "beside the real next frames, a frozen start (the last context frame held) and the "
                            "codec's reconstruction; and the first chunk's PSNR and SSIM of the view (above the "
                            "status bar) against the game's own next frames, per new frame",
}


def about(model, inp, clf, cfg) -> dict:
    """What was evaluated: the model, the datasets and their split, the classifier, and what
    held out means here."""
    m, s = model.meta, model.sampler
    trained = [str(Path(p).resolve()) for p in (m.dataset.get("paths") or [m.dataset.get("path")]) if p]
    overlap = [str(p) for p in inp.paths if str(p.resolve()) in trained]
    note = ("Held out means held out from the classifier only: the clip model " +
            (f"trained on {', '.join(overlap)}, held-out clips included." if overlap else
             f"was trained on {', '.join(trained) or 'an unrecorded dataset'} and may have seen these clips."))
    untrained = [g.label for g in inp.games if g.label not in m.env_ids and
                 not any(str(inp.paths[d].resolve()) in trained for d, _ in g.train + g.heldout)]
    if untrained:
        note += (f" The model was trained on {', '.join(m.env_ids) or 'other data'}, not on {', '.join(untrained)}: "
                 "its accuracy there measures nothing it learnt.")
    if len(inp.games) < 2:
        note += " One game only: game accuracy is 1 by construction and says nothing."

    def count(ds, part: str) -> int:
        return sum(1 for g in inp.games for d, _ in getattr(g, part) if inp.sets[d] is ds)

    return {"format": "gamengen-clip-eval", "version": 1, "config": asdict(cfg), "heldout_note": note,
            "model": {"path": str(inp.model_dir), "train_steps": m.train_steps, "env_ids": m.env_ids,
                      "dataset": m.dataset, "instruct": None if inp.instruct is None else str(inp.instruct),
                      "sampler": {"steps": cfg.steps or s.steps, "shift": s.shift,
                                  "guidance": s.guidance if cfg.guidance is None else cfg.guidance,
                                  "continuation_shift": s.for_task(True)[1],
                                  "continuation_guidance": s.for_task(True)[0] if cfg.guidance is None
                                  else cfg.guidance,
                                  "context_noise": s.context_noise if cfg.context_noise is None
                                  else cfg.context_noise}},
            "datasets": [{"path": str(p), "game": label, "clips": len(ds), "split_by": by,
                          "classifier_train": count(ds, "train"), "heldout": count(ds, "heldout")}
                         for p, ds, label, by in zip(inp.paths, inp.sets, inp.labels, inp.split_by)],
            "classifier": {"trained_here": inp.classifier is None, "games": clf.games,
                           "objects": [n for n, _ in clf.objects], "input": list(clf.size),
                           "config": asdict(clf.config), "final_loss": clf.loss,
                           "judges": len(getattr(clf, "judges", [clf]))},
            "definitions": DEFINITIONS}


# -- strips -------------------------------------------------------------------------------------------
def strips(clf, clips) -> dict[str, np.ndarray]:
    """One picture per game (a real clip of it on top, then the clips made from its held-out
    captions; 4 frames each), and one of continuations (per game, a real clip above its
    continuation; the context frames left of the wide gap, new frames right of it)."""
    out = {}
    firsts = []
    for g, name in enumerate(clf.games):
        mine = [c for c in clips if c.game == g]
        if mine:
            idx = np.linspace(0, len(mine[0].real) - 1, 4).round().astype(int)
            out[safe_name(name)] = _stack([[_row(mine[0].real[idx])], [_row(c.made[idx]) for c in mine]])
            firsts.append(mine[0])
    if firsts:
        c0 = firsts[0]
        ctx = np.unique(np.linspace(0, c0.used - 1, 2).round().astype(int))
        new = np.unique(np.linspace(c0.used, len(c0.real) - 1, 3).round().astype(int))

        def split_row(frames):
            return np.concatenate([_row(frames[ctx]), _gap(frames.shape[1], 10), _row(frames[new])], axis=1)

        out["continuation"] = _stack([[split_row(c.real), split_row(c.continued)] for c in firsts])
    return out


def chain_strip(clf, clips) -> np.ndarray:
    """Per game, its first clip: the real context's last frame, a gap, then the last frame of each chunk."""
    firsts = [next(c for c in clips if c.game == g) for g in range(len(clf.games)) if any(c.game == g for c in clips)]

    def line(c) -> np.ndarray:
        ends = np.stack([c.continued[-1]] + [k[-1] for k in c.chain])
        return np.concatenate([c.real[c.used - 1], _gap(c.real.shape[1], 10), _row(ends)], axis=1)

    return _stack([[line(c)] for c in firsts])


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "game"


def _gap(h: int, w: int) -> np.ndarray:
    return np.full((h, w, 3), 255, np.uint8)


def _row(frames: np.ndarray) -> np.ndarray:
    """(n, H, W, 3) -> (H, n W + 2 (n - 1), 3): frames 2 px apart."""
    parts = []
    for f in frames:
        parts += [f, _gap(f.shape[0], 2)]
    return np.concatenate(parts[:-1], axis=1)


def _stack(blocks: list[list[np.ndarray]]) -> np.ndarray:
    """Blocks of equally wide rows: rows 2 px apart, blocks 10 px apart."""
    out = []
    for block in blocks:
        for r in block:
            out += [r, _gap(2, r.shape[1])]
        out[-1] = _gap(10, out[-1].shape[1])
    return np.concatenate(out[:-1])


# -- markdown -----------------------------------------------------------------------------------------
def _v(x) -> str:
    if isinstance(x, dict):
        return "-" if x.get("value") is None else f"{x['value']:.2f} (n={x['n']})"
    return "-" if x is None else f"{x:.2f}"


def _in(x: dict, lo: float, hi: float) -> str:
    return "-" if x.get("value") is None else ("within" if lo <= x["value"] <= hi else "outside")


def _target(x: dict, target: float) -> str:
    return "-" if x.get("value") is None else ("met" if x["value"] >= target else "not met")


def table_rows(res: dict) -> list[list[str]]:
    """[metric, generated, real held-out, codec reconstruction, chance / target] rows."""
    acc, cont, mot = res["game_accuracy"], res["continuation"], res["motion"]
    rows = [["game accuracy: the prompted game wins (text-to-clip)", _v(acc["text_to_clip"]),
             _v(acc["real_heldout"]), _v(acc["codec"]),
             f"chance {acc['chance_uniform']:.2f} (uniform), {acc['chance_majority']:.2f} (majority); target >= "
             f"{acc['target']:.2f}: {_target(acc['text_to_clip'], acc['target'])}"]]
    if "objects" in res:
        o = res["objects"]
        rows += [["objects: prompted objects detected (text-to-clip)", *(_v(o[k]["detected"]) for k in
                                                                          ("text_to_clip", "real_heldout", "codec")),
                  "a blind detector: equal to its false-positive rate"],
                 ["objects: false-positive rate (caption says absent)", *(_v(o[k]["false_positive_rate"]) for k in
                                                                          ("text_to_clip", "real_heldout", "codec")),
                  "lower is better"]]
    c, t = cont["consistency"], cont["true_game"]
    n = cont["context_frames"]
    rows += [[f"continuation consistency: new frames' game = real context's ({n} frames)", _v(c["text_to_clip"]),
              _v(c["real_heldout"]) + f" (frames {n + 1}+ of the real clip)", _v(c["codec"]),
              f"target >= {c['target']:.2f}: {_target(c['text_to_clip'], c['target'])}"],
             ["continuation: new frames show the clip's own game", _v(t["text_to_clip"]), _v(t["real_heldout"]),
              _v(t["codec"]), ""]]
    lo_dd, hi_dd = mot["real_range"]["dynamic_degree"]
    lo_ms, hi_ms = mot["real_range"]["motion_smoothness"]
    for what, key in (("text-to-clip", "text_to_clip"), ("continuation clips", "continuation")):
        dd, ms = mot[key]["dynamic_degree"], mot[key]["motion_smoothness"]
        rows += [[f"dynamic degree ({what})", _v(dd), _v(mot["real_heldout"]["dynamic_degree"]),
                  _v(mot["codec"]["dynamic_degree"]),
                  f"real 95% interval [{lo_dd:.2f}, {hi_dd:.2f}]: {_in(dd, lo_dd, hi_dd)}"],
                 [f"motion smoothness ({what})", _v(ms), _v(mot["real_heldout"]["motion_smoothness"]),
                  _v(mot["codec"]["motion_smoothness"]), f"real clips 5-95%: [{lo_ms:.2f}, {hi_ms:.2f}]: "
                                                          f"{_in(ms, lo_ms, hi_ms)}"]]
    rows.append(["mean flow, px/frame at 128 px (text-to-clip)", _v(mot["text_to_clip"]["mean_flow"]),
                 _v(mot["real_heldout"]["mean_flow"]), _v(mot["codec"]["mean_flow"]), ""])
    for name, v in res["unavailable"].items():
        rows.append([name, _v(v) if isinstance(v, dict) else v, "", "", ""])
    return rows


def chain_rows(ch: dict) -> list[list[str]]:
    """[what, consistency, true game, detail] rows for report.md."""
    rows = [[f"chunk {k + 1}" + (" (the continuation above)" if k == 0 else " (from the model's own frames)"),
             _v(c["consistency"]), _v(c["true_game"]), _v(c["detail"])] for k, c in enumerate(ch["chunks"])]
    for name, key in (("real: the game's next frames", "real_next"), ("frozen start: the last context frame held",
                                                                       "frozen_start"),
                      ("codec reconstruction of the real next frames", "codec")):
        rows.append([name, _v(ch[key]["consistency"]), _v(ch[key]["true_game"]), _v(ch[key]["detail"])])
    return rows


def against_real_rows(ar: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the first chunk's view PSNR and SSIM against the game's frames, at a few new frames."""
    n = len(ar["continuation"]["psnr"])
    picks = sorted({0, 1, 3, 7, n - 1} & set(range(n)))
    header = ["", *(f"frame {k + 1}" for k in picks), f"mean of {n}"]
    rows = []
    for measure, unit in (("psnr", "PSNR dB"), ("ssim", "SSIM")):
        for name, key in (("continuation", "continuation"), ("frozen start (copy-last)", "frozen_start"),
                          ("codec reconstruction", "codec")):
            v = ar[key][measure]
            rows.append([f"{unit}: {name}", *(f"{v[k]:.{1 if measure == 'psnr' else 3}f}" for k in picks),
                         f"{np.mean(v):.{1 if measure == 'psnr' else 3}f}"])
    return header, rows


def markdown(res: dict, pictures: list[str], command: str) -> str:
    m = res["model"]
    lines = ["# Clip model evaluation (offline)", "", f"`{command}`", "",
             f"Model `{m['path']}`, {m['train_steps']} training steps; sampled with {m['sampler']['steps']} Euler "
             f"steps, CFG {m['sampler']['guidance']} and shift {m['sampler']['shift']} (continuations: CFG "
             f"{m['sampler']['continuation_guidance']}, shift {m['sampler']['continuation_shift']}; "
             f"{res['config']['context']} context frames), seed {res['config']['seed']}. {res['heldout_note']}" +
             (f" The continuations ran through the InstructNet `{m['instruct']}` with no control given (keys, "
              "instruction and video prompt off); text-to-clip is the model's alone." if m.get("instruct") else ""),
             "",
             "| game | dataset | clips | classifier-train | held-out | split by |", "|---|---|---|---|---|---|"]
    lines += [f"| {d['game']} | `{d['path']}` | {d['clips']} | {d['classifier_train']} | {d['heldout']} | "
              f"{d['split_by']} |" for d in res["datasets"]]
    lines += ["", "| metric | generated | real held-out | codec reconstruction | chance / target |",
              "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(res)]
    lines += ["", "Real held-out: in the game-accuracy and object rows, the classifier itself (its ceiling) on up "
              f"to {res['config']['ceiling_clips']} held-out clips per game; in the other rows, the clips the prompts "
              "came from. Codec reconstruction: the prompts' clips through the model's video VAE and back.", "",
              "| game | prompts | text-to-clip accuracy | classifier on real held-out | on codec reconstructions |",
              "|---|---|---|---|---|"]
    for game, g in res["game_accuracy"]["per_game"].items():
        lines.append(f"| {game} | {g['text_to_clip']['n']} | {_v(g['text_to_clip'])} | {_v(g['real_heldout'])} | "
                     f"{_v(g['codec'])} |")
    c = res["classifier"]
    if "chain" in res:
        ch = res["chain"]
        lines += ["", f"## Chained continuation ({len(ch['chunks'])} chunks of {ch['new_frames_per_chunk']} new "
                  "frames, each after the first continued from the model's own last frames)", "",
                  "| chunk | consistency | true game | detail (grey levels) |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in chain_rows(ch)]
        header, rows = against_real_rows(ch["against_real"])
        lines += ["", "The first chunk against the game's own next frames (the view above the status bar):", "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    if "judges" in res:
        lines += ["", f"A panel of {c['judges']} judges scored every figure above by their mean probabilities; each "
                  "judge alone: " + "; ".join(by_judge(res["judges"])) + "."]
    lines += ["", f"Classifier: {'trained here' if c['trained_here'] else 'reused (--classifier)'}, "
              f"{c['config']['steps']} steps on {c['input'][1]}x{c['input'][0]} frames of at most "
              f"{c['config']['max_train_clips']} classifier-train clips per game, final loss {c['final_loss']:.3f}; "
              f"objects head: {', '.join(c['objects']) or 'none (the captions name no objects in view)'}.", "",
              "## What each measure is", ""]
    lines += [f"- **{k}**: {v}." for k, v in DEFINITIONS.items()]
    lines += ["", "## Clips", ""] + [f"![{p}](strips/{p}.png)" for p in pictures]
    return "\n".join(lines) + "\n"


def by_judge(judges: list[dict]) -> list[str]:
    """Each judge of a panel alone, one phrase a judge."""
    return [f"seed {j['seed']}: game accuracy {_v(j['game_accuracy'])} (real {_v(j['real_heldout'])}), "
            f"consistency {_v(j['consistency'])} (real {_v(j['real_consistency'])})" for j in judges]


def summary(res: dict) -> list[str]:
    """A few lines for the terminal."""
    acc, cont, mot = res["game_accuracy"], res["continuation"]["consistency"], res["motion"]
    lo_dd, hi_dd = mot["real_range"]["dynamic_degree"]
    lo_ms, hi_ms = mot["real_range"]["motion_smoothness"]
    t2c = mot["text_to_clip"]
    lines = [f"game accuracy (text-to-clip): {_v(acc['text_to_clip'])}; chance {acc['chance_uniform']:.2f}; "
             f"classifier on real held-out {_v(acc['real_heldout'])}; target >= {acc['target']:.2f}",
             f"continuation consistency: {_v(cont['text_to_clip'])}; real {_v(cont['real_heldout'])}; "
             f"target >= {cont['target']:.2f}",
             f"dynamic degree: {_v(t2c['dynamic_degree'])}; real {_v(mot['real_heldout']['dynamic_degree'])} "
             f"[{lo_dd:.2f}, {hi_dd:.2f}]",
             f"motion smoothness: {_v(t2c['motion_smoothness'])}; real {_v(mot['real_heldout']['motion_smoothness'])} "
             f"[{lo_ms:.2f}, {hi_ms:.2f}]"]
    if "objects" in res:
        o = res["objects"]["text_to_clip"]
        lines.append(f"objects: prompted detected {_v(o['detected'])}, "
                     f"false-positive rate {_v(o['false_positive_rate'])}")
    if "chain" in res:
        ch = res["chain"]
        lines.append("chained continuation, per chunk: consistency " +
                     " -> ".join(_v(c["consistency"]["value"]) for c in ch["chunks"]) + "; detail " +
                     " -> ".join(_v(c["detail"]["value"]) for c in ch["chunks"]) +
                     f" (real {_v(ch['real_next']['detail']['value'])}, frozen start "
                     f"{_v(ch['frozen_start']['detail']['value'])})")
        ar = ch["against_real"]
        lines.append("first chunk against the game's frames (view PSNR, mean of the new frames): continuation "
                     f"{np.mean(ar['continuation']['psnr']):.1f} dB, frozen start "
                     f"{np.mean(ar['frozen_start']['psnr']):.1f} dB, codec {np.mean(ar['codec']['psnr']):.1f} dB")
    if "judges" in res:
        lines.append(f"panel of {len(res['judges'])} judges; each alone: " + "; ".join(by_judge(res["judges"])))
    missing = [k for k, v in res["unavailable"].items() if isinstance(v, str)]
    lines.append(f"unavailable offline: {', '.join(missing)}")
    return lines


def write_results(out: Path, res: dict, pictures: dict[str, np.ndarray], clf, command: str) -> None:
    """The whole output folder, atomically."""
    res = {**res, "command": command, "strips": [f"strips/{k}.png" for k in pictures]}

    def write(tmp: Path) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        write_json_atomic(tmp / "report.json", res)
        write_bytes_atomic(tmp / "report.md", markdown(res, list(pictures), command).encode())
        for name, image in pictures.items():
            write_png(tmp / "strips" / f"{name}.png", image)
        clf.save(tmp / "classifier")

    write_folder_atomic(out, write)
