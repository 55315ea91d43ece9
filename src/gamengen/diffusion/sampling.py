"""Sampler functions: pure functions of a model, the starting noise and a schedule given as data.

One signature for every solver, k-diffusion style::

    sampler(model, noise, *, schedule) -> x0

``model`` already holds the conditioning and the guidance (``Denoiser.guided`` and friends); what it
returns is the parameterisation's: v for DDIM over the network's own DDPM schedule, the denoised
estimate D(x; sigma) for Euler over noise levels. Schedules are frozen dataclasses of Python
numbers, so a sampling loop traces into one exported graph with its coefficients as constants
(play's fast path, engine/fast.py), and the model folder names the solver (``SamplerConfig``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

VModel = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x (B, C, h, w), t (1,)) -> v_pred
DenoisedModel = Callable[[torch.Tensor, float], torch.Tensor]  # (x, sigma) -> D(x; sigma), the clean estimate


def scaled_linear_alphas(num_train_timesteps: int = 1000, beta_start: float = 0.00085,
                         beta_end: float = 0.012) -> tuple[float, ...]:
    """SD-v1's training schedule (paper §4.2) as alpha-bar_t, t = 0..T-1: betas linear in sqrt."""
    betas = torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
    return tuple(torch.cumprod(1.0 - betas, 0).tolist())


@dataclass(frozen=True)
class DDIMSchedule:
    """The DDIM steps over a DDPM schedule: the network's timestep at each step, the alpha-bar there,
    and the alpha-bar the step lands on."""

    timesteps: tuple[int, ...]
    alphas: tuple[float, ...]
    alphas_next: tuple[float, ...]

    @classmethod
    def trailing(cls, alphas_cumprod: tuple[float, ...], steps: int) -> "DDIMSchedule":
        """"Trailing" spacing: a 4-step run starts from pure noise at t = T-1 instead of SD's default
        t = 751, which few-step v-prediction sampling needs (Lin et al. 2023, §3.3). A step from t
        lands on t - T // steps, and the last one on alpha-bar_0 (as diffusers' DDIMScheduler with
        set_alpha_to_one=False, so models trained against it sample the same)."""
        T = len(alphas_cumprod)
        ts = [int(round(x)) - 1 for x in torch.arange(T, 0, -T / steps).tolist()]
        prev = [t - T // steps for t in ts]
        return cls(tuple(ts), tuple(alphas_cumprod[t] for t in ts),
                   tuple(alphas_cumprod[p] if p >= 0 else alphas_cumprod[0] for p in prev))


@torch.no_grad()
def sample_ddim(model: VModel, noise: torch.Tensor, *, schedule: DDIMSchedule) -> torch.Tensor:
    """Deterministic DDIM (eta = 0) for a v-prediction model. Paper §3.3: 4 steps simulate DOOM as
    well as 20 or more. noise (B, C, h, w) -> x0 (B, C, h, w)."""
    return ddim_loop(model, noise, schedule)


def ddim_loop(model: VModel, noise: torch.Tensor, schedule: DDIMSchedule) -> torch.Tensor:
    """``sample_ddim`` without no_grad: distillation backpropagates through the student's step."""
    x = noise
    for t, a, a_next in zip(schedule.timesteps, schedule.alphas, schedule.alphas_next):
        v = model(x, torch.full((1,), t, dtype=torch.long, device=noise.device))
        x0 = math.sqrt(a) * x - math.sqrt(1 - a) * v  # v = sqrt(a) eps - sqrt(1 - a) x0
        eps = math.sqrt(a) * v + math.sqrt(1 - a) * x
        x = math.sqrt(a_next) * x0 + math.sqrt(1 - a_next) * eps
    return x


@dataclass(frozen=True)
class SigmaSchedule:
    """Noise levels sigma_0 > ... > sigma_n = 0 in the convention x = x0 + sigma * eps, and the scale
    of the starting noise (sqrt(1 + sigma_0^2) for a model trained on a variance-preserving schedule,
    whose x_T has unit variance; sigma_0 for an EDM-trained one)."""

    sigmas: tuple[float, ...]
    init_scale: float

    @classmethod
    def karras(cls, steps: int, sigma_min: float, sigma_max: float, rho: float = 7.0,
               variance_preserving: bool = True) -> "SigmaSchedule":
        """EDM's spacing (Karras et al. 2022, eq. 5): uniform in sigma^(1/rho), dense near sigma_min."""
        ramp = [i / max(1, steps - 1) for i in range(steps)]
        lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
        sigmas = tuple((hi + r * (lo - hi)) ** rho for r in ramp) + (0.0,)
        return cls(sigmas, math.sqrt(1 + sigma_max**2) if variance_preserving else sigma_max)


@torch.no_grad()
def sample_euler(model: DenoisedModel, noise: torch.Tensor, *, schedule: SigmaSchedule) -> torch.Tensor:
    """Euler steps of the probability-flow ODE dx/dsigma = (x - D(x; sigma)) / sigma (Karras et al.
    2022, Alg. 1 without its second-order correction; DIAMOND's few-step sampler). noise (B, C, h, w)
    -> x0 (B, C, h, w)."""
    return euler_loop(model, noise, schedule)


def euler_loop(model: DenoisedModel, noise: torch.Tensor, schedule: SigmaSchedule) -> torch.Tensor:
    x = noise * schedule.init_scale
    for s, s_next in zip(schedule.sigmas[:-1], schedule.sigmas[1:]):
        x0 = model(x, s)
        x = x0 + (s_next / s) * (x - x0)
    return x


def vp_sigmas(alphas_cumprod: tuple[float, ...]) -> tuple[float, ...]:
    """The noise level sigma_t = sqrt((1 - alpha-bar_t) / alpha-bar_t) of each DDPM timestep."""
    return tuple(math.sqrt((1 - a) / a) for a in alphas_cumprod)


def vp_denoised(model: VModel, alphas_cumprod: tuple[float, ...]) -> DenoisedModel:
    """D(x; sigma) of a v-prediction network trained on a variance-preserving DDPM schedule, so
    that sigma-space solvers sample it (as k-diffusion samples SD): x is scaled back to the network's
    variance and sigma mapped to its (fractional) timestep by interpolating log sigma."""
    log_sigmas = [math.log(s) for s in vp_sigmas(alphas_cumprod)]

    def timestep(sigma: float) -> float:
        ls = min(max(math.log(sigma), log_sigmas[0]), log_sigmas[-1])
        i = min(max(0, next(k for k, v in enumerate(log_sigmas) if v >= ls) - 1), len(log_sigmas) - 2)
        return i + (ls - log_sigmas[i]) / (log_sigmas[i + 1] - log_sigmas[i])

    def denoised(x: torch.Tensor, sigma: float) -> torch.Tensor:
        a = 1.0 / (1.0 + sigma**2)  # alpha-bar at this noise level
        x_vp = x * math.sqrt(a)
        v = model(x_vp, torch.full((1,), timestep(sigma), dtype=torch.float32, device=x.device))
        return math.sqrt(a) * x_vp - math.sqrt(1 - a) * v

    return denoised


SOLVERS = ("ddim", "euler")


def solver_schedule(solver: str, steps: int, alphas_cumprod: tuple[float, ...]) -> DDIMSchedule | SigmaSchedule:
    """The schedule a named solver runs over a VP model's training schedule: DDIM's timesteps, or
    EDM's Karras noise levels between that schedule's smallest and largest sigma."""
    if solver == "ddim":
        return DDIMSchedule.trailing(alphas_cumprod, steps)
    if solver == "euler":
        sigmas = vp_sigmas(alphas_cumprod)
        return SigmaSchedule.karras(steps, sigmas[0], sigmas[-1])
    raise ValueError(f"unknown solver {solver!r}; one of {SOLVERS}")


def solve(model: VModel, noise: torch.Tensor, schedule: DDIMSchedule | SigmaSchedule,
          alphas_cumprod: tuple[float, ...]) -> torch.Tensor:
    """Run a v-prediction model's sampler over ``schedule`` (without no_grad: distillation
    backpropagates through it)."""
    if isinstance(schedule, DDIMSchedule):
        return ddim_loop(model, noise, schedule)
    return euler_loop(vp_denoised(model, alphas_cumprod), noise, schedule)
