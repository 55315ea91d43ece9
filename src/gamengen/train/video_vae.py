"""Train GameGen-X's video VAE (§3.3) as a temporal VAE over the frozen 2D autoencoder's latents.

Clips of F = 1 + 4k frames are drawn from the store's training episodes (the held-out ones, by
data/latents.split, are never read), through the latent cache of the 2D AE, so a step costs only the
temporal VAE. Loss: MSE between the 2D latents and their reconstruction from a posterior sample, plus
a small KL (per element); optionally a pixel MSE through the frozen 2D decoder on a few frames of
each batch, against that decoder's own picture of the input latents (off by default: on cpu-16ch
one decoded frame costs about as much as the whole temporal VAE's step, and the latent MSE is what
the DiT's samples are judged by before decoding). GameGen-X gives no loss weights for its VAE; ours
are ours.

The run folder works as `gamengen train`'s does (train/run.py): config.json holds the settings; the
same command resumes from the newest whole checkpoint (model, optimizer, both RNGs, the losses), so a
run in pieces, or one continued with a higher step count, ends with the weights of one run of all
the steps. The codec goes to ``<out>/model`` (the folder of models/video_vae.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..data.latents import LatentCache, split
from ..data.store import EpisodeRecord, Store
from ..errors import UserError
from ..models.autoencoder import FrameCodec
from ..models.video_vae import VIDEO_VAE_PRESETS, ClipCodec, build_temporal_vae
from .run import Deadline, RunFolder, descend


@dataclass
class VideoVAETrainConfig:
    preset: str = "cpu"
    frames: int = 17  # clip length F = 1 + 4k: 1 + 4 * 4, five latent frames
    steps: int = 2000
    batch_size: int = 8
    learning_rate: float = 1e-3  # constant: a run in pieces with a raised step count equals one run
    kl_weight: float = 1e-4  # on the per-element KL: keeps latents bounded, far below the reconstruction
    pixel_weight: float = 0.0  # > 0: add a pixel MSE through the frozen 2D decoder (see the module note)
    pixel_frames: int = 2  # frames of each batch that the pixel loss decodes
    heldout: float = 0.1  # the 2D AE's share (train-ae's default), so the same episodes stay unseen
    seed: int = 0
    checkpoint_every: int = 250
    keep_checkpoints: int = 2
    max_minutes: float | None = None  # stop this invocation after about this long; the same command resumes

    def __post_init__(self):
        if self.preset not in VIDEO_VAE_PRESETS:
            raise UserError(f"unknown video VAE preset '{self.preset}'", "use one of: " + ", ".join(VIDEO_VAE_PRESETS))
        if self.frames < 5 or (self.frames - 1) % 4:
            raise UserError(f"clips of {self.frames} frames", "train on 1 + 4k frames, k >= 1 (e.g. 17)")
        if self.batch_size < 1 or self.steps < 0 or self.keep_checkpoints < 1 or self.checkpoint_every < 1:
            raise UserError("batch size, checkpoint cadence and checkpoints kept must be >= 1, steps >= 0",
                            "fix the training settings")


class LatentClips:
    """Random clips of ``frames`` consecutive 2D latents from cached episodes, uniform over all clips."""

    def __init__(self, cache: LatentCache, records: list[EpisodeRecord], frames: int, seed: int):
        self.cache, self.frames = cache, frames
        self.records = long_enough(records, frames)
        starts = np.array([r.length - frames + 1 for r in self.records], dtype=np.float64)
        self.p = starts / starts.sum()
        self.rng = np.random.default_rng(seed)
        self._latents: dict[int, np.ndarray] = {}

    def batch(self, n: int) -> torch.Tensor:
        """-> (n, F, C, h, w) float32 scaled 2D latents."""
        eps = self.rng.choice(len(self.records), size=n, p=self.p)
        out = []
        for e in eps:
            if int(e) not in self._latents:  # (setdefault would open the file on every draw)
                self._latents[int(e)] = self.cache.load(self.records[int(e)])
            lat = self._latents[int(e)]
            t = int(self.rng.integers(len(lat) - self.frames + 1))
            out.append(np.asarray(lat[t:t + self.frames], dtype=np.float32))
        return torch.from_numpy(np.stack(out))


def long_enough(records: list[EpisodeRecord], frames: int) -> list[EpisodeRecord]:
    """The episodes that hold a whole clip; none is a UserError."""
    out = [r for r in records if r.length >= frames]
    if not out:
        raise UserError(f"no training episode has {frames} frames", "record longer episodes or use shorter clips")
    return out


def train_video_vae(data: str | Path | list, ae: str | Path, out: str | Path, cfg: VideoVAETrainConfig,
                    report: Callable[[int, int, float], None] = lambda done, total, loss: None,
                    warn: Callable[[str], None] = print) -> ClipCodec:
    """Train (or resume) the temporal VAE over the 2D AE in ``ae`` on the store ``data`` (or several
    stores, one per game: their clips drawn as one pool); the run folder is ``out``, the codec
    ``out/model``. ``report(step, steps, loss)`` after every step."""
    paths = [Path(p) for p in (data if isinstance(data, (list, tuple)) else [data])]
    ae, out = Path(ae), Path(out)
    stores = [Store.open(p) for p in paths]
    frame = FrameCodec.load(ae)
    for p, store in zip(paths, stores):
        if (store.spec.height, store.spec.width) != (frame.height, frame.width):
            raise UserError(f"the autoencoder in {ae} is for {frame.width}x{frame.height} frames, the store {p} "
                            f"holds {store.spec.width}x{store.spec.height}", "pass the autoencoder trained on this store")
    recs = [long_enough(split(s.episodes(), cfg.heldout)[0], cfg.frames) for s in stores]  # refused before any write
    train_recs = [r for rs in recs for r in rs]
    where = [str(p.resolve()) for p in paths]
    run = RunFolder(out, {**dataclasses.asdict(cfg), "data": where[0] if len(where) == 1 else where,
                          "ae": str(ae.resolve())}, keep=cfg.keep_checkpoints).open()
    cache = LatentCache(frame, ae / "latents")  # shared with `gamengen train`: same encoder, same files
    for store, rs in zip(stores, recs):
        cache.build(store, rs)  # keyed by each episode's sha256, so stores share one cache
    clips = LatentClips(cache, train_recs, cfg.frames, cfg.seed)
    channels = frame.latent_shape()[0]
    with torch.random.fork_rng(devices=[]):  # initial weights from the seed, the caller's RNG untouched
        torch.manual_seed(cfg.seed)
        vae = build_temporal_vae(cfg.preset, channels)
    noise = torch.Generator().manual_seed(cfg.seed)  # the posterior samples'
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vae.to(device)
    frame.ae.to(device).requires_grad_(False)
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    done, losses, state = run.resume_into(vae, opt, warn)
    if state is not None:
        noise.set_state(state["noise_rng"])
        clips.rng.bit_generator.state = state["clips_rng"]
    deadline = Deadline(cfg.max_minutes)
    vae.train()
    while done < cfg.steps:
        z = clips.batch(cfg.batch_size).to(device)
        loss = _loss(vae, frame, z, cfg, noise)
        descend(loss, opt, vae.parameters(), 1.0)
        done += 1
        losses.append(loss.item())
        report(done, cfg.steps, losses[-1])
        late = deadline.passed()
        if done % cfg.checkpoint_every == 0 or done == cfg.steps or late:
            run.save(done, {"step": done, "model": vae.state_dict(), "optimizer": opt.state_dict(),
                            "noise_rng": noise.get_state(), "clips_rng": clips.rng.bit_generator.state,
                            "losses": losses})
        if late:
            break
    vae.eval()
    games = list(dict.fromkeys(s.spec.env_id for s in stores))
    codec = ClipCodec(frame, vae, {"preset": cfg.preset, "frames": cfg.frames, "train_steps": done,
                                   **({"env_id": games[0]} if len(games) == 1 else {"env_ids": games}),
                                   "ae_preset": frame.meta.get("preset")})
    scale = measure_scale(codec, LatentClips(cache, train_recs, cfg.frames, cfg.seed + 1))
    codec.vae.register_to_config(scaling_factor=scale)
    codec.meta.update(heldout_psnr(codec, stores, cfg))
    codec.save(out / "model")
    run.write_losses(losses)
    return codec


def _loss(vae, frame: FrameCodec, z: torch.Tensor, cfg: VideoVAETrainConfig, noise: torch.Generator) -> torch.Tensor:
    """z (B, F, C, h, w) scaled 2D latents -> latent MSE + KL (+ pixel MSE on a few frames)."""
    recon, post = vae(z, noise)
    loss = torch.nn.functional.mse_loss(recon, z) + cfg.kl_weight * post.kl()
    if cfg.pixel_weight > 0:
        B, F = z.shape[:2]
        pick = torch.randperm(B * F, generator=noise)[:cfg.pixel_frames].to(z.device)  # saved generator: resumable
        H, W = frame.height, frame.width
        with torch.no_grad():
            target = frame.decode_pixels(z.flatten(0, 1)[pick])[:, :, :H, :W]
        got = frame.decode_pixels(recon.flatten(0, 1)[pick])[:, :, :H, :W]
        loss = loss + cfg.pixel_weight * torch.nn.functional.mse_loss(got, target)
    return loss


@torch.no_grad()
def measure_scale(codec: ClipCodec, clips: LatentClips, batches: int = 4) -> float:
    """1 / std of the (unscaled) posterior means over training clips: unit-variance video latents, as
    SD's 0.18215 makes its VAE's; GameGen-X's DiT, like SD's U-Net, assumes it."""
    v = torch.cat([codec.vae.encode(clips.batch(8).to(codec.device)).mean for _ in range(batches)])
    return float(1.0 / v.std().clamp_min(1e-6))


def _psnr(mse: float) -> float:
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


@torch.no_grad()
def clip_psnr(codec: ClipCodec, frames: np.ndarray) -> dict:
    """Reconstruction of uint8 clips (F, H, W, 3) or (N, F, H, W, 3) through the whole codec (2D AE,
    temporal VAE, back) beside the 2D AE alone on the same frames: {"clip_psnr", "ae_psnr" (dB on
    uint8 pixels, over all frames), "latent_mse" (2D latents vs their temporal round trip), "frames"}."""
    frames = np.asarray(frames)
    clips = frames[None] if frames.ndim == 4 else frames
    se_clip = se_ae = se_lat = 0.0
    for clip in clips:
        z = codec.frame.encode(clip)  # (F, C, h, w)
        back = codec.decode_latents(codec.encode_latents(z[None]))[0]
        ref = clip.astype(np.float64)
        se_ae += float(np.mean((codec.frame.decode(z).astype(np.float64) - ref) ** 2))
        se_clip += float(np.mean((codec.frame.decode(back).astype(np.float64) - ref) ** 2))
        se_lat += float((back.cpu() - z.cpu()).square().mean())
    n = len(clips)
    return {"clip_psnr": _psnr(se_clip / n), "ae_psnr": _psnr(se_ae / n), "latent_mse": se_lat / n,
            "frames": int(n * clips.shape[1])}


def heldout_clips(store: Store, frames: int, heldout: float, n: int = 8, seed: int = 0) -> np.ndarray:
    """Up to ``n`` clips (n', F, H, W, 3) uint8 from the held-out episodes (none: shape (0, F, H, W, 3))."""
    _, held = split(store.episodes(), heldout)
    held = [r for r in held if r.length >= frames]
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n if held else 0):
        rec = held[i % len(held)]
        t = int(rng.integers(rec.length - frames + 1))
        out.append(np.asarray(store.open_episode(rec)["frames"][t:t + frames]))
    return np.stack(out) if out else np.zeros((0, frames, store.spec.height, store.spec.width, 3), np.uint8)


def heldout_psnr(codec: ClipCodec, stores: list[Store], cfg: VideoVAETrainConfig) -> dict:
    """clip_psnr on held-out clips of every store, pooled, for the model card: {"heldout_clip_psnr",
    "heldout_ae_psnr", "heldout_frames"} or {} when no store holds a held-out clip."""
    clips = [c for s in stores for c in heldout_clips(s, cfg.frames, cfg.heldout)]
    if not clips:
        return {}
    r = clip_psnr(codec, np.stack(clips))
    return {"heldout_clip_psnr": round(r["clip_psnr"], 3), "heldout_ae_psnr": round(r["ae_psnr"], 3),
            "heldout_frames": r["frames"]}
