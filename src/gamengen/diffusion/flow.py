"""Rectified flow for GameGen-X's MSDiT (§3.3, §3.5): frame mask, noising, loss, t draw, Euler sampler.

Convention (rectified flow as in SD3 and OpenSora 1.2): x_t = (1 - t) z + t eps, t = 1 is pure noise,
the network predicts the velocity v = dx_t/dt = eps - z, and sampling integrates from t = 1 to 0.
GameGen-X §3.3 unifies text-to-video and continuation with a frame mask M: the first x frames are
clean context (M = 0), the rest are generated (M = 1); x = 0 is text-to-video. The network sees the
mask only through the per-frame timestep: context frames carry t = 0, "already clean".

The network enters as a callable, VelocityModel: model(x (B, F, C, h, w), t (B, F)) -> v (B, F, C, h, w),
with text and metadata bound by the caller (a lambda or functools.partial around an MSDiT);
``guided`` builds such a callable with classifier-free guidance. Nothing here turns gradients off:
callers wrap sampling in torch.no_grad themselves.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

VelocityModel = Callable[[Tensor, Tensor], Tensor]  # (x (B, F, C, h, w), t (B, F)) -> v (B, F, C, h, w)


def frame_mask(batch: int, frames: int, context: int | Sequence[int] | Tensor,
               device: torch.device | str | None = None) -> Tensor:
    """(B, F) float mask M: 0 on the first context[b] frames (kept clean), 1 on the rest.
    §3.3: M(i) = 1 if i > x else 0, frames counted from 1. context: one int for all, or (B,)."""
    context = torch.as_tensor(context, device=device).reshape(-1, 1)  # (B or 1, 1)
    index = torch.arange(frames, device=context.device)[None]  # (1, F), counted from 0
    return (index >= context).float().expand(batch, frames).contiguous()


def noised(z: Tensor, noise: Tensor, t: Tensor, mask: Tensor,
           context_t: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """§3.3's z~ = (1 - M) z + M x_t with x_t = (1 - t) z + t noise. z, noise (B, F, C, h, w), t (B,) in
    [0, 1], mask (B, F) -> (x (B, F, C, h, w), per-frame t (B, F)): t on generated frames, and on
    context frames z exactly and t = 0. ``context_t`` (B,): the context frames noised to that flow
    time instead (GameNGen §3.2.1's noise augmentation, its level told to the network as their t)."""
    t_frames = t[:, None] * mask  # (B, F)
    if context_t is not None:
        t_frames = t_frames + context_t[:, None] * (1 - mask)
        s = t_frames[..., None, None, None]
        return (1 - s) * z + s * noise, t_frames
    s = t_frames[..., None, None, None]
    return torch.where(mask[..., None, None, None] > 0, (1 - s) * z + s * noise, z), t_frames


def flow_loss(model: VelocityModel, z: Tensor, noise: Tensor, t: Tensor, mask: Tensor,
              context_t: Tensor | None = None, mean_weight: float = 0.0) -> Tensor:
    """Scalar MSE between model(x_t, t) and the velocity noise - z, averaged over the elements of the
    generated frames only: context frames are given, not predicted (§3.3), so they cost nothing.
    Shapes as in ``noised``.

    ``mean_weight`` w (ours; 0 is the plain MSE): each frame's error also pays w times the square of its
    spatial mean per channel, so a frame whose whole colour is off (a tint, a light change: a shift of
    the latent's channel means) costs 1 + w times what the MSE alone charges it, while the rest of the
    error costs the same."""
    x, t_frames = noised(z, noise, t, mask, context_t)
    diff = (model(x, t_frames) - (noise - z)).float()  # (B, F, C, h, w)
    err = diff.pow(2).mean(dim=(2, 3, 4))  # (B, F)
    if mean_weight:
        err = err + mean_weight * diff.mean(dim=(3, 4)).pow(2).mean(dim=2)
    err = torch.where(mask > 0, err, 0.0)  # where, not a product: a non-finite context output costs nothing too
    return err.sum() / mask.sum().clamp_min(1)


def sample_t(batch: int, generator: torch.Generator, kind: str = "logit_normal", *, mean: float = 0.0,
             std: float = 1.0, device: torch.device | str | None = None) -> Tensor:
    """Training timesteps t (B,) in (0, 1), drawn on the generator's device, then moved to device.

    "logit_normal" (default): t = sigmoid(N(mean, std)), the best draw in SD3's study (Esser et al. 2024,
    §3.1) and OpenSora 1.2's: it spends the batch on middle t, where the velocity is hardest to predict,
    rather than near t = 0 or 1 where it is almost given. "uniform": U(0, 1), the plain rectified flow.
    """
    if kind == "logit_normal":
        t = torch.sigmoid(mean + std * torch.randn(batch, generator=generator, device=generator.device))
    elif kind == "uniform":
        t = torch.rand(batch, generator=generator, device=generator.device)
    else:
        raise ValueError(f"unknown timestep draw {kind!r}: use 'logit_normal' or 'uniform'")
    return t if device is None else t.to(device)


def flow_times(steps: int, shift: float = 1.0) -> list[float]:
    """steps + 1 times from 1 down to 0: uniform, warped by SD3's shift t -> shift t / (1 + (shift - 1) t).
    shift > 1 spends more steps near t = 1, where big latents keep their coarse structure undecided."""
    uniform = [1 - i / steps for i in range(steps + 1)]
    return [shift * s / (1 + (shift - 1) * s) for s in uniform]


def euler_sample(model: VelocityModel, noise: Tensor, context: Tensor | None = None, *, steps: int,
                 shift: float = 1.0, context_t: float = 0.0) -> Tensor:
    """Integrate dx/dt = model(x, t) from t = 1 (x = noise) to t = 0 in ``steps`` Euler steps.

    noise (B, F, C, h, w); context (B, X, C, h, w): clean latents of the first X frames (§3.3
    continuation), None for X = 0 (text-to-video). The context is written into x at every step, with
    t = 0 on its frames, so the model sees it clean throughout and it comes out exactly as given.
    ``context_t`` > 0: the context is shown noised to that flow time instead (with the first X frames
    of ``noise``), for a model trained with noise on its context (GameNGen §3.2.1); the returned
    context frames are still the clean ones. Returns x_0 (B, F, C, h, w). For guidance pass
    ``guided(...)`` as the model.
    """
    B, T = noise.shape[:2]
    X = 0 if context is None else context.shape[1]
    mask = frame_mask(B, T, X, device=noise.device).to(noise.dtype)  # (B, F)
    shown = None
    if context is not None:
        shown = context.to(noise.dtype)
        if context_t:
            shown = (1 - context_t) * shown + context_t * noise[:, :X]
    x = noise if context is None else torch.cat([shown, noise[:, X:]], dim=1)
    times = flow_times(steps, shift)
    for t_now, t_next in zip(times[:-1], times[1:]):
        x = x + (t_next - t_now) * model(x, t_now * mask + context_t * (1 - mask))
        if context is not None:
            x = torch.cat([shown, x[:, X:]], dim=1)
    return x if not context_t else torch.cat([context.to(noise.dtype), x[:, X:]], dim=1)


def guided(model: Callable[..., Tensor], cond: Mapping[str, Tensor], uncond: Mapping[str, Tensor],
           guidance: float, unsteered: Mapping[str, Tensor] | None = None, steering: float = 1.0) -> VelocityModel:
    """Classifier-free guidance on the text (§3.5 drops text in 25% of training to allow it):
    v = v_uncond + guidance (v_cond - v_uncond), as a VelocityModel.

    model(x, t, **kwargs) -> v takes per-sample keyword tensors, e.g. an MSDiT with kwargs
    encoder_hidden_states, encoder_attention_mask, fps, num_frames, height, width. cond and uncond
    give them for the B samples, with the same keys and shapes (uncond usually differs only in the
    text: MSDiT.null_text(B, L), or the same text with an all-False mask). The branches run as one
    batch ([cond; uncond] of 2B); guidance = 1 runs the conditional branch alone.

    With ``unsteered`` (cond with InstructNet's controls switched off; stage 2 trains 20% of samples
    without control, §3.5, so that branch is learned) and ``steering`` != 1, guidance on the controls
    is added, composed as InstructPix2Pix composes its two conditions:
    v += (steering - 1) (v_cond - v_unsteered); the branches run as one batch.
    """
    steer = unsteered is not None and steering != 1.0
    if uncond.keys() != cond.keys() or (unsteered is not None and unsteered.keys() != cond.keys()):
        raise ValueError(f"cond, uncond and unsteered need the same keys, got {sorted(cond)} and "
                         f"{sorted(uncond)}" + (f" and {sorted(unsteered)}" if unsteered is not None else ""))
    if guidance == 1.0 and not steer:
        return lambda x, t: model(x, t, **cond)
    branches = [cond] + ([uncond] if guidance != 1.0 else []) + ([unsteered] if steer else [])
    n = len(branches)
    batched = {k: torch.cat([b[k] for b in branches]) for k in cond}

    def call(x: Tensor, t: Tensor) -> Tensor:
        v = model(torch.cat([x] * n), torch.cat([t] * n), **batched).chunk(n)
        out = v[0] if guidance == 1.0 else v[1] + guidance * (v[0] - v[1])
        return out + (steering - 1.0) * (v[0] - v[-1]) if steer else out

    return call
