"""Sampler functions with one signature, k-diffusion style, so faster samplers slot in later:

    sampler(denoise, noise, *, steps, schedule) -> x0

``denoise(x, t) -> v_pred`` already contains the conditioning and guidance (Denoiser.guided).
"""

from __future__ import annotations

from typing import Callable

import torch
from diffusers import DDIMScheduler

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def sample_ddim(denoise: Denoise, noise: torch.Tensor, *, steps: int = 4, schedule: DDIMScheduler) -> torch.Tensor:
    """Deterministic DDIM (eta = 0). Paper §3.3: 4 steps simulate DOOM as well as 20 or more."""
    schedule.set_timesteps(steps, device=noise.device)
    x = noise
    for t in schedule.timesteps:
        v = denoise(x, t.reshape(1).to(noise.device))
        x = schedule.step(v, t, x, eta=0.0).prev_sample
    return x


SAMPLERS = {"ddim": sample_ddim}
