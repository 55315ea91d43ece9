"""`gamengen clip train`: GameGen-X's foundation model, an MSDiT trained with rectified flow (§3.3, §3.5).

Stage A: the frozen caption encoder (§3.3's T5): the one given, else one pretrained here on the
dataset's GEN captions (train/text_encoder.py) and kept in the run. Stage B, the video VAE, is not
trained here: it comes as a codec folder (train/video_vae.py, `gamengen clip train-vae`). Then every
clip is encoded once into video latents and every caption once into text features (caches in the
run, keyed by the weights and the data), and the MSDiT learns, per sample (§3.5, §4.4): text-to-video
(75%) or continuation (25%, the first x of L latent frames held clean, x uniform in 1..L-1), the
caption dropped 25% of the time (all-False mask = MSDiT's null text, for CFG), t logit-normal.
Adam with a fixed learning rate (5e-4, §3.5).  With ``image_share`` > 0 some steps are image steps (§3.5's
length buckets: each clip's first latent frame alone); with ``init`` the MSDiT starts from a clip
model folder's weights (kept on disk while the run resumes: its steps count in the export).

Every draw of step s, sample i comes from a generator seeded by (seed, s, i) (``draw_sample``), so
the run folder (train/run.py) resumes exactly: a run in pieces equals one run of all the steps::

    <run>/config.json, checkpoints/, losses.json   as for `gamengen train`
    <run>/text/                                    the text encoder pretrained here (no --text)
    <run>/cache/latents-<key>.npy                  (N, L, C, h, w) float16 video latents
    <run>/cache/text-<key>.safetensors             the captions' T5 features, ragged
    <run>/model/                                   the clip model (models/clip_model.py)
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..curate.dataset import ClipDataset
from ..diffusion.flow import flow_loss, frame_mask, sample_t
from ..errors import UserError
from ..models.clip_model import CODEC_DIR, TEXT_DIR, ClipModel, ClipModelMeta
from ..models.msdit import MSDIT_PRESETS, MSDiT
from ..models.text_encoder import TEXT_ENCODER_PRESETS, CaptionEncoder
from ..models.video_vae import ClipCodec
from .clip_data import Batch, TextCache, cache_latents, cache_text, codec_key, make_batch, text_key
from .run import RunFolder, run_steps
from .world_model import seed_of

Report = Callable[[int, int, float], None]
CAPTION_KINDS = ("structured", "short")

CLIP_TRAIN_PRESETS = {  # what a preset changes in ClipTrainConfig besides the MSDiT's size
    "tiny": {"text_preset": "tiny", "text_steps": 200, "text_batch_size": 8, "batch_size": 4},
    "cpu": {"text_preset": "cpu", "text_steps": 2000, "text_batch_size": 32, "batch_size": 8},
    # The paper's MSDiT reads T5-XXL (4096 wide); ours reads the widest text encoder we can train.
    "paper": {"text_preset": "cpu", "text_steps": 2000, "text_batch_size": 32, "batch_size": 8},
}


@dataclass
class ClipTrainConfig:
    preset: str = "cpu"  # the MSDiT's size (models/msdit.py MSDIT_PRESETS)
    text_preset: str = "cpu"  # the text encoder pretrained here when none is given
    text_steps: int = 2000  # its span-corruption steps
    text_batch_size: int = 32
    text_learning_rate: float = 1e-3
    steps: int = 2000
    batch_size: int = 8
    learning_rate: float = 5e-4  # §3.5, §4.4: Adam, fixed
    grad_clip: float = 1.0  # the paper gives none; OpenSora, whose recipe GameGen-X follows, clips at 1
    # The exported model holds an exponential moving average of the weights (0: the last weights). The
    # paper names none; OpenSora keeps one (0.9999 over far more steps). Against the last weights of a
    # 3,135-step leg it scored alike (docs/gamegen_x.md, twelfth round); it costs nothing.
    ema_decay: float = 0.999
    text_dropout: float = 0.25  # §3.5: drop the text 25% of the time, for classifier-free guidance
    continuation: float = 0.25  # §3.5: 75% text-to-video, 25% video continuation
    # GameNGen §3.2.1's noise augmentation, on GameGen-X's context frames: a continuation sample's context
    # latents are noised to a flow time s ~ U(0, context_noise) and carry t = s (the network's per-frame
    # timestep tells it the level, as GameNGen's level embedding does), so that it learns to correct the
    # errors its own frames carry when play continues from them. GameNGen's 0.7 maximum std is, in SNR,
    # flow time 0.41. 0: clean context (§3.3, and every run before this option).
    context_noise: float = 0.0
    timesteps: str = "logit_normal"  # diffusion/flow.sample_t: SD3's draw; "uniform" is plain rectified flow
    # "structured": the five GEN fields (§3.2); "short": the Summary field alone, the paper's caption
    # ablation (§4.3: structured captions against short ones)
    captions: str = "structured"
    pooled_text: bool = False  # MSDiT's pooled caption in the conditioning (models/msdit.py), not the paper's
    # §3.5 trains on buckets of length (OpenSora's images and videos). Here a step is an image step with this
    # probability: each clip's first latent frame, which the causal codec encodes from the first video frame
    # alone (models/video_vae.py), so it is a 1-frame clip; batch_size x L of them, the tokens of one clip
    # step. Images show more scenes per step at the same cost: a lever for how each game looks.
    image_share: float = 0.0
    init: str | None = None  # a clip model folder whose MSDiT a new run starts from, with a fresh optimizer
    seed: int = 0
    checkpoint_every: int = 250
    keep_checkpoints: int = 2
    max_minutes: float | None = None  # stop this invocation after about this long; the same command resumes
    # bf16 autocast of the MSDiT's forward pass (weights, Adam and the loss stay fp32). At the cpu preset
    # it was no faster on a 2-core AVX-512 CPU (docs/gamegen_x.md): its matrices are too small; it is
    # for wider presets. How fast, not what is learned, so it may change on resume.
    bf16: bool = False

    def __post_init__(self) -> None:
        if self.preset not in MSDIT_PRESETS:
            raise UserError(f"unknown clip model preset '{self.preset}'", "use one of: " + ", ".join(MSDIT_PRESETS))
        if self.text_preset not in TEXT_ENCODER_PRESETS:
            raise UserError(f"unknown text encoder preset '{self.text_preset}'",
                            "use one of: " + ", ".join(TEXT_ENCODER_PRESETS))
        if self.steps < 0 or self.batch_size < 1 or self.text_steps < 1 or self.checkpoint_every < 1:
            raise UserError("steps must be >= 0, batch size, text steps and checkpoint cadence >= 1",
                            "fix the training settings")
        if (not all(0 <= p <= 1 for p in (self.text_dropout, self.continuation, self.image_share))
                or self.learning_rate <= 0):
            raise UserError("text dropout, continuation and image shares must be in [0, 1], the learning rate > 0",
                            "fix the training settings")
        if not 0 <= self.context_noise < 1:
            raise UserError(f"context noise {self.context_noise} is not in [0, 1)", "pass --context-noise 0.4, or 0")
        if not 0 <= self.ema_decay < 1:
            raise UserError(f"EMA decay {self.ema_decay} is not in [0, 1)", "pass --ema-decay 0.999, or 0 for none")
        if self.captions not in CAPTION_KINDS:
            raise UserError(f"unknown caption kind '{self.captions}'", "use structured or short")
        if self.timesteps not in ("logit_normal", "uniform"):
            raise UserError(f"unknown timestep draw '{self.timesteps}'", "use logit_normal or uniform")

    @classmethod
    def from_preset(cls, preset: str, **changes) -> "ClipTrainConfig":
        if preset not in CLIP_TRAIN_PRESETS:
            raise UserError(f"unknown clip model preset '{preset}'", "use one of: " + ", ".join(CLIP_TRAIN_PRESETS))
        return cls(**{"preset": preset, **CLIP_TRAIN_PRESETS[preset], **changes})


@dataclass
class SampleDraw:
    """Everything random about one training sample."""

    clip: int  # index into the clip dataset
    context: int  # latent frames held clean: 0 = text-to-video, 1..L-1 = continuation (§3.3's x)
    drop_text: bool  # train on the null caption (§3.5's text dropout)
    t: float  # the flow time of the generated frames, in (0, 1)
    noise: torch.Tensor  # (L, C, h, w); on the context frames, their noise when context_t > 0
    context_t: float = 0.0  # the flow time the context latents are noised to (``context_noise``)


def draw_sample(cfg: ClipTrainConfig, step: int, i: int, n_clips: int, latent_shape: tuple[int, ...]) -> SampleDraw:
    """Sample i of step ``step``, from a generator seeded by (seed, step, i). The same numbers are
    drawn whatever the outcome, in a fixed order, so each is independent of the others."""
    g = torch.Generator().manual_seed(seed_of(cfg.seed, step, i))
    clip = int(torch.randint(n_clips, (), generator=g))
    u_task, u_text = torch.rand(2, generator=g).tolist()
    L = latent_shape[0]
    x = int(torch.randint(1, max(L, 2), (), generator=g))  # 1..L-1; a 1-frame clip cannot be continued
    t = float(sample_t(1, g, cfg.timesteps)[0])
    noise = torch.randn(latent_shape, generator=g)
    continued = u_task < cfg.continuation and L > 1
    u_context = float(torch.rand((), generator=g))  # drawn last: the draws above are those of every earlier run
    return SampleDraw(clip, x if continued else 0, u_text < cfg.text_dropout, t, noise,
                      u_context * cfg.context_noise if continued else 0.0)


def step_length(cfg: ClipTrainConfig, step: int, L: int) -> int:
    """Latent frames of every sample of step ``step``: 1 (an image step) with probability image_share,
    else L. Drawn from its own generator, so runs without image steps draw exactly as before."""
    if not cfg.image_share or L == 1:
        return L
    g = torch.Generator().manual_seed(seed_of(cfg.seed, step, 0, 1))  # 4 parts: never a draw_sample stream
    return 1 if float(torch.rand((), generator=g)) < cfg.image_share else L


def batch_loss(net: MSDiT, batch: Batch, cond: dict[str, torch.Tensor]) -> torch.Tensor:
    """§3.3's masked flow loss: the velocity on the generated frames, context frames clean at t = 0."""
    B, L = batch.z.shape[:2]

    def model(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return net(x, t, batch.hidden, batch.text_mask, **cond)

    mask = frame_mask(B, L, batch.context, device=batch.z.device)
    return flow_loss(model, batch.z, batch.noise, batch.t, mask, batch.context_t)


def caption_of(meta: dict, kind: str = "structured") -> str:
    """A clip's training caption (one line of clips.jsonl): its GEN text, or its Summary alone."""
    c = meta["captions"]
    return c["caption"] if kind == "structured" else c["fields"]["Summary"]


def open_datasets(clips: list[Path], kind: str = "structured") -> tuple[list[ClipDataset], list[str]]:
    """The clip datasets (one per game, say; all of one clip length, size and rate) and their
    captions of ``kind`` in dataset order; a UserError for anything that cannot train together."""
    sets = [ClipDataset.open(c) for c in clips]
    first, captions = sets[0], []
    for c, ds in zip(clips, sets):
        if not len(ds):
            raise UserError(f"the clip dataset {c} holds no clips", "curate more gameplay with `gamengen curate`")
        if (ds.clip_frames, ds.height, ds.width, ds.fps) != (first.clip_frames, first.height, first.width, first.fps):
            raise UserError(f"the clip datasets {clips[0]} and {c} differ: {first.clip_frames} vs {ds.clip_frames} "
                            f"frames of {first.width}x{first.height} vs {ds.width}x{ds.height} at {first.fps:g} vs "
                            f"{ds.fps:g} fps", "curate them with the same --clip-frames, --resolution and --fps")
        try:
            captions += [caption_of(ds.meta(i), kind) for i in range(len(ds))]
        except (KeyError, TypeError):
            raise UserError(f"the clips in {c} have no GEN captions", "re-run `gamengen curate`") from None
    return sets, captions


def _inputs(clips: list[Path], codec_dir: Path | None, kind: str) -> tuple[list[ClipDataset], ClipCodec, list[str]]:
    """The clip datasets, the codec (checked against them) and the captions, before any write."""
    sets, captions = open_datasets(clips, kind)
    if codec_dir is None:
        raise UserError("clip training needs a video codec (--codec)",
                        "train one with `gamengen clip train-vae --data STORE --ae AE --out RUN`, pass RUN/model")
    codec = ClipCodec.load(codec_dir)
    ds = sets[0]
    if (codec.frame.height, codec.frame.width) != (ds.height, ds.width):
        raise UserError(f"the codec in {codec_dir} is for {codec.frame.width}x{codec.frame.height} frames, the clips "
                        f"in {clips[0]} are {ds.width}x{ds.height}", "pass a codec trained on frames of this size")
    codec.latent_shape(ds.clip_frames)  # a UserError for clips that are not 1 + 4k frames
    return sets, codec, captions


def _own_text_encoder(cfg: ClipTrainConfig, run_text: Path, captions: list[str],
                      stage: Callable[[str], None]) -> CaptionEncoder:
    """Stage A without --text: the encoder this run pretrained before, or a new one (saved first)."""
    if run_text.is_dir():
        return CaptionEncoder.load(run_text)
    stage(f"pretraining the {cfg.text_preset} text encoder on {len(captions)} GEN captions ({cfg.text_steps} steps)")
    from .text_encoder import pretrain

    enc = pretrain(captions, cfg.text_preset, cfg.text_steps, cfg.text_batch_size, cfg.text_learning_rate, cfg.seed)
    enc.save(run_text)
    return enc


def _env_ids(sets: list[ClipDataset], codec: ClipCodec) -> list[str]:
    """The games of the clips: each source store's env id that can still be read, else the codec's."""
    games = [e for e in dict.fromkeys(ds.env_id for ds in sets) if e]  # each store opened once
    return games or ([codec.meta["env_id"]] if codec.meta.get("env_id") else [])


def _init_model(cfg: ClipTrainConfig, codec: ClipCodec, encoder: CaptionEncoder, latent_channels: int) -> ClipModel | None:
    """The ``cfg.init`` model, checked against this run before anything is written (and on every resume,
    since its steps count in the export): a model of another size, codec or text encoder is refused."""
    if not cfg.init:
        return None
    folder = Path(cfg.init)
    other = ClipModel.from_pretrained(folder)
    fix = ("pass --init a clip model of the same --preset and --pooled-text, over the same codec and text "
           "encoder, or leave --init out")
    if codec_key(other.codec) != codec_key(codec):
        raise UserError(f"the clip model in {folder} was trained on other latents (its codec is not --codec's)", fix)
    if text_key(other.text) != text_key(encoder):
        raise UserError(f"the clip model in {folder} reads another text encoder than this run's", fix)
    mine = {**MSDIT_PRESETS[cfg.preset], "latent_channels": latent_channels, "text_dim": encoder.width,
            "pooled_text": cfg.pooled_text}
    theirs = {k: other.net.config.get(k) for k in mine}
    if theirs != mine:
        raise UserError(f"the clip model in {folder} is a {other.meta.presets.get('msdit')} MSDiT "
                        f"(pooled text {theirs['pooled_text']}), not this run's {cfg.preset} "
                        f"(pooled text {cfg.pooled_text})", fix)
    return other


def _upgrade(old: dict) -> None:
    old.setdefault("ema_decay", 0.0)  # runs from before the EMA exported their last weights
    old.setdefault("context_noise", 0.0)  # and from before context noise: clean context


def train_clip(clips: str | Path | list, out: str | Path, cfg: ClipTrainConfig, report: Report = lambda s, n, loss: None,
               warn: Callable[[str], None] = print, codec: str | Path | None = None, text: str | Path | None = None,
               *, stage: Callable[[str], None] = lambda message: None) -> ClipModel:
    """Train (or resume) the clip model on the clip dataset ``clips`` (or a list of them, as one); the
    run folder is ``out``, the model ``out/model``. ``report(step, steps, loss)`` after every step; ``stage(message)`` before
    each slow set-up stage (text pretraining, the caches)."""
    clips = [Path(c) for c in (clips if isinstance(clips, (list, tuple)) else [clips])]
    out = Path(out)
    codec_dir, text_dir = (Path(codec) if codec else None), (Path(text) if text else None)
    if cfg.init:  # a model folder holds its own codec and text encoder: the defaults for a run started from it
        codec_dir = codec_dir or Path(cfg.init) / CODEC_DIR
        text_dir = text_dir or Path(cfg.init) / TEXT_DIR
    sets, clip_codec, captions = _inputs(clips, codec_dir, cfg.captions)
    ds, data = sets[0], [str(c.resolve()) for c in clips]
    given = CaptionEncoder.load(text_dir) if text_dir else None  # refused before the run folder is made
    init = _init_model(cfg, clip_codec, given, clip_codec.vae.config.video_channels)  # --init implies --text
    init_steps = init.meta.train_steps if init else 0
    fresh = not out.exists()
    run = RunFolder(out, {**dataclasses.asdict(cfg), "data": data[0] if len(data) == 1 else data, "codec": str(codec_dir.resolve()),
                          "text": str(text_dir.resolve()) if text_dir else None}, keep=cfg.keep_checkpoints,
                    upgrade=_upgrade).open()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:  # a caption the text encoder refuses (too long) is found only here: leave no new run behind
        encoder = given or _own_text_encoder(cfg, out / "text", captions, stage)
        clip_codec.frame.ae.to(device)
        clip_codec.vae.to(device)
        latents = np.concatenate([cache_latents(d, clip_codec, out / "cache", stage) for d in sets])  # (N, L, C, h, w)
        features: TextCache = cache_text(captions, encoder, out / "cache", stage)
    except UserError:
        if fresh:
            shutil.rmtree(out, ignore_errors=True)
        raise
    shape = tuple(latents.shape[1:])
    with torch.random.fork_rng(devices=[]):  # initial weights from the seed, the caller's RNG untouched
        torch.manual_seed(cfg.seed)
        net = MSDiT(**{**MSDIT_PRESETS[cfg.preset], "latent_channels": shape[1], "text_dim": encoder.width,
                       "pooled_text": cfg.pooled_text})
    net.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    done, losses, state = run.resume_into(net, opt, warn)  # every draw is keyed by step: no RNG state to restore
    if init is not None and not done:
        net.load_state_dict(init.net.state_dict())
    del init  # its weights are in net now
    ema = None
    if cfg.ema_decay:
        from diffusers.training_utils import EMAModel

        ema = EMAModel(net.parameters(), decay=cfg.ema_decay)  # from the first weights (init's, if given)
        if state is not None:
            ema.load_state_dict(state["ema"])
    dataset = ({"path": data[0], "source": ds.info.get("source"), "clips": len(ds)} if len(sets) == 1 else
               {"paths": data, "sources": [d.info.get("source") for d in sets], "clips": len(latents)})
    meta = ClipModelMeta(ds.clip_frames, ds.fps, ds.height, ds.width, _env_ids(sets, clip_codec), dataset,
                         init_steps + done,
                         {"msdit": cfg.preset, "text": encoder.preset, "video_vae": clip_codec.meta.get("preset"),
                          "ae": clip_codec.frame.meta.get("preset")},
                         {"text_dropout": cfg.text_dropout, "continuation": cfg.continuation,
                          "timesteps": cfg.timesteps, "captions": cfg.captions, "learning_rate": cfg.learning_rate, "batch_size": cfg.batch_size,
                          "image_share": cfg.image_share, "ema_decay": cfg.ema_decay,
                          "context_noise": cfg.context_noise})
    model = ClipModel(net, clip_codec, encoder, meta)
    L, r = shape[0], clip_codec.vae.temporal_compression
    per_step = {n: cfg.batch_size * L // n for n in {1, L}}  # samples of n latent frames: the tokens of batch_size clips
    cond = {n: model.conditions(b, frames=1 + r * (n - 1)) for n, b in per_step.items()}
    net.train()

    def step_loss(step: int) -> torch.Tensor:
        n = step_length(cfg, step, L)
        draws = [draw_sample(cfg, step, i, len(latents), (n, *shape[1:])) for i in range(per_step[n])]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            return batch_loss(net, make_batch(draws, latents, features, device), cond[n])

    done = run_steps(run, net, opt, done, losses, cfg.steps, step_loss, report, grad_clip=cfg.grad_clip,
                     checkpoint_every=cfg.checkpoint_every, max_minutes=cfg.max_minutes, ema=ema)
    if ema is not None:
        ema.copy_to(net.parameters())  # the export is the average; the last weights stay in the checkpoint
    net.eval().requires_grad_(False)
    model.meta.train_steps = init_steps + done
    note = "\nTrained on the clip dataset" + ("s " if len(clips) > 1 else " ") + ", ".join(f"`{c}`" for c in clips) + ".\n"
    if cfg.init:
        note += (f"Started from the MSDiT of `{Path(cfg.init).name}` ({init_steps} steps), then trained {done} "
                 "steps with a fresh optimizer.\n")
    if ema is not None:
        note += f"Its weights are the exponential moving average of training's (decay {cfg.ema_decay:g}).\n"
    model.save_pretrained(out / "model", model.default_card() + note)
    return model
