"""`gamengen tune-decoder`: fine-tune what the player sees, the decoded prediction, on pixel MSE.

The paper fine-tunes the latent decoder on real frames' latents (§3.2.2), which sharpens the
autoencoder's own reconstruction. But during play the decoder never sees a real frame's latent: it
sees the world model's prediction, which is off the encoder's manifold where the model is unsure
(on defend_the_center, the wall's aliased texture that shimmers under every turn; docs/results.md).
This stage trains the decoder alone, on pixel MSE against the true next frame, from the latent the
model samples for it from a real context with the model's own sampler, as at play. The decoder then
learns to draw the best picture of what the model knows, instead of decoding a mean latent as if it
were a real one. A share of each batch (``mix``) decodes the true frame's latent instead, so the
autoencoder's own reconstruction, the AE ceiling, stays close to what it was.

The encoder is frozen, so latents, latent caches and every check on them (``encoder_id``) are
unchanged. By default the U-Net is frozen too, so the model's autoregression in latent space is
exactly the same and only the pictures change. With ``unet`` the U-Net also learns, end to end
through its own sampler and the decoder (for a 1-step student: one U-Net call per sample): the
student, distilled to copy its teacher's latents, then learns the next frame itself, scored where the
player sees it. On defend_the_center this was worth +0.9 dB over the decoder alone at equal time,
with better autoregression and action following (docs/results.md, "Fifth round").

Contexts and noise come from the training episodes' windows, drawn per step from generators seeded
by (seed, step, i) as in `gamengen train` and `distill`, so a resumed run replays exactly.

Run folder::

    <run>/config.json          the resolved DecoderTuneConfig (a resumed run must match it)
    <run>/checkpoints/step-N/  crash-safe checkpoints (train/checkpoint.py)
    <run>/losses.json          the pixel MSE of every step so far
    <run>/model/               the model folder with the tuned decoder in ae/
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..data.latents import LatentWindows
from ..data.store import Store
from ..errors import UserError
from ..models.world_model import WorldModel
from .distill import open_model_run
from .run import Deadline, descend, end_step
from .world_model import batch_of, draws_for


@dataclass
class DecoderTuneConfig:
    steps: int = 2000
    batch_size: int = 16
    # Share of each batch that decodes the true frame's latent instead of the prediction: it keeps
    # the AE's reconstruction (the ceiling) from drifting while the decoder learns the predictions.
    mix: float = 0.25
    learning_rate: float = 1e-4  # AdamW; the decoder is already trained, so 10x below train-ae's
    grad_clip: float = 1.0
    max_frames: int | None = None  # a seeded subset of the training episodes, as in `gamengen train`
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    seed: int = 0
    max_minutes: float | None = None  # stop this invocation after about this long (as `gamengen train`)
    bf16: bool = False  # autocast of the U-Net's and the decoder's forward passes; may change on resume
    # Also fine-tune the U-Net through its sampler and the decoder, at this learning rate (None: the
    # U-Net stays frozen). A small one: the network is trained, and the pixel loss is a new objective.
    unet_learning_rate: float | None = None

    def __post_init__(self):
        if not 0.0 <= self.mix < 1.0:
            raise UserError(f"--mix is {self.mix}", "pass a share in [0, 1): 1 would never show the decoder a prediction")
        if self.batch_size < 1 or self.steps < 1:
            raise UserError(f"--batch-size {self.batch_size} and --steps {self.steps}", "pass positive numbers")
        if self.unet_learning_rate is not None and self.unet_learning_rate <= 0:
            raise UserError(f"--unet-learning-rate is {self.unet_learning_rate}", "pass a positive rate, e.g. 3e-5")


class TargetFrames:
    """The true frames of windows' targets, read from the store a chunk at a time per episode."""

    def __init__(self, store: Store, windows: LatentWindows):
        self.store, self.windows, self.groups = store, windows, {}

    def __call__(self, idx: list[int]) -> np.ndarray:
        """Window numbers (B,) -> their target frames (B, H, W, 3) uint8."""
        e, n = self.windows.locate_many(np.asarray(idx))
        recs = self.windows.records
        return np.stack([self.groups.setdefault(int(k), self.store.open_episode(recs[int(k)]))["frames"][int(t)]
                         for k, t in zip(e, n)])


def tune_decoder(model_dir: str | Path, data: str | Path, out: str | Path, cfg: DecoderTuneConfig,
                 report: Callable[[int, int, float], None] = lambda step, total, loss: None,
                 warn: Callable[[str], None] = print, latents: str | Path | None = None) -> list[float]:
    """``latents``: a latent-cache root to reuse (e.g. the AE run's ``latents/``); entries are keyed
    by the encoder's weights, which this stage never changes."""
    from ..diffusion.denoiser import Denoiser

    model_dir, out = Path(model_dir), Path(out)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, store, tcfg, windows, run = open_model_run(model_dir, data, out, cfg, "model", latents, device)
    codec, sampler = model.codec, model.sampler
    targets = TargetFrames(store, windows)
    unet = cfg.unet_learning_rate is not None
    net, ae = model.net.to(device).eval().requires_grad_(unet), codec.ae.requires_grad_(False)
    denoiser = Denoiser(net, model.meta.denoiser)
    decoder = list(ae.decoder.parameters()) + list(ae.post_quant_conv.parameters())
    for p in decoder:
        p.requires_grad_(True)
    groups = [{"params": decoder, "lr": cfg.learning_rate}]
    if unet:
        groups.append({"params": list(net.parameters()), "lr": cfg.unet_learning_rate})
    params = [p for g in groups for p in g["params"]]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    tuned = torch.nn.ModuleDict({"ae": ae, "net": net})  # one state for checkpoints, whichever learns
    start, losses, _ = run.resume_into(tuned, opt, warn)
    shape, H, W = codec.latent_shape(), codec.height, codec.width
    B, k = cfg.batch_size, int(round(cfg.batch_size * cfg.mix))  # samples 0..k-1 decode the true latent
    report(start, cfg.steps, losses[-1] if losses else float("nan"))
    deadline, last = Deadline(cfg.max_minutes), cfg.steps
    for step in range(start, cfg.steps):
        idx, draws = draws_for(tcfg, step, windows, 0, B, shape)
        ctx, acts, truth = batch_of(windows, idx, device)  # (B, N, C, h, w), (B, N), (B, C, h, w)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            # the model's own sampler (steps, CFG, context noise level) from clean contexts, as at play
            z = predict(denoiser, ctx[k:], acts[k:], draws.noise[k:].to(device), sampler, grad=unet)
            ae.train()
            pixels = codec.decode_pixels(torch.cat([truth[:k], z.float()]))  # (B, 3, H', W') in [-1, 1]
        x = codec.to_pixels(targets(idx)).to(device)
        loss = torch.nn.functional.mse_loss(pixels[:, :, :H, :W].float(), x[:, :, :H, :W])
        descend(loss, opt, params, cfg.grad_clip)
        ae.eval()
        losses.append(float(loss.detach()))
        report(step + 1, cfg.steps, losses[-1])
        last, stop = end_step(run, deadline, step + 1, last, cfg.checkpoint_every, lambda: {
            "model": tuned.state_dict(), "step": step + 1, "optimizer": opt.state_dict(), "losses": losses}, losses)
        if stop:
            break
    _export(model, model_dir, out / "model", cfg, len(losses))
    return losses


def predict(denoiser, context: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor, sampler,
            grad: bool) -> torch.Tensor:
    """The next latents (B, C, h, w) with the model's sampler; with ``grad``, differentiable through it
    (``Denoiser.sample`` runs under no_grad)."""
    from ..diffusion.sampling import solve

    if not grad:
        return denoiser.sample(context, actions, noise, sampler)
    model = denoiser.guided(context, actions, sampler.guidance, sampler.context_noise_level)
    return solve(model, noise, denoiser.schedule(sampler.solver, sampler.steps), denoiser.alphas_cumprod)


def _export(model: WorldModel, model_dir: Path, out: Path, cfg: DecoderTuneConfig, steps: int) -> None:
    """The model with the tuned decoder (and U-Net); its meta says what it was tuned from, the card how."""
    unet = cfg.unet_learning_rate is not None
    tuned = replace(model, net=model.net.eval().cpu(), meta=replace(model.meta, tuned_from=str(model_dir), tune_steps=steps))
    tuned.codec.ae.eval().cpu()
    what = "the decoder and the U-Net" if unet else "the decoder alone (encoder and U-Net frozen)"
    tuned.save_pretrained(out, (
        f"# gamengen world model `{model_dir}`, fine-tuned on pixels\n\n"
        f"`gamengen tune-decoder`: {steps} steps of batch {cfg.batch_size}, {what} on pixel MSE against the true "
        f"next frame, from the latent the model samples with its own sampler ({model.sampler.steps} DDIM steps, "
        f"CFG {model.sampler.guidance}); {cfg.mix:.0%} of each batch decodes the true frame's latent instead. The "
        f"encoder, the sampler and the start contexts are `{model_dir}`'s.\n"))
