"""The denoiser wrapper: how the network is conditioned, trained and guided (paper §3.2, §3.3).

- v-prediction on SD's scaled-linear beta schedule (§4.2), loss L2.
- Noise augmentation (§3.2.1): the context latents are corrupted with Gaussian noise of a level
  drawn uniformly in [0, max_noise_level]; the level's bucket is given to the network. Without it
  autoregressive play drifts within 10-20 frames (Fig. 4, Fig. 7).
- Context dropout (§4.2): with p = 0.1 the past frames are replaced by zeros, so at sampling time
  classifier-free guidance can push on the history. Actions stay in both branches (§3.3).
- Residual target (issue 17's lever, off by default): the diffusion runs on the change from the last
  context frame, x_next - x_last, instead of on x_next, as RVD (Yang et al. 2023, "Diffusion
  probabilistic modeling for video generation") diffuses the residual of a deterministic next-frame
  guess; ours is copy-last. A network that outputs nothing then plays copy-last, and its capacity
  goes to what moves. It is a change of variables around the network's call (``residual_v``), so
  the target, the loss and every sampler are those of the plain model.
- Unrolls (issue 17's drift lever, off by default): for a share of samples the last context frame
  is replaced by the network's own 1-step prediction of it from the frames before it, so training
  sees contexts with the model's own errors, as play does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from diffusers import DDPMScheduler

from .sampling import (DDIMSchedule, SigmaSchedule, VModel, scaled_linear_alphas, solve, solver_schedule,
                       vp_sigmas)


@dataclass
class DenoiserConfig:
    max_noise_level: float = 0.7  # paper §4.2
    noise_buckets: int = 10  # paper §4.2
    context_dropout: float = 0.1  # paper §4.2
    num_train_timesteps: int = 1000
    # Which noise levels training sees. "uniform": timesteps uniform over [0, T) as SD and the paper
    # (§4.2). "lognormal": EDM's ln(sigma) ~ N(-0.4, 1.2^2) (Karras et al. 2022, as DIAMOND trains),
    # mapped to the nearest timestep of the same schedule, so the network, the v target and the
    # samplers are unchanged; it spends the steps on the middle noise levels few-step sampling visits.
    timesteps: str = "uniform"
    # Share of samples whose last context frame is the network's own prediction (no gradient; one
    # DDIM step, no CFG, from the context shifted back one frame, its first frame repeated).
    unroll: float = 0.0
    # Diffuse x_next - x_last instead of x_next (see the module's docstring). The context's last
    # frame is the anchor; with the history dropped (context dropout, CFG's other branch) it is zero.
    residual: bool = False

    def __post_init__(self):
        if self.timesteps not in TIMESTEP_DRAWS:
            raise ValueError(f"timesteps must be one of {TIMESTEP_DRAWS}, got {self.timesteps!r}")


TIMESTEP_DRAWS = ("uniform", "lognormal")
EDM_P_MEAN, EDM_P_STD = -0.4, 1.2  # Karras et al. 2022, Table 1


@functools.lru_cache(maxsize=4)
def _vp_sigma_table(num_train_timesteps: int) -> torch.Tensor:
    """sigma_t of every training timestep, computed once (draws run per sample, per step)."""
    return torch.tensor(vp_sigmas(scaled_linear_alphas(num_train_timesteps)))


def draw_timesteps(cfg: DenoiserConfig, n: int | tuple = (), generator: torch.Generator | None = None,
                   device=None) -> torch.Tensor:
    """Training timesteps (int64, shape ``n``) by ``cfg.timesteps`` (see DenoiserConfig)."""
    shape = (n,) if isinstance(n, int) else n
    if cfg.timesteps == "uniform":
        return torch.randint(0, cfg.num_train_timesteps, shape, generator=generator, device=device)
    sigma = torch.exp(EDM_P_MEAN + EDM_P_STD * torch.randn(shape, generator=generator, device=device))
    sigmas = _vp_sigma_table(cfg.num_train_timesteps).to(sigma.device)
    t = torch.searchsorted(sigmas, sigma).clamp(1, len(sigmas) - 1)
    nearer_below = (sigma.log() - sigmas[t - 1].log()) < (sigmas[t].log() - sigma.log())
    return torch.where(nearer_below, t - 1, t)


def residual_v(net_call: VModel, anchor: torch.Tensor, log_sigmas: torch.Tensor) -> VModel:
    """The v-prediction of the frame x0 from a network that predicts the v of the residual
    y0 = x0 - anchor. anchor (B, C, h, w); log_sigmas (T,): the schedule's log sigma_t per timestep.

    At timestep t, x_t = sqrt(ab) x0 + sqrt(1 - ab) eps = y_t + sqrt(ab) anchor, and
    v_x = sqrt(ab) eps - sqrt(1 - ab) x0 = v_y - sqrt(1 - ab) anchor. Fractional timesteps (the
    Euler sampler's) interpolate log sigma as ``sampling.vp_denoised`` does, so ab is exact there too."""
    def v(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        tf = t.to(torch.float32).clamp(0, len(log_sigmas) - 1)
        lo = tf.floor().long().clamp(max=len(log_sigmas) - 2)
        log_sigma = torch.lerp(log_sigmas[lo], log_sigmas[lo + 1], tf - lo)
        ab = torch.sigmoid(-2 * log_sigma).view(-1, 1, 1, 1)  # 1 / (1 + sigma^2)
        return net_call(x - ab.sqrt() * anchor, t) - (1 - ab).sqrt() * anchor
    return v


def schedule_log_sigmas(alphas_cumprod: tuple[float, ...]) -> torch.Tensor:
    """log sigma_t (T,) float32 of every training timestep, for ``residual_v``."""
    return torch.tensor(vp_sigmas(alphas_cumprod), dtype=torch.float64).log().float()


def scheduler_config(cfg: DenoiserConfig) -> dict:
    """SD-v1's training schedule (paper §4.2) for diffusers' DDPMScheduler, which adds the noise and
    computes the v target in training; sampling reads the same betas (diffusion/sampling.py)."""
    return {"num_train_timesteps": cfg.num_train_timesteps, "beta_start": 0.00085, "beta_end": 0.012,
            "beta_schedule": "scaled_linear", "prediction_type": "v_prediction", "clip_sample": False}


def bucket_of(level: torch.Tensor, cfg: DenoiserConfig) -> torch.Tensor:
    """Noise level in [0, max] -> bucket index in [0, buckets - 1] (all 0 with augmentation off)."""
    if cfg.max_noise_level <= 0:
        return torch.zeros(level.shape, dtype=torch.long, device=level.device)
    b = (level / cfg.max_noise_level * cfg.noise_buckets).floor().long()
    return b.clamp(0, cfg.noise_buckets - 1)


@dataclass
class TrainingNoise:
    """Every random draw of one training batch, made by the caller from per-sample generators so that
    a resumed or multi-process run sees exactly the same draws (docs/architecture.md)."""

    timesteps: torch.Tensor  # (B,) int in [0, T)
    noise: torch.Tensor  # (B, C, h, w) for the target
    context_noise: torch.Tensor  # (B, N, C, h, w) for augmentation
    noise_level: torch.Tensor  # (B,) in [0, max_noise_level]
    drop_context: torch.Tensor  # (B,) bool
    # unrolls (None when cfg.unroll is 0, so runs without them draw exactly what they always did)
    unroll: torch.Tensor | None = None  # (B,) bool
    unroll_noise: torch.Tensor | None = None  # (B, C, h, w), the unroll sampler's start noise

    @classmethod
    def draw(cls, generators: list[torch.Generator], latent_shape: tuple[int, ...], context: int,
             cfg: DenoiserConfig) -> "TrainingNoise":
        cols = []
        for g in generators:
            cols.append((draw_timesteps(cfg, (), g),
                         torch.randn(latent_shape, generator=g),
                         torch.randn((context, *latent_shape), generator=g),
                         torch.rand((), generator=g) * cfg.max_noise_level,
                         torch.rand((), generator=g) < cfg.context_dropout))
            if cfg.unroll > 0:  # drawn last, so the draws above stay those of a run without unrolls
                cols[-1] += (torch.rand((), generator=g) < cfg.unroll, torch.randn(latent_shape, generator=g))
        return cls(*(torch.stack(c) for c in zip(*cols)))

    @classmethod
    def draw_batch(cls, generator: torch.Generator, batch: int, latent_shape: tuple[int, ...], context: int,
                   cfg: DenoiserConfig) -> "TrainingNoise":
        """The same draws for a whole batch from one generator, on the generator's device: far
        fewer calls than ``draw``, but the numbers then depend on how the batch is split."""
        kw = {"generator": generator, "device": generator.device}
        draws = cls(draw_timesteps(cfg, batch, **kw), torch.randn((batch, *latent_shape), **kw),
                    torch.randn((batch, context, *latent_shape), **kw), torch.rand(batch, **kw) * cfg.max_noise_level,
                    torch.rand(batch, **kw) < cfg.context_dropout)
        if cfg.unroll > 0:
            draws.unroll = torch.rand(batch, **kw) < cfg.unroll
            draws.unroll_noise = torch.randn((batch, *latent_shape), **kw)
        return draws


class Denoiser:
    def __init__(self, net: torch.nn.Module, cfg: DenoiserConfig):
        self.net, self.cfg = net, cfg
        self.train_schedule = DDPMScheduler(**scheduler_config(cfg))
        self.alphas_cumprod = scaled_linear_alphas(cfg.num_train_timesteps)  # the same schedule, as data
        self.log_sigmas = schedule_log_sigmas(self.alphas_cumprod)

    def parameterised(self, net_call: VModel, anchor: torch.Tensor) -> VModel:
        """The frame's v from a call of the network: the call itself, or with ``cfg.residual`` its
        change of variables around ``anchor`` (B, C, h, w), the context's last frame."""
        if not self.cfg.residual:
            return net_call
        return residual_v(net_call, anchor, self.log_sigmas.to(anchor.device))

    def loss(self, target: torch.Tensor, context: torch.Tensor, actions: torch.Tensor, draws: TrainingNoise,
             net: torch.nn.Module | None = None) -> torch.Tensor:
        """target (B, C, h, w), context (B, N, C, h, w), actions (B, N) -> scalar v-prediction L2 loss.

        ``net`` may be a distributed wrapper of ``self.net`` (accelerate)."""
        net = net or self.net
        dev = target.device
        t = draws.timesteps.to(dev)
        noise = draws.noise.to(dev)
        noisy = self.train_schedule.add_noise(target, noise, t)
        v_target = self.train_schedule.get_velocity(target, noise, t)
        if draws.unroll is not None:
            context = self.unrolled(context, actions, draws.unroll.to(dev), draws.unroll_noise.to(dev))
        level = draws.noise_level.to(dev)
        context = context + level.view(-1, 1, 1, 1, 1) * draws.context_noise.to(dev)  # §3.2.1
        context = torch.where(draws.drop_context.to(dev).view(-1, 1, 1, 1, 1), torch.zeros_like(context), context)
        bucket = bucket_of(level, self.cfg)
        v_pred = self.parameterised(lambda x, t_: net(x, t_, context, actions, bucket), context[:, -1])(noisy, t)
        return torch.nn.functional.mse_loss(v_pred.float(), v_target.float())

    @torch.no_grad()
    def unrolled(self, context: torch.Tensor, actions: torch.Tensor, which: torch.Tensor,
                 noise: torch.Tensor) -> torch.Tensor:
        """context (B, N, C, h, w) with the last frame of the samples in ``which`` (B,) replaced by the
        network's own prediction of it: one DDIM step, no CFG, no context noise, from the context
        shifted back one frame (its first frame repeated, as at an episode's start) and the actions
        that led there. ``noise`` (B, C, h, w) starts the sampler."""
        if not bool(which.any()):
            return context
        ctx, acts = context[which], actions[which]
        prev = torch.cat([ctx[:, :1], ctx[:, :-1]], dim=1)
        prev_acts = torch.cat([acts[:, :1], acts[:, :-1]], dim=1)  # acts[:, -2] led to the last frame
        bucket = torch.zeros(len(ctx), dtype=torch.long, device=ctx.device)
        model = self.guided_by_bucket(prev, prev_acts, bucket, 1.0)
        pred = solve(model, noise[which], self.schedule("ddim", 1), self.alphas_cumprod)
        out = context.clone()
        out[which, -1] = pred.to(out.dtype)
        return out

    def guided(self, context: torch.Tensor, actions: torch.Tensor, guidance: float,
               noise_level: float) -> VModel:
        """The sampler's ``model(x, t) -> v_pred`` for one context, with CFG weight ``guidance`` on
        the history only, telling the network the context noise level ``noise_level`` (the sampler
        settings are the model's: models/world_model.SamplerConfig).

        Both branches run as one batch of 2B (docs/performance.md: fewer, larger matmuls)."""
        w, bucket = self.sampling_conditions(context.shape[0], guidance, noise_level)
        return self.guided_by_bucket(context, actions, bucket.to(context.device), w)

    def guided_by_bucket(self, context: torch.Tensor, actions: torch.Tensor, bucket: torch.Tensor, w: float) -> VModel:
        """``guided`` with the noise buckets (B,) and the CFG weight already worked out."""
        B = context.shape[0]
        if w == 1.0:
            return self.parameterised(lambda x, t: self.net(x, t.expand(B), context, actions, bucket), context[:, -1])
        ctx2 = torch.cat([context, torch.zeros_like(context)])  # the unconditional branch: no history
        act2, bucket2 = torch.cat([actions, actions]), torch.cat([bucket, bucket])
        both = self.parameterised(lambda x2, t2: self.net(x2, t2, ctx2, act2, bucket2), ctx2[:, -1])
        return lambda x, t: cfg_pair(both, x, t, w)

    def sampling_conditions(self, batch: int, guidance: float, noise_level: float) -> tuple[float, torch.Tensor]:
        """The CFG weight and the context-noise buckets (batch,) that sampling tells the network."""
        return float(guidance), bucket_of(torch.full((batch,), float(noise_level)), self.cfg)

    def schedule(self, solver: str, steps: int) -> DDIMSchedule | SigmaSchedule:
        """The named solver's schedule over this model's training schedule (diffusion/sampling.py)."""
        return solver_schedule(solver, steps, self.alphas_cumprod)

    @torch.no_grad()
    def sample(self, context: torch.Tensor, actions: torch.Tensor, noise: torch.Tensor, sampler) -> torch.Tensor:
        """The next latents (B, C, h, w) for contexts (B, N, C, h, w) and actions (B, N), from ``noise``,
        with ``sampler``'s solver, steps, guidance and context noise level (a SamplerConfig)."""
        model = self.guided(context, actions, sampler.guidance, sampler.context_noise_level)
        return solve(model, noise, self.schedule(sampler.solver, sampler.steps), self.alphas_cumprod)


def cfg_pair(net_call, x: torch.Tensor, t: torch.Tensor, w) -> torch.Tensor:
    """Both CFG branches as one batch of 2B (fewer, larger matmuls; docs/performance.md), combined:
    ``net_call(x2 (2B, C, h, w), t2 (2B,))`` runs the conditional half then the unconditional one."""
    B = x.shape[0]
    cond, uncond = net_call(torch.cat([x, x]), t.expand(2 * B)).chunk(2)
    return cfg_combine(cond, uncond, w)


def cfg_combine(cond: torch.Tensor, uncond: torch.Tensor, w) -> torch.Tensor:
    """Classifier-free guidance (paper §3.3): push the prediction away from the branch without the
    history by weight ``w``; w = 1 is the conditional branch alone."""
    return uncond + w * (cond - uncond)


# The play fast path (docs/performance.md) exports the guided denoiser of one frame as two graphs of
# tensors only. The context enters through its share of the U-Net's first convolution, computed once
# per frame for both CFG branches (ContextShares); each DDIM step then runs GuidedStep.


class ContextShares(torch.nn.Module):
    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """context (B, N, C, h, w) -> shares (2B, C0, h, w): the conditional branch's, then the
        unconditional one's, whose context is all zeros (context dropout) so its share is conv_in's bias."""
        cond = self.net.context_share(context)
        uncond = self.net.unet.conv_in.bias.view(1, -1, 1, 1).expand_as(cond)
        return torch.cat([cond, uncond])


class GuidedStep(torch.nn.Module):
    def __init__(self, net: torch.nn.Module, guided: bool = True, log_sigmas: torch.Tensor | None = None):
        """``log_sigmas``: the schedule's (``schedule_log_sigmas``) for a residual model, else None."""
        super().__init__()
        self.net, self.guided = net, guided  # unguided: the conditional branch alone (CFG weight 1)
        self.log_sigmas = log_sigmas

    def forward(self, x: torch.Tensor, t: torch.Tensor, shares: torch.Tensor, last: torch.Tensor,
                actions: torch.Tensor, bucket: torch.Tensor, guidance: torch.Tensor) -> torch.Tensor:
        """x (B, C, h, w), t (1,), shares (2B, C0, h, w), last (B, C, h, w): the context's last frame,
        actions (B, N), bucket (B,), guidance () -> the guided v_pred (B, C, h, w), as
        ``Denoiser.guided`` computes it."""
        B = x.shape[0]
        if not self.guided:
            return self._residual(lambda x1, t1: self.net.forward_from_share(x1, t1.expand(B), shares[:B], actions,
                                                                              bucket), last)(x, t)
        act2, bucket2 = torch.cat([actions, actions]), torch.cat([bucket, bucket])
        both = self._residual(lambda x2, t2: self.net.forward_from_share(x2, t2, shares, act2, bucket2),
                              torch.cat([last, torch.zeros_like(last)]))  # no history: anchor zero
        return cfg_pair(both, x, t, guidance)

    def _residual(self, net_call: VModel, anchor: torch.Tensor) -> VModel:
        return net_call if self.log_sigmas is None else residual_v(net_call, anchor, self.log_sigmas)
