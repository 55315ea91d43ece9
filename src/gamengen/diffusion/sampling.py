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
    return ddim_loop(denoise, noise, ddim_timesteps(schedule, steps), schedule)


def ddim_timesteps(schedule: DDIMScheduler, steps: int) -> list[int]:
    schedule.set_timesteps(steps)
    return [int(t) for t in schedule.timesteps]


def ddim_loop(denoise: Denoise, noise: torch.Tensor, timesteps: list[int], schedule: DDIMScheduler) -> torch.Tensor:
    """The DDIM updates over given timesteps. They are Python ints, so the loop also traces into one
    exported graph (play's fast path, engine/fast.py) with the schedule's coefficients as constants."""
    x = noise
    for t in timesteps:
        v = denoise(x, torch.full((1,), t, dtype=torch.long, device=noise.device))
        x = schedule.step(v, t, x, eta=0.0).prev_sample
    return x


SAMPLERS = {"ddim": sample_ddim}
