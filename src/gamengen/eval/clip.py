"""`gamengen clip eval`: the offline evaluation of a clip model (GameGen-X §4.3, Table 1), against
the same figures on real clips.

The paper's FID, FVD, text-video alignment (expert raters, PLLaVA), subject consistency, imaging
quality and VBench's motion smoothness all need networks whose weights we never download; they are
reported "unavailable" (FVD is computed when eval/fvd.py finds its I3D file). What is measured
instead, each labelled for what it is:

- **caption-field accuracy**: a small classifier (eval/clip_classifier.py) trained here on real
  clips predicts the game (map or scenario) of a clip made from a held-out clip's GEN caption; the
  prompted game should win. Its objects head checks the objects the prompt names in view.
- **continuation consistency**: a held-out clip's first 5 frames (``--context``: two latent frames,
  §3.3's x = 2) continued with its caption; the classifier's game on the new frames against its game on the
  real context frames.
- **dynamic degree and motion smoothness** from optical flow (eval/clip_motion.py).

Every figure stands beside the same figure on the real held-out clips and on the codec's
reconstructions of them (the most the model could reach through its video VAE).

Clips are split per dataset, by source episode, into the classifier's training clips and
held-out ones (``split_clips``); only held-out clips are evaluated. The clip model itself may have
trained on all of them: held out means held out from the classifier.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zlib
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..curate.dataset import ClipDataset, split_clips  # split_clips: `clip eval`'s split, owned by the dataset
from ..errors import UserError
from .clip_chain import chain, measure_chain
from .clip_classifier import (ClassifierConfig, ClipClassifier, JudgePanel, TrainingClips, frame_picks, input_size,
                              judge_panel, load_judge, objects_in_view, shrink, train_classifier)
from .clip_motion import motion, share, wilson
from .clip_report import about, chain_strip, strips

CONTEXT_FRAMES = 5  # the default continuation context: 1 + 4 frames, two latent frames of the causal codec (x = 2)
TARGETS = {"game_accuracy": 0.80, "continuation_consistency": 0.90}  # issue 18's targets
UNAVAILABLE = "unavailable (needs weights we never download)"


@dataclass
class ClipEvalConfig:
    clips_per_game: int = 8  # held-out clips per game whose captions prompt the model
    seed: int = 0
    steps: int | None = None  # Euler steps; None: the model's sampler
    guidance: float | None = None  # CFG weight; None: the model's sampler
    context_noise: float | None = None  # the flow time continuations show their context at; None: the model's
    # Further continuations of each continuation from its own frames (eval/clip_chain.py): what clip play shows
    chain: int = 0
    context: int = CONTEXT_FRAMES  # real frames each continuation holds clean, 1 + 4k
    heldout_share: float = 0.25  # of each dataset's source episodes, held out from the classifier
    ceiling_clips: int = 64  # real held-out clips per game the classifier's own accuracy is measured on
    i3d: str | None = None  # TorchScript I3D for FVD; None: eval/fvd.default_i3d_path()
    classifier: ClassifierConfig = field(default_factory=ClassifierConfig)
    # Judges trained here, on the same clips from seeds classifier.seed + k, voting as one panel: one judge's
    # figure on generated clips moves with its seed (0.77-0.84 game accuracy: docs/gamegen_x.md, "The
    # judge's own spread"), a panel's less. 1: the single judge of every earlier round.
    judges: int = 1

    def check(self) -> "ClipEvalConfig":
        if self.clips_per_game < 1:
            raise UserError(f"--clips-per-game must be at least 1, got {self.clips_per_game}",
                            "pass a positive --clips-per-game")
        if (self.steps is not None and self.steps < 1) or (self.guidance is not None and self.guidance < 0):
            raise UserError(f"sampler steps {self.steps}, guidance {self.guidance}", "use steps >= 1, guidance >= 0")
        if self.chain < 0 or (self.context_noise is not None and not 0 <= self.context_noise < 1):
            raise UserError(f"--chain {self.chain}, --context-noise {self.context_noise}",
                            "use --chain >= 0 and a context noise in [0, 1)")
        if self.judges < 1:
            raise UserError(f"--judges {self.judges}", "train at least one judge (--judges 1)")
        if not 0 < self.heldout_share < 1 or self.ceiling_clips < 1:
            raise UserError("the held-out share must be in (0, 1), ceiling clips >= 1", "fix the evaluation settings")
        self.classifier.check()
        return self


@dataclass
class Game:
    label: str
    train: list[tuple[int, int]] = field(default_factory=list)  # (dataset, clip) the classifier learns from
    heldout: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Inputs:
    model_dir: Path
    paths: list[Path]
    sets: list[ClipDataset]
    games: list[Game]
    labels: list[str]  # per dataset: its game (``game_label``)
    split_by: list[str]  # per dataset: "episode", "clip", "classifier" (an earlier eval's split) or "judge" (--judge-data)
    classifier: ClipClassifier | JudgePanel | None  # given with --classifier (repeated: one panel)
    # An InstructNet trained beside the model (--instruct): the continuations run through it with no
    # control given (does attaching it, and no more, change the base's figures?).
    instruct: Path | None = None


# -- inputs: every refusal before any work ------------------------------------------------------------
def game_label(ds: ClipDataset) -> str:
    """A dataset's game: its source store's env id when the store can still be read, else the folder's name."""
    return ds.env_id or Path(ds.folder).resolve().name


def _fingerprint(ds: ClipDataset) -> str:
    """sha256 of clips.jsonl as written without the keys per frame, which the classifier never reads:
    a judge trained before curation kept the keys still fits the same clips (the same bytes)."""
    lines = (Path(ds.folder) / "clips.jsonl").read_text().splitlines()
    kept = "".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "keys"}) + "\n" for line in lines)
    return hashlib.sha256(kept.encode()).hexdigest()


def check_inputs(model_dir: Path, data: list[Path], out: Path, cfg: ClipEvalConfig,
                 classifier_dir: Path | list[Path] | None = None, instruct_dir: Path | None = None,
                 judge_data: list[Path] = ()) -> Inputs:
    """Open and check everything; a UserError (one line) for anything wrong, before anything is written.
    ``classifier_dir``: the judge of an earlier eval, or several, scoring as one panel. ``judge_data``:
    more clip datasets of the same games whose clips all train the judge and none is evaluated (more
    of each map for it to know; the evaluated clips stay those of ``data``)."""
    from ..models.clip_model import ClipModel
    from ..train.clip import open_datasets

    cfg.check()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} exists and is not empty", "pick a new folder for the report")
    parent = out.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):  # found now, not after an hour of sampling
        raise UserError(f"cannot write {out}: {parent} is {'not a folder' if not parent.is_dir() else 'read-only'}",
                        "pick a writable --out")
    meta, _ = ClipModel.read_meta(model_dir)
    paths, extra = [Path(p) for p in data], [Path(p) for p in judge_data]
    if not paths:
        raise UserError("clip eval needs a clip dataset (--data)", "pass one --data per game")
    if len({p.resolve() for p in paths + extra}) < len(paths + extra):
        raise UserError("a clip dataset is given twice (--data, --judge-data)", "pass each dataset once")
    if extra and classifier_dir:
        raise UserError("--judge-data trains the judge, and --classifier gives one already",
                        "leave out --judge-data, or --classifier to train the judge here")
    sets, _ = open_datasets(paths + extra)
    ds = sets[0]
    if (ds.clip_frames, ds.height, ds.width) != (meta.frames, meta.height, meta.width) or abs(ds.fps - meta.fps) > 1e-6:
        raise UserError(f"the clips in {paths[0]} are {ds.clip_frames} frames of {ds.width}x{ds.height} at "
                        f"{ds.fps:g} fps, the model makes {meta.frames} of {meta.width}x{meta.height} at {meta.fps:g}",
                        "evaluate on clip datasets curated at the model's size, length and rate")
    if meta.frames <= cfg.context:
        raise UserError(f"the model makes {meta.frames}-frame clips, too short to continue from {cfg.context} "
                        "frames", "evaluate a model trained on longer clips, or pass a shorter --context")
    given = [classifier_dir] if isinstance(classifier_dir, (str, Path)) else list(classifier_dir or [])
    classifier = judge_panel([load_judge(d) for d in given]) if given else None
    games: dict[str, Game] = {}
    labels, split_by = [game_label(ds) for ds in sets], []
    for d, (path, ds) in enumerate(zip(paths, sets[:len(paths)])):
        game = games.setdefault(labels[d], Game(labels[d]))
        train, held, by = _split(ds, path, classifier, cfg)
        game.train += [(d, i) for i in train]
        game.heldout += [(d, i) for i in held]
        split_by.append(by)
    for d in range(len(paths), len(sets)):
        if labels[d] not in games:
            raise UserError(f"--judge-data {extra[d - len(paths)]} is of {labels[d]}, which no --data dataset is",
                            "pass judge data of the evaluated games only")
        games[labels[d]].train += [(d, i) for i in range(len(sets[d]))]
        split_by.append("judge")
    paths += extra
    for g in games.values():
        if not g.heldout or (classifier is None and not g.train):
            raise UserError(f"the game {g.label} has {len(g.train) + len(g.heldout)} clip(s): too few to train the "
                            "classifier on some and evaluate on others", "curate more clips of it (at least 2)")
    if classifier is not None and sorted(classifier.games) != sorted(games):
        raise UserError(f"the classifier in {', '.join(map(str, given))} knows the games "
                        f"{', '.join(classifier.games)}; the datasets are of {', '.join(games)}", "pass the same games, or leave out --classifier")
    return Inputs(Path(model_dir), paths, sets, list(games.values()), labels, split_by, classifier,
                  None if instruct_dir is None else Path(instruct_dir))


def _split(ds: ClipDataset, path: Path, classifier: ClipClassifier | None, cfg: ClipEvalConfig):
    """A dataset's split: drawn here, or the given classifier's (its training clips are never evaluated)."""
    if classifier is None:
        return split_clips(ds, cfg.seed, cfg.heldout_share)
    seen = next((t for t in classifier.trained_on if t["path"] == str(path.resolve())), None)
    if seen is None:
        return [], list(range(len(ds))), "classifier"  # a dataset the classifier never saw: all held out
    if seen["fingerprint"] != _fingerprint(ds):
        raise UserError(f"the clip dataset {path} changed since the classifier trained on it",
                        "leave out --classifier to train a new one")
    trained = set(seen["clips"])
    return sorted(trained), [i for i in range(len(ds)) if i not in trained], "classifier"


# -- the classifier -----------------------------------------------------------------------------------
def fit_judges(inp: Inputs, cfg: ClipEvalConfig, report=lambda step, total, loss: None) -> ClipClassifier | JudgePanel:
    """``cfg.judges`` classifiers on the same clips, from seeds classifier.seed + k: one, or their panel."""
    seeds = [replace(cfg, classifier=replace(cfg.classifier, seed=cfg.classifier.seed + k)) for k in range(cfg.judges)]
    return judge_panel([fit_classifier(inp, c, report) for c in seeds])


def fit_classifier(inp: Inputs, cfg: ClipEvalConfig, report=lambda step, total, loss: None) -> ClipClassifier:
    """Train the classifier on (at most ``max_train_clips`` per game of) the games' training clips."""
    from ..train.world_model import seed_of

    c = cfg.classifier
    ds0 = inp.sets[0]
    size = input_size(ds0.height, ds0.width, c.width)
    picks = frame_picks(ds0.clip_frames, c.frames_per_clip)
    frames, labels, views = [], [], []
    for k, game in enumerate(inp.games):
        rng = np.random.default_rng(seed_of(cfg.seed, 2, _key(game.label)))
        chosen = [game.train[j] for j in sorted(rng.permutation(len(game.train))[:c.max_train_clips])]
        for d, i in chosen:
            frames.append(shrink(inp.sets[d].frames(i)[picks], size))  # (T, h, w, 3)
            labels.append(k)
            views.append(objects_in_view(inp.sets[d].meta(i).get("captions", {}).get("fields", {})))
    trained_on = [{"path": str(p.resolve()), "game": label, "fingerprint": _fingerprint(ds),
                   "clips": sorted(i for g in inp.games for d, i in g.train if inp.sets[d] is ds)}
                  for p, ds, label in zip(inp.paths, inp.sets, inp.labels)]
    data = TrainingClips(np.stack(frames), np.array(labels), views)
    return train_classifier(data, [g.label for g in inp.games], c, trained_on, report)


# -- measuring ----------------------------------------------------------------------------------------
@dataclass
class Clip:
    """One evaluated held-out clip and what was made from it."""

    game: int  # index into the classifier's games
    dataset: int
    index: int
    prompt: str
    seed: int
    real: np.ndarray  # (F, H, W, 3) uint8
    codec: np.ndarray  # the codec's reconstruction of ``real``
    made: np.ndarray  # text-to-clip from ``prompt``
    continued: np.ndarray  # ``real``'s first frames continued with ``prompt``
    used: int  # context frames the continuation held
    chain: list[np.ndarray] = field(default_factory=list)  # --chain: each further continuation (F, H, W, 3)


def _key(label: str) -> int:
    """A game's part of the seeds: its draws do not depend on the order the datasets are given in."""
    return zlib.crc32(label.encode())


def heldout_order(game: Game, cfg: ClipEvalConfig) -> list[tuple[int, int]]:
    """The game's held-out clips in a seeded order: the first ``clips_per_game`` are evaluated, the
    first ``ceiling_clips`` measure the classifier."""
    from ..train.world_model import seed_of

    rng = np.random.default_rng(seed_of(cfg.seed, 1, _key(game.label)))
    return [game.heldout[j] for j in rng.permutation(len(game.heldout))]


def make_clips(model, inp: Inputs, games: list[str], cfg: ClipEvalConfig, advance=lambda n: None,
               steer=None) -> list[Clip]:
    """Generate from each evaluated clip's caption, continue it, and reconstruct it through the codec.
    ``steer`` (engine.clip.Steering): InstructNet in the continuations, as `clip continue --instruct` runs
    it; text-to-clip is the base's alone, as in `clip play` (stage 2 trains InstructNet on continuation only)."""
    from ..engine.clip import context_frames_used, continue_clip, generate
    from ..train.clip import caption_of
    from ..train.world_model import seed_of

    used = context_frames_used(model, cfg.context)
    clips = []
    for game in inp.games:
        for n, (d, i) in enumerate(heldout_order(game, cfg)[:cfg.clips_per_game]):
            real = inp.sets[d].frames(i)
            prompt = caption_of(inp.sets[d].meta(i), model.meta.training.get("captions", "structured"))
            seed = seed_of(cfg.seed, 3, _key(game.label), n)
            with torch.inference_mode():
                codec = model.codec.decode_clip(model.codec.encode_clip(real))
            made = generate(model, prompt, seed, cfg.steps, cfg.guidance)
            advance(1)
            continued = continue_clip(model, real[:used], prompt, seed, cfg.steps, cfg.guidance, steer=steer,
                                      context_noise=cfg.context_noise)
            advance(1)
            clips.append(Clip(games.index(game.label), d, i, prompt, seed, real, codec, made, continued, used))
            if cfg.chain:
                clips[-1].chain = chain(model, clips[-1], cfg)
                advance(cfg.chain)
    return clips


def _objects(preds, views, vocab) -> dict:
    """Prompted objects detected, and objects the caption says are absent detected anyway (p >= 0.5)."""
    named, absent = [], []
    for p, v in zip(preds, views):
        if v is None:
            continue
        for k, (name, category) in enumerate(vocab):
            if name in v.names:
                named.append(bool(p.objects[k] >= 0.5))
            elif v.absent(name, category):
                absent.append(bool(p.objects[k] >= 0.5))
    return {"detected": share(named), "false_positive_rate": share(absent)}


def _motion(frames: list[np.ndarray]) -> dict:
    ms = [motion(f) for f in frames]
    return {"dynamic_degree": share([m.dynamic for m in ms]),
            "motion_smoothness": {"value": float(np.mean([m.smoothness for m in ms])), "n": len(ms),
                                  "p5_p95": [float(v) for v in np.percentile([m.smoothness for m in ms], [5, 95])]},
            "mean_flow": {"value": float(np.mean([m.mean_flow for m in ms])), "n": len(ms)},
            "per_clip": [asdict(m) for m in ms]}


def measure(clf: ClipClassifier, inp: Inputs, clips: list[Clip], cfg: ClipEvalConfig) -> dict:
    """Every figure of the report, from the frames."""
    G, vocab = len(clf.games), clf.objects
    views = [objects_in_view(inp.sets[c.dataset].meta(c.index)["captions"].get("fields", {})) for c in clips]
    made = [clf.predict(c.made) for c in clips]
    codec = [clf.predict(c.codec) for c in clips]
    ceiling, ceiling_views, ceiling_games = _ceiling(clf, inp, cfg)
    per_game = {}
    for g in range(G):
        mine = [j for j, c in enumerate(clips) if c.game == g]
        per_game[clf.games[g]] = {
            "text_to_clip": share([made[j].game == g for j in mine]),
            "real_heldout": share([p.game == g for p, t in zip(ceiling, ceiling_games) if t == g]),
            "codec": share([codec[j].game == g for j in mine])}
    counts = np.bincount([c.game for c in clips], minlength=G)
    res = {"game_accuracy": {"text_to_clip": share([p.game == c.game for p, c in zip(made, clips)]),
                             "real_heldout": share([p.game == t for p, t in zip(ceiling, ceiling_games)]),
                             "codec": share([p.game == c.game for p, c in zip(codec, clips)]),
                             "chance_uniform": 1.0 / G, "chance_majority": float(counts.max() / counts.sum()),
                             "target": TARGETS["game_accuracy"], "per_game": per_game}}
    if vocab:
        res["objects"] = {"text_to_clip": _objects(made, views, vocab),
                          "real_heldout": _objects(ceiling, ceiling_views, vocab),
                          "codec": _objects(codec, views, vocab)}
    res["continuation"] = _continuation(clf, clips)
    if cfg.chain:
        res["chain"] = measure_chain(clf, clips)
    res["motion"] = {"text_to_clip": _motion([c.made for c in clips]),
                     "continuation": _motion([c.continued for c in clips]),
                     "real_heldout": _motion([c.real for c in clips]), "codec": _motion([c.codec for c in clips])}
    real = res["motion"]["real_heldout"]
    dd = real["dynamic_degree"]
    res["motion"]["real_range"] = {"dynamic_degree": list(wilson(round(dd["value"] * dd["n"]), dd["n"])),
                                   "motion_smoothness": real["motion_smoothness"]["p5_p95"]}
    res["clips"] = [_clip_row(clf, inp, c, m, r, v) for c, m, r, v in zip(clips, made, codec, views)]
    return res


def _ceiling(clf: ClipClassifier, inp: Inputs, cfg: ClipEvalConfig) -> tuple[list, list, list]:
    """The judge on up to ``ceiling_clips`` real held-out clips a game: (predictions, objects in view, games)."""
    preds, views, games = [], [], []
    for game in inp.games:
        for d, i in heldout_order(game, cfg)[:cfg.ceiling_clips]:
            preds.append(clf.predict(inp.sets[d].frames(i)))
            views.append(objects_in_view(inp.sets[d].meta(i)["captions"].get("fields", {})))
            games.append(clf.games.index(game.label))
    return preds, views, games


def _continuation(clf: ClipClassifier, clips: list[Clip]) -> dict:
    """The game of the new frames against the classifier's game on the real context frames (and the
    true game); the same split of the real clip and of its reconstruction for comparison."""
    new = [clf.predict(c.continued[c.used:]).game for c in clips]
    context = [clf.predict(c.real[:c.used]).game for c in clips]
    real_rest = [clf.predict(c.real[c.used:]).game for c in clips]
    codec = [(clf.predict(c.codec[:c.used]).game, clf.predict(c.codec[c.used:]).game) for c in clips]
    return {"context_frames": clips[0].used if clips else 0,
            "consistency": {"text_to_clip": share([a == b for a, b in zip(new, context)]),
                            "real_heldout": share([a == b for a, b in zip(real_rest, context)]),
                            "codec": share([a == b for a, b in codec]), "target": TARGETS["continuation_consistency"]},
            "true_game": {"text_to_clip": share([a == c.game for a, c in zip(new, clips)]),
                          "real_heldout": share([a == c.game for a, c in zip(real_rest, clips)]),
                          "codec": share([b == c.game for (_, b), c in zip(codec, clips)])}}


def judge_figures(clf: ClipClassifier, inp: Inputs, clips: list[Clip], cfg: ClipEvalConfig) -> dict:
    """One judge's game accuracy and continuation consistency, on the clips and on the real ones."""
    preds, _, games = _ceiling(clf, inp, cfg)
    cons = _continuation(clf, clips)["consistency"]
    return {"seed": clf.config.seed, "game_accuracy": share([clf.predict(c.made).game == c.game for c in clips]),
            "real_heldout": share([p.game == g for p, g in zip(preds, games)]),
            "consistency": cons["text_to_clip"], "real_consistency": cons["real_heldout"]}


def _clip_row(clf, inp, c: Clip, made, codec, view) -> dict:
    named = [n for n, _ in clf.objects if view is not None and n in view.names]
    return {"game": clf.games[c.game], "dataset": str(inp.paths[c.dataset]), "clip": c.index, "seed": c.seed,
            "prompt": c.prompt, "prompt_objects": named, "text_to_clip_game": clf.games[made.game],
            "text_to_clip_p_prompted": float(made.game_probs[c.game]), "codec_game": clf.games[codec.game],
            "text_to_clip_objects": [n for k, (n, _) in enumerate(clf.objects) if made.objects[k] >= 0.5]}


def unavailable(clips: list[Clip], cfg: ClipEvalConfig) -> dict:
    """The paper's measures we cannot compute offline; FVD when the I3D file is there."""
    from .fvd import fvd, load_i3d

    out = {name: UNAVAILABLE for name in ("FID (Inception)", "text-video alignment (experts, PLLaVA)",
                                          "user preference (experts)", "subject consistency (DINO)",
                                          "imaging quality (MUSIQ)", "VBench motion smoothness (AMT)")}
    detector, why = load_i3d(cfg.i3d)
    if detector is None:
        out["FVD (I3D)"] = why  # "unavailable: I3D weights not found at ... (we never download them)"
    elif len(clips) < 2:
        out["FVD (I3D)"] = "unavailable: FVD needs at least 2 generated clips"
    else:
        real, made = np.stack([c.real for c in clips]), np.stack([c.made for c in clips])  # (n, F, H, W, 3)
        out["FVD (I3D)"] = {"value": fvd(detector, real, made), "n": len(clips),
                            "note": "text-to-clip against the real held-out clips they were prompted from"}
    return out


# -- the whole evaluation -----------------------------------------------------------------------------
def _null_bar(what: str, total: int):
    return contextlib.nullcontext(lambda n: None)


def evaluate_clips(inp: Inputs, cfg: ClipEvalConfig, bar: Callable = _null_bar, device: str | None = None):
    """(report dict, strips {name: image}, classifier) of the checked inputs."""
    from ..engine.clip import check_context
    from ..models.clip_model import ClipModel

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model = ClipModel.from_pretrained(inp.model_dir, device)
    check_context(model, cfg.context)
    steer = None
    if inp.instruct is not None:  # every control off: what attaching InstructNet alone does
        from ..engine.clip import Steering
        from ..models.instruct_model import InstructModel

        steer = Steering(InstructModel.from_pretrained(inp.instruct, model, device))  # refuses another base's
    clf = inp.classifier
    if clf is None:
        what = "classifier" if cfg.judges == 1 else f"{cfg.judges} judges"
        with bar(what, cfg.judges * cfg.classifier.steps) as advance:
            clf = fit_judges(inp, cfg, lambda s, n, loss: advance(1))
    total = sum(min(cfg.clips_per_game, len(g.heldout)) for g in inp.games)
    with bar("clips (text-to-clip, continuation" + (f", {cfg.chain} chained" if cfg.chain else "") + ")",
             (2 + cfg.chain) * total) as advance:
        clips = make_clips(model, inp, clf.games, cfg, advance, steer)
    res = measure(clf, inp, clips, cfg)
    if isinstance(clf, JudgePanel):  # each judge's own figures: how far the panel's would move with one judge
        res["judges"] = [judge_figures(j, inp, clips, cfg) for j in clf.judges]
    res["unavailable"] = unavailable(clips, cfg)
    res.update(about(model, inp, clf, cfg))
    pictures = strips(clf, clips)
    if cfg.chain:
        pictures["chain"] = chain_strip(clf, clips)
    return res, pictures, clf
