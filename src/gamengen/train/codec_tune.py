"""`gamengen clip tune-codec`: fine-tune the codec's two decoders on pixels, both encoders frozen.

A clip model's pictures pass through two decoders: the video VAE's temporal decoder (video latents ->
2D latents, §3.3's 4x in time) and the 2D autoencoder's decoder (2D latents -> pixels). Each was
trained apart, on its own target: the temporal VAE on the 2D latents (train/video_vae.py), the 2D
decoder on real frames' latents. Neither ever saw the other's errors, and both trained briefly. This
stage trains them as one chain, from the video latents the MSDiT learns to make (each clip's scaled
posterior mean, the clip model's own cache) to the clip's real frames, on pixel MSE.

The encoders are frozen, so every video latent stays what it was: a clip model trained on the codec
keeps its training, and gets the tuned decoders by a swap of its codec folder (``--model``). The same
reasoning as `gamengen tune-decoder` (train/decoder.py), one level up.

The clips `gamengen clip eval` holds out from its judge (curate/dataset.py ``split_clips``, its default seed
and share) are never tuned on, so the codec row of that evaluation stays a held-out figure; their
PSNR through the codec, before and after, goes into the codec's meta.

Batches are drawn per step from a generator seeded by (seed, step), so a resumed run replays exactly.

Run folder::

    <run>/config.json          the settings (a resumed run must match them)
    <run>/cache/               the clips' video latents (train/clip_data.py, keyed by codec and data)
    <run>/checkpoints/step-N/  crash-safe checkpoints (train/checkpoint.py)
    <run>/losses.json          the pixel MSE of every step so far
    <run>/model/               the tuned codec, or with --model the clip model with it
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from ..curate.dataset import ClipDataset, split_clips
from ..errors import UserError
from ..models.clip_model import META_FILE as CLIP_META, ClipModel
from ..models.discriminator import PatchDiscriminator, hinge_d_loss
from ..models.video_vae import ClipCodec
from .clip_data import cache_latents, codec_key
from .run import Deadline, RunFolder, descend, end_step, run_steps


@dataclass
class CodecTuneConfig:
    steps: int = 2000
    batch_size: int = 8  # clips per step; the temporal decoder decodes all their frames
    frames_per_clip: int = 4  # of each clip's frames, how many the 2D decoder draws (it is the dear part)
    learning_rate: float = 1e-4  # AdamW; both decoders are trained already
    grad_clip: float = 1.0
    heldout_share: float = 0.25  # `clip eval`'s split (its defaults): these clips are never tuned on
    eval_seed: int = 0
    seed: int = 0
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    max_minutes: float | None = None  # stop this invocation after about this long; the same command resumes
    bf16: bool = False  # autocast of both decoders' passes; may change on resume
    # The weight of a patch discriminator's loss beside the pixel MSE (0: MSE alone), balanced per step by
    # the two losses' gradients at the 2D decoder's last layer as VQGAN does (§3.1, eq. 7); see
    # models/discriminator.py for why.
    adversarial: float = 0.0
    disc_channels: int = 32

    def __post_init__(self):
        if self.batch_size < 1 or self.steps < 0 or self.frames_per_clip < 1 or self.checkpoint_every < 1:
            raise UserError(f"--batch-size {self.batch_size}, --frames-per-clip {self.frames_per_clip}, "
                            f"--steps {self.steps}", "pass positive numbers (steps may be 0)")
        if self.adversarial < 0 or self.disc_channels < 8 or self.disc_channels % 8:
            raise UserError(f"--adversarial {self.adversarial}, discriminator channels {self.disc_channels}",
                            "pass a weight >= 0 (0: pixel MSE alone) and channels a multiple of 8")


def decoders(codec: ClipCodec) -> list[nn.Module]:
    """The parts that turn video latents into pixels: the temporal VAE's decoder half and the 2D AE's
    decoder (with its post-quant conv). Everything else of the codec makes latents and stays frozen."""
    v, ae = codec.vae, codec.frame.ae
    return [v.dec_in, v.decoder, v.dec_out, ae.post_quant_conv, ae.decoder]


def decode_pixels(codec: ClipCodec, v: torch.Tensor, picks: torch.Tensor | None = None) -> torch.Tensor:
    """Scaled video latents (B, L, C_v, h, w) -> pixels (B, k, 3, H, W) in [-1, 1] of the frames ``picks``
    (B, k) of each clip (None: all F), with gradients (``ClipCodec.decode_clip`` is the no-grad path)."""
    z = codec.vae.decode(v / codec.scale)  # (B, F, C, h, w) 2D latents, the frame codec's scale
    if picks is not None:
        z = torch.stack([z[b, picks[b]] for b in range(len(z))])
    B, k = z.shape[:2]
    x = codec.frame.decode_pixels(z.flatten(0, 1))[:, :, :codec.frame.height, :codec.frame.width]
    return x.reshape(B, k, *x.shape[1:])


class TuneClips:
    """The clips of several datasets that `clip eval` does not hold out, with their video latents."""

    def __init__(self, paths: list[Path], codec: ClipCodec, cache: Path, cfg: CodecTuneConfig,
                 stage: Callable[[str], None]):
        self.sets = [ClipDataset.open(p) for p in paths]
        for p, ds in zip(paths, self.sets):
            if (ds.height, ds.width) != (codec.frame.height, codec.frame.width):
                raise UserError(f"{p} holds {ds.width}x{ds.height} clips, the codec is for "
                                f"{codec.frame.width}x{codec.frame.height}", "pass the datasets the codec was made for")
        self.latents = [cache_latents(ds, codec, cache, stage) for ds in self.sets]  # (N, L, C, h, w) float16
        self.train, self.heldout = [], []
        for d, ds in enumerate(self.sets):
            train, held, _ = split_clips(ds, cfg.eval_seed, cfg.heldout_share)
            self.train += [(d, i) for i in train]
            self.heldout += [(d, i) for i in held]
        if not self.train:
            raise UserError("no clip is left to tune on once `clip eval`'s held-out clips are set aside",
                            "curate more clips")

    def pair(self, d: int, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """-> video latents (L, C_v, h, w), real frames (F, 3, H, W) in [-1, 1]."""
        frames = torch.from_numpy(np.asarray(self.sets[d].frames(i))).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        return torch.from_numpy(self.latents[d][i].astype(np.float32)), frames


def step_batch(codec: ClipCodec, clips: TuneClips, cfg: CodecTuneConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch, drawn from (seed, step) alone: (decoded, real) pixels (B, k, 3, H, W), the first with
    gradients into the decoders."""
    rng = np.random.default_rng([cfg.seed, step])
    pairs = [clips.pair(*clips.train[j]) for j in rng.integers(len(clips.train), size=cfg.batch_size)]
    v = torch.stack([p[0] for p in pairs]).to(codec.device)
    F = pairs[0][1].shape[0]
    k = min(cfg.frames_per_clip, F)
    picks = torch.from_numpy(np.stack([np.sort(rng.choice(F, k, replace=False)) for _ in pairs]))
    target = torch.stack([p[1][picks[b]] for b, p in enumerate(pairs)]).to(codec.device)  # (B, k, 3, H, W)
    with torch.autocast(codec.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
        got = decode_pixels(codec, v, picks)
    return got, target


def step_loss(codec: ClipCodec, clips: TuneClips, cfg: CodecTuneConfig, step: int) -> torch.Tensor:
    """Pixel MSE of one batch."""
    got, target = step_batch(codec, clips, cfg, step)
    return nn.functional.mse_loss(got.float(), target)


class Adversary:
    """The patch discriminator and its optimizer; ``step`` makes one step of both sides on one batch."""

    def __init__(self, codec: ClipCodec, params: list[nn.Parameter], cfg: CodecTuneConfig):
        self.codec, self.params, self.cfg = codec, params, cfg
        with torch.random.fork_rng(devices=[]):  # its first weights from the run's seed alone
            torch.manual_seed(cfg.seed)
            self.disc = PatchDiscriminator(cfg.disc_channels).to(codec.device)
        self.opt = torch.optim.Adam(self.disc.parameters(), lr=cfg.learning_rate, betas=(0.5, 0.9))  # VQGAN's betas
        self.last = codec.frame.ae.decoder.conv_out.weight  # where the two losses' gradients are weighed

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            return self.disc(x).float()

    def step(self, clips: TuneClips, step: int, decoder_opt) -> float:
        """Decoders on MSE + weighted adversarial loss, then the discriminator on the same frames. -> MSE."""
        got, target = step_batch(self.codec, clips, self.cfg, step)
        fake, real = got.flatten(0, 1), target.flatten(0, 1)  # (B k, 3, H, W)
        rec = nn.functional.mse_loss(fake.float(), real)
        self.disc.requires_grad_(False)
        adv = -self._logits(fake).mean()
        g_rec, = torch.autograd.grad(rec, self.last, retain_graph=True)
        g_adv, = torch.autograd.grad(adv, self.last, retain_graph=True)
        weight = (g_rec.norm() / (g_adv.norm() + 1e-4)).clamp(max=1e4).detach() * self.cfg.adversarial
        descend(rec + weight * adv, decoder_opt, self.params, self.cfg.grad_clip)
        self.disc.requires_grad_(True)
        d_loss = hinge_d_loss(self._logits(real), self._logits(fake.detach()))
        descend(d_loss, self.opt, self.disc.parameters(), self.cfg.grad_clip)
        return rec.item()


@torch.no_grad()
def heldout_psnr(codec: ClipCodec, clips: TuneClips, per_set: int = 8) -> dict:
    """PSNR (dB, uint8 pixels) of up to ``per_set`` held-out clips of each dataset through the decoders,
    from their video latents: {"clip_psnr", "clips"}."""
    picked = [(d, i) for d in range(len(clips.sets)) for i in [i for dd, i in clips.heldout if dd == d][:per_set]]
    se = 0.0
    for d, i in picked:
        v, real = clips.pair(d, i)
        got = decode_pixels(codec, v[None])[0].cpu()
        se += float((_uint8_values(got) - _uint8_values(real)).square().mean())
    mse = se / max(len(picked), 1)
    return {"clip_psnr": round(float(10 * np.log10(255.0**2 / max(mse, 1e-10))), 3), "clips": len(picked)}


def _uint8_values(x: torch.Tensor) -> torch.Tensor:
    """[-1, 1] pixels -> the values a uint8 picture of them holds (as floats)."""
    return x.clamp(-1, 1).add(1).mul(127.5).round()


def _source(folder: Path) -> tuple[ClipCodec, ClipModel | None]:
    """A codec folder, or a clip model folder (its codec) -> (codec, the model or None)."""
    if (folder / CLIP_META).is_file():
        model = ClipModel.from_pretrained(folder)
        return model.codec, model
    return ClipCodec.load(folder), None


def tune_codec(data: list, source: str | Path, out: str | Path, cfg: CodecTuneConfig,
               report: Callable[[int, int, float], None] = lambda done, total, loss: None,
               warn: Callable[[str], None] = print,
               stage: Callable[[str], None] = lambda message: None) -> ClipCodec:
    """Tune (or resume tuning) the decoders of the codec in ``source`` (a codec folder, or a clip model
    folder) on the clip datasets ``data``; the run folder is ``out``, the result ``out/model``: a codec,
    or the clip model with the tuned codec in place of its own."""
    paths, source, out = [Path(p) for p in data], Path(source), Path(out)
    codec, model = _source(source)
    # The run is keyed by the codec's weights, not by the folder: a finished run re-run with another clip
    # model over the same codec does no step and writes that model with the tuned decoders.
    run = RunFolder(out, {**dataclasses.asdict(cfg), "data": [str(p.resolve()) for p in paths],
                          "codec": codec_key(codec)}, keep=cfg.keep_checkpoints).open()
    clips = TuneClips(paths, codec, out / "cache", cfg, stage)  # latents of the codec as given: the frozen encoders'
    before = heldout_psnr(codec, clips)
    parts = nn.ModuleList(decoders(codec))
    for m in (codec.vae, codec.frame.ae):
        m.requires_grad_(False)
    parts.requires_grad_(True)
    opt = torch.optim.AdamW(parts.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    done, losses, state = run.resume_into(parts, opt, warn)
    if not cfg.adversarial:
        done = run_steps(run, parts, opt, done, losses, cfg.steps, lambda step: step_loss(codec, clips, cfg, step),
                         report, grad_clip=cfg.grad_clip, checkpoint_every=cfg.checkpoint_every,
                         max_minutes=cfg.max_minutes)
    else:
        done = _adversarial_steps(run, codec, clips, parts, opt, cfg, done, losses, state, report)
    parts.requires_grad_(False)
    after = heldout_psnr(codec, clips)
    codec.meta["decoder_tune"] = {"steps": done, "adversarial": cfg.adversarial, "clips": len(clips.train),
                                  "heldout_clips": after["clips"],
                                  "heldout_clip_psnr_before": before["clip_psnr"],
                                  "heldout_clip_psnr_after": after["clip_psnr"]}
    if model is None:
        codec.save(out / "model")
    else:
        model.codec = codec
        model.save_pretrained(out / "model")
    return codec


def _adversarial_steps(run: RunFolder, codec: ClipCodec, clips: TuneClips, parts: nn.ModuleList, opt, cfg: CodecTuneConfig,
                       done: int, losses: list[float], state: dict | None, report) -> int:
    """``run_steps`` with a discriminator beside the decoders: both, and both optimizers, are in the checkpoint."""
    adversary = Adversary(codec, list(parts.parameters()), cfg)
    if state is not None:
        adversary.disc.load_state_dict(state["discriminator"])
        adversary.opt.load_state_dict(state["disc_optimizer"])
    snapshot = lambda: {"step": done, "model": parts.state_dict(), "optimizer": opt.state_dict(),  # noqa: E731
                        "discriminator": adversary.disc.state_dict(), "disc_optimizer": adversary.opt.state_dict(),
                        "losses": losses}
    deadline, last = Deadline(cfg.max_minutes), cfg.steps
    report(done, cfg.steps, losses[-1] if losses else float("nan"))
    while done < last:
        losses.append(adversary.step(clips, done, opt))
        done += 1
        report(done, cfg.steps, losses[-1])
        last, stop = end_step(run, deadline, done, last, cfg.checkpoint_every, snapshot, losses)
        if stop:
            break
    return done
