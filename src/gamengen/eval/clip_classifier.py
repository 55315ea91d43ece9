"""The frame classifier of the offline clip evaluation (eval/clip.py): which game (map or scenario)
a clip shows, and which objects are in view.

GameGen-X measures text-video alignment with expert raters and PLLaVA (§4.3); neither exists
offline. What stands in is a small CNN trained here, in a minute or two on the CPU, on real clips
held apart for it (curate/dataset.py, ``split_clips``): a game head (softmax over the evaluated games) and an objects head
(multi-label over the object names the captions mention most). A clip is classified from all its
frames: the game from the mean of the per-frame logits, each object from the largest per-frame
logit (an object is "in view" of a clip when some frame shows it: multiple-instance pooling).

Object names come from the Frame_Desc field data/captions.py writes ("In view: monsters: imp x2;
items: medikit, 2 more; scenery: .... Mean brightness ..."): each category lists at most a few
names, and "N more" says the list was cut, so an unlisted object counts as absent only when its
category's list is whole. Saved as safetensors + JSON (never pickles)::

    <dir>/classifier.safetensors   the weights
    <dir>/classifier.json          format, version, games, objects, input size, config, trained_on

A panel of judges (``JudgePanel``: trained alike on the same clips, each from its own seed) scores a
clip by their mean probabilities; judges of one setting agree on real clips and not on generated ones,
so one judge's figure carries its seed (docs/gamegen_x.md, "The judge's own spread")::

    <dir>/panel.json               format, version, judges: ["judge-0", "judge-1", ...]
    <dir>/judge-<k>/               one judge each, as above
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..atomic import write_bytes_atomic, write_json_atomic
from ..errors import UserError

FORMAT, VERSION = "gamengen-clip-classifier", 1
WEIGHTS, META = "classifier.safetensors", "classifier.json"
FIX = "pass the classifier/ folder of an earlier `gamengen clip eval` (or leave out --classifier)"
PANEL, PANEL_FORMAT = "panel.json", "gamengen-clip-judge-panel"


@dataclass
class ClassifierConfig:
    # On the eleven curated games (4,473 classifier-train clips, 695 held out): 96 px, 2,000 steps and
    # 400 clips per game are right on 82% of the held-out real clips (the four scenarios 95-100%, the
    # seven maps 42-92%) in about 8 minutes of one core; 64 px, 1,000 steps, 200 clips: 67% on the
    # seven maps alone.
    steps: int = 2000  # Adam steps
    clips_per_step: int = 8  # drawn game first (uniform), then a clip of it: balanced over games
    frames_per_clip: int = 9  # frames kept per training clip, spread over it (17 -> every other frame)
    width: int = 96  # frames are shrunk to this width (never enlarged), aspect kept
    channels: int = 32
    objects: int = 16  # object names in the vocabulary: the most frequent in the training captions
    min_object_clips: int = 3  # ... named by at least this many training clips
    max_train_clips: int = 400  # per game, seeded choice, to bound memory and reading time
    learning_rate: float = 2e-3
    seed: int = 0

    def check(self) -> "ClassifierConfig":
        if min(self.steps, self.clips_per_step, self.frames_per_clip, self.channels, self.max_train_clips) < 1:
            raise UserError("classifier steps, clips per step, frames per clip, channels and training clips must be "
                            ">= 1", "fix the classifier settings (--classifier-steps)")
        if self.width < 8 or self.channels % 8 or self.objects < 0 or self.learning_rate <= 0:
            raise UserError(f"classifier width {self.width} (>= 8), channels {self.channels} (a multiple of 8), "
                            f"objects {self.objects} (>= 0), learning rate {self.learning_rate} (> 0)",
                            "fix the classifier settings")
        return self


# -- objects in view, from the captions ---------------------------------------------------------------
@dataclass(frozen=True)
class InView:
    """What a caption says is in view: names by category, and the categories whose list was cut."""

    names: dict[str, str]  # object name -> category ("monsters", "items", "scenery", "effects")
    cut: frozenset[str]  # categories with "N more": their unlisted objects may be in view too

    def absent(self, name: str, category: str) -> bool:
        """Does the caption say ``name`` is not in view?"""
        return name not in self.names and category not in self.cut


_IN_VIEW = re.compile(r"In view: (.+?)\. Mean brightness")


def objects_in_view(fields: dict) -> InView | None:
    """The objects a clip's caption fields name in view; None where the caption does not know
    (objects not recorded, a video clip)."""
    text = str((fields or {}).get("Frame_Desc", ""))
    if text.startswith("No objects in view"):
        return InView({}, frozenset())
    m = _IN_VIEW.match(text)
    if not m:
        return None
    names, cut = {}, set()
    for part in m.group(1).split("; "):
        category, sep, listed = part.partition(": ")
        if not sep:
            return None  # not the template: better unknown than wrong
        for word in listed.split(", "):
            if re.fullmatch(r"\d+ more", word):
                cut.add(category)
            elif word:
                names[re.sub(r" x\d+$", "", word)] = category
    return InView(names, frozenset(cut))


def object_vocabulary(views: list[InView | None], most: int, min_clips: int) -> list[tuple[str, str]]:
    """[(name, category)] of the ``most`` names the most clips mention (at least ``min_clips``),
    ties by name."""
    counts: dict[tuple[str, str], int] = {}
    for v in views:
        for name, category in (v.names.items() if v else ()):
            counts[(name, category)] = counts.get((name, category), 0) + 1
    ranked = sorted((k for k, n in counts.items() if n >= min_clips), key=lambda k: (-counts[k], k))
    return ranked[:most]


def object_targets(view: InView | None, vocab: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """(K,) float 1/0 targets and (K,) bool mask of the ones the caption settles."""
    target = np.array([float(view is not None and n in view.names) for n, _ in vocab], np.float32)
    known = np.array([view is not None and (n in view.names or view.absent(n, c)) for n, c in vocab], bool)
    return target.reshape(len(vocab)), known.reshape(len(vocab))


# -- the network --------------------------------------------------------------------------------------
def input_size(height: int, width: int, cfg_width: int) -> tuple[int, int]:
    """(h, w) the classifier sees: ``cfg_width`` wide at most, aspect kept, h a multiple of 4."""
    w = min(cfg_width, width)
    return max(8, round(w * height / width / 4) * 4), w


def shrink(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(F, H, W, 3) uint8 -> (F, h, w, 3) uint8 (area averaging)."""
    import cv2

    h, w = size
    if frames.shape[1:3] == (h, w):
        return np.ascontiguousarray(frames)
    return np.stack([cv2.resize(np.ascontiguousarray(f), (w, h), interpolation=cv2.INTER_AREA) for f in frames])


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.GroupNorm(4, cout), nn.SiLU())


class FrameNet(nn.Module):
    """(N, 3, h, w) in [-1, 1] -> game logits (N, G), object logits (N, K). Four 3x3 conv blocks
    (three halve the size) make an (h/8, w/8) feature map. The game head reads the whole map, not
    its average: where floor, walls and ceiling are is much of what tells maps apart. An object's
    logit adds a reading of the whole map (objects belong to places) to the best score of any one
    place (an object counts wherever it is). On the seven curated Freedoom maps (64x48, 1000 steps,
    280 held-out clips): game 75% right (an average-pooled game head: 30%; 1-nearest-neighbour on
    16x12 thumbnails: 45%); objects named by the caption found 69%, absent ones 19% (the whole-map
    reading alone: 63% / 17%; the best place alone: 76% / 59%)."""

    def __init__(self, games: int, objects: int, channels: int, size: tuple[int, int]):
        super().__init__()
        c = channels
        self.body = nn.Sequential(_block(3, c // 2, 1), _block(c // 2, c, 2), _block(c, 2 * c, 2),
                                  _block(2 * c, 2 * c, 2))
        with torch.no_grad():
            features = self.body(torch.zeros(1, 3, *size)).numel()  # 2c x ceil(h/8) x ceil(w/8)
        self.drop = nn.Dropout(0.3)
        self.game = nn.Linear(features, games)
        self.objects_map = nn.Linear(features, objects) if objects else None
        self.objects_place = nn.Conv2d(2 * c, objects, 1) if objects else None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.body(x)  # (N, 2c, h/8, w/8)
        flat = self.drop(m.flatten(1))
        game = self.game(flat)  # (N, G)
        if self.objects_map is None:
            return game, game[:, :0]
        return game, self.objects_map(flat) + self.objects_place(m).amax(dim=(2, 3))  # (N, K)


def _to_input(frames: np.ndarray) -> torch.Tensor:
    """(..., h, w, 3) uint8 -> (N, 3, h, w) float in [-1, 1]."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).reshape(-1, *frames.shape[-3:])
    return x.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def pool(game: torch.Tensor, objects: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-frame logits (B, T, G), (B, T, K) -> per-clip (B, G) mean, (B, K) max."""
    return game.mean(dim=1), objects.amax(dim=1)


@dataclass
class Prediction:
    game: int  # index into ClipClassifier.games
    game_probs: np.ndarray  # (G,)
    objects: np.ndarray  # (K,) probability each vocabulary object is in view of some frame


@dataclass
class ClipClassifier:
    net: FrameNet
    games: list[str]
    objects: list[tuple[str, str]]  # (name, category)
    size: tuple[int, int]  # (h, w) input
    config: ClassifierConfig = field(default_factory=ClassifierConfig)
    trained_on: list[dict] = field(default_factory=list)  # [{"path", "game", "fingerprint", "clips": [i, ...]}]
    loss: float = float("nan")  # the mean loss of the last 50 steps

    @torch.inference_mode()
    def predict(self, frames: np.ndarray) -> Prediction:
        """uint8 (F, H, W, 3), any size (shrunk to ``size``) -> the clip's prediction."""
        self.net.eval()
        game, obj = self.net(_to_input(shrink(np.asarray(frames), self.size)))  # (F, G), (F, K)
        g, o = pool(game[None], obj[None])
        probs = torch.softmax(g[0], -1).numpy()
        return Prediction(int(probs.argmax()), probs, torch.sigmoid(o[0]).numpy())

    @torch.inference_mode()
    def object_probs(self, frames: np.ndarray) -> np.ndarray:
        """uint8 (F, H, W, 3) -> (F, K): the probability each vocabulary object is in view of each frame."""
        self.net.eval()
        _, obj = self.net(_to_input(shrink(np.asarray(frames), self.size)))  # (F, K)
        return torch.sigmoid(obj).numpy()

    def save(self, folder: str | Path) -> None:
        from safetensors.torch import save as save_tensors

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.net.state_dict().items()}
        write_bytes_atomic(folder / WEIGHTS, save_tensors(state))
        write_json_atomic(folder / META, {"format": FORMAT, "version": VERSION, "games": self.games,
                                          "objects": [list(o) for o in self.objects], "size": list(self.size),
                                          "config": asdict(self.config), "trained_on": self.trained_on,
                                          "loss": self.loss})

    @classmethod
    def load(cls, folder: str | Path) -> "ClipClassifier":
        import json

        from safetensors import SafetensorError
        from safetensors.torch import load_file

        folder = Path(folder)
        if (folder / "classifier" / META).is_file():  # an earlier eval's output folder
            folder = folder / "classifier"
        if not (folder / META).is_file():
            raise UserError(f"{folder} holds no clip classifier ({META} missing)", FIX)
        try:
            d = json.loads((folder / META).read_text())
            if d.get("format") != FORMAT or d.get("version") != VERSION:
                raise ValueError(f"format {d.get('format')} version {d.get('version')}")
            cfg = ClassifierConfig(**d["config"])
            objects = [(str(n), str(c)) for n, c in d["objects"]]
            size = tuple(int(v) for v in d["size"])
            net = FrameNet(len(d["games"]), len(objects), cfg.channels, size)
            net.load_state_dict(load_file(folder / WEIGHTS))
            return cls(net.eval(), [str(g) for g in d["games"]], objects, size, cfg,
                       list(d["trained_on"]), float(d.get("loss", float("nan"))))
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, SafetensorError) as e:
            raise UserError(f"the clip classifier in {folder} is damaged ({type(e).__name__}: {str(e)[:100]})",
                            FIX) from None


def _split_of(judge: ClipClassifier) -> dict:
    return {t["path"]: (t["fingerprint"], sorted(t["clips"])) for t in judge.trained_on}


@dataclass
class JudgePanel:
    """Judges trained alike on the same clips (their own seeds), voting by their mean probabilities:
    the same interface as one ClipClassifier, for a figure less tied to any one judge's seed."""

    judges: list[ClipClassifier]

    def __post_init__(self):
        first = self.judges[0]
        for j in self.judges[1:]:
            if j.games != first.games or j.objects != first.objects or _split_of(j) != _split_of(first):
                raise UserError("the judges of a panel trained on different games, objects or clips",
                                "pass judges trained alike on the same datasets (`clip eval --judges N`)")

    games = property(lambda self: self.judges[0].games)
    objects = property(lambda self: self.judges[0].objects)
    size = property(lambda self: self.judges[0].size)
    config = property(lambda self: self.judges[0].config)
    trained_on = property(lambda self: self.judges[0].trained_on)
    loss = property(lambda self: float(np.mean([j.loss for j in self.judges])))

    def predict(self, frames: np.ndarray) -> Prediction:
        """uint8 (F, H, W, 3) -> the mean of the judges' probabilities, and its most likely game."""
        preds = [j.predict(frames) for j in self.judges]
        probs = np.mean([p.game_probs for p in preds], axis=0)  # (G,)
        return Prediction(int(probs.argmax()), probs, np.mean([p.objects for p in preds], axis=0))

    def object_probs(self, frames: np.ndarray) -> np.ndarray:
        """uint8 (F, H, W, 3) -> (F, K), the judges' mean."""
        return np.mean([j.object_probs(frames) for j in self.judges], axis=0)

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        names = [f"judge-{k}" for k in range(len(self.judges))]
        for name, j in zip(names, self.judges):
            j.save(folder / name)
        write_json_atomic(folder / PANEL, {"format": PANEL_FORMAT, "version": VERSION, "judges": names})


def load_judge(folder: str | Path) -> "ClipClassifier | JudgePanel":
    """One judge or a panel, from its folder or an earlier eval's output folder; a UserError if damaged."""
    import json

    folder = Path(folder)
    if (folder / "classifier" / PANEL).is_file() or (folder / "classifier" / META).is_file():
        folder = folder / "classifier"
    if not (folder / PANEL).is_file():
        return ClipClassifier.load(folder)
    try:
        d = json.loads((folder / PANEL).read_text())
        if d.get("format") != PANEL_FORMAT or d.get("version") != VERSION or not d.get("judges"):
            raise ValueError(f"format {d.get('format')} version {d.get('version')}")
        names = [str(n) for n in d["judges"]]
    except (OSError, ValueError, AttributeError) as e:
        raise UserError(f"the judge panel in {folder} is damaged ({type(e).__name__}: {str(e)[:100]})", FIX) from None
    if any(Path(n).name != n or n in (".", "..") for n in names):  # stays inside the folder
        raise UserError(f"the judge panel in {folder} names a judge outside it", FIX)
    return JudgePanel([ClipClassifier.load(folder / n) for n in names])


def judge_panel(judges: list) -> "ClipClassifier | JudgePanel":
    """One judge as itself; several (each one judge or a panel) as one panel of all their judges."""
    flat = [j for x in judges for j in (x.judges if isinstance(x, JudgePanel) else [x])]
    return flat[0] if len(flat) == 1 else JudgePanel(flat)


# -- training -----------------------------------------------------------------------------------------
@dataclass
class TrainingClips:
    """The classifier's training data, frames already shrunk."""

    frames: np.ndarray  # (N, T, h, w, 3) uint8
    games: np.ndarray  # (N,) int game index
    views: list  # (N,) InView | None, from each clip's caption


def train_classifier(data: TrainingClips, games: list[str], cfg: ClassifierConfig, trained_on: list[dict],
                     report=lambda step, total, loss: None) -> ClipClassifier:
    """Train a FrameNet on ``data``: cross-entropy on the clip's mean game logits, binary
    cross-entropy on its max object logits where the caption settles the object. Seeded: the same
    data and config give the same weights."""
    vocab = object_vocabulary(data.views, cfg.objects, cfg.min_object_clips)
    targets = [object_targets(v, vocab) for v in data.views]
    obj_t = torch.from_numpy(np.stack([t for t, _ in targets]))  # (N, K)
    obj_m = torch.from_numpy(np.stack([m for _, m in targets]))  # (N, K) bool
    # Most objects are in view of few clips: weigh each object's positives by its negatives, so the
    # 0.5 threshold balances misses against false alarms instead of always saying "absent".
    pos = (obj_t * obj_m).sum(0)
    weight = ((obj_m.sum(0) - pos) / pos.clamp(min=1)).clamp(1.0, 20.0)  # (K,)
    with torch.random.fork_rng(devices=[]):  # the initial weights from the seed, the caller's RNG untouched
        torch.manual_seed(cfg.seed)
        net = FrameNet(len(games), len(vocab), cfg.channels, tuple(data.frames.shape[2:4]))
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    g = torch.Generator().manual_seed(cfg.seed)
    by_game = [np.nonzero(data.games == k)[0] for k in range(len(games))]
    present = [k for k, idx in enumerate(by_game) if len(idx)]
    labels = torch.from_numpy(data.games.astype(np.int64))
    losses = []
    net.train()
    for step in range(cfg.steps):
        pick = torch.randint(len(present), (cfg.clips_per_step,), generator=g)
        clips = np.array([by_game[present[k]][int(torch.randint(len(by_game[present[k]]), (), generator=g))]
                          for k in pick.tolist()])  # (B,)
        x = _augment(_to_input(data.frames[clips]), g)  # (B * T, 3, h, w)
        B, T = len(clips), data.frames.shape[1]
        game, obj = net(x)
        game, obj = pool(game.view(B, T, -1), obj.view(B, T, -1))  # (B, G), (B, K)
        loss = nn.functional.cross_entropy(game, labels[clips])
        mask = obj_m[clips]
        if mask.any():
            bce = nn.functional.binary_cross_entropy_with_logits(obj, obj_t[clips], reduction="none", pos_weight=weight)
            loss = loss + (bce * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        report(step + 1, cfg.steps, losses[-1])
    net.eval().requires_grad_(False)
    size = tuple(data.frames.shape[2:4])
    return ClipClassifier(net, list(games), vocab, size, cfg, trained_on, float(np.mean(losses[-50:])))


def _augment(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A random shift of up to 2 px and a brightness change of up to 10% per batch: generated frames
    are never pixel-aligned copies of real ones, and the classifier should not need them to be."""
    dy, dx = torch.randint(-2, 3, (2,), generator=g).tolist()
    x = torch.roll(x, (dy, dx), dims=(2, 3))
    scale = 1.0 + 0.2 * (float(torch.rand((), generator=g)) - 0.5)
    return ((x + 1.0) * scale - 1.0).clamp(-1.0, 1.0)


def frame_picks(frames: int, keep: int) -> np.ndarray:
    """``keep`` frame indices spread evenly over a clip of ``frames`` (all of them if fewer)."""
    return np.unique(np.linspace(0, frames - 1, min(keep, frames)).round().astype(int))
