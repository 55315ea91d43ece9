"""The sampler functions (diffusion/sampling.py): pure, schedules as data, one signature."""

from __future__ import annotations

import math

import torch

from gamengen.diffusion.sampling import (DDIMSchedule, SigmaSchedule, sample_ddim, sample_euler, scaled_linear_alphas,
                                         solve, solver_schedule, vp_denoised)

ALPHAS = scaled_linear_alphas()


def gaussian_v_model(s: float):
    """The exact v-prediction of data ~ N(0, s^2) on the VP schedule: a model whose ODE is known."""
    def v(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = torch.as_tensor(ALPHAS, dtype=torch.float64)
        tf = t.double()
        lo = tf.floor().long().clamp(0, len(ALPHAS) - 1)
        hi = (lo + 1).clamp(max=len(ALPHAS) - 1)
        ab = (a[lo] + (tf - lo) * (a[hi] - a[lo])).float()  # alpha-bar at a fractional timestep
        # x = sqrt(ab) x0 + sqrt(1-ab) eps; E[x0|x] = sqrt(ab) s^2 x / (ab s^2 + 1 - ab)
        x0 = ab.sqrt() * s**2 * x / (ab * s**2 + 1 - ab)
        eps = (x - ab.sqrt() * x0) / (1 - ab).sqrt()
        return ab.sqrt() * eps - (1 - ab).sqrt() * x0
    return v


def test_ddim_is_diffusers_ddim_with_trailing_spacing():
    from diffusers import DDIMScheduler

    ref = DDIMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                        prediction_type="v_prediction", clip_sample=False, timestep_spacing="trailing",
                        set_alpha_to_one=False)
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(0))
    model = lambda x, t: torch.tanh(torch.einsum("ij,bjhw->bihw", w, x) * t.float() / 1000)  # noqa: E731
    for steps in (1, 3, 4, 64):
        noise = torch.randn(2, 4, 5, 6, generator=torch.Generator().manual_seed(steps))
        ref.set_timesteps(steps)
        x = noise
        for t in ref.timesteps.tolist():
            x = ref.step(model(x, torch.full((1,), t)), t, x, eta=0.0).prev_sample
        schedule = DDIMSchedule.trailing(ALPHAS, steps)
        assert list(schedule.timesteps) == ref.timesteps.tolist()
        torch.testing.assert_close(sample_ddim(model, noise, schedule=schedule), x, atol=1e-5, rtol=1e-5)


def test_euler_solves_the_probability_flow_ode_of_gaussian_data():
    s = 0.5
    exact = lambda x, sigma: x * s**2 / (s**2 + sigma**2)  # noqa: E731  D(x; sigma) for data ~ N(0, s^2)
    schedule = SigmaSchedule.karras(400, 0.002, 80.0, variance_preserving=False)
    noise = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x0 = sample_euler(exact, noise, schedule=schedule)
    # the ODE's flow scales x by sqrt(s^2 + sigma^2): from sigma_max to 0
    torch.testing.assert_close(x0, noise * 80.0 * s / math.sqrt(s**2 + 80.0**2), rtol=2e-2, atol=1e-3)
    assert schedule.sigmas[-1] == 0 and all(a > b for a, b in zip(schedule.sigmas, schedule.sigmas[1:]))


def test_ddim_and_euler_reach_the_same_samples_of_a_vp_model():
    """Both solvers integrate the same ODE: with many steps they agree, and they land on the data's
    distribution (a VP v-model's x0 from DDIM and from Euler through vp_denoised)."""
    model = gaussian_v_model(0.5)
    noise = torch.randn(4000, 1, 1, 1, generator=torch.Generator().manual_seed(1))
    ddim = solve(model, noise, solver_schedule("ddim", 250, ALPHAS), ALPHAS)
    euler = solve(model, noise, solver_schedule("euler", 250, ALPHAS), ALPHAS)
    torch.testing.assert_close(euler, ddim, atol=3e-2, rtol=3e-2)
    assert abs(float(ddim.std()) - 0.5) < 0.03 and abs(float(euler.std()) - 0.5) < 0.03
    d = vp_denoised(model, ALPHAS)
    x = torch.ones(1, 1, 1, 1)
    torch.testing.assert_close(d(x, 1.0), torch.full_like(x, 0.25 / 1.25), atol=2e-3, rtol=2e-3)  # E[x0|x] at sigma 1


def test_lognormal_timesteps_follow_edms_sigma_distribution():
    """--timesteps lognormal: ln(sigma) ~ N(-0.4, 1.2^2) (EDM), on the same VP schedule's timesteps;
    uniform stays the paper's draw over [0, T)."""
    from gamengen.diffusion.denoiser import DenoiserConfig, TrainingNoise, draw_timesteps
    from gamengen.diffusion.sampling import vp_sigmas

    sigmas = torch.tensor(vp_sigmas(scaled_linear_alphas()))
    t = draw_timesteps(DenoiserConfig(timesteps="lognormal"), 50_000, torch.Generator().manual_seed(0))
    log_sigma = sigmas[t].log()
    assert abs(log_sigma.mean().item() + 0.4) < 0.05 and abs(log_sigma.std().item() - 1.2) < 0.05
    u = draw_timesteps(DenoiserConfig(), 50_000, torch.Generator().manual_seed(0))
    assert abs(u.float().mean().item() - 499.5) < 5 and u.min() == 0 and u.max() == 999
    # per-sample draws (the CPU path) and batched draws (the GPU path) both use it
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    draws = TrainingNoise.draw(gens, (2, 3, 3), 2, DenoiserConfig(timesteps="lognormal"))
    assert draws.timesteps.shape == (4,) and draws.timesteps.dtype == torch.int64
    try:
        DenoiserConfig(timesteps="cosine")
    except ValueError as e:
        assert "lognormal" in str(e)
    else:
        raise AssertionError("an unknown draw was accepted")


def test_unrolls_put_the_models_own_prediction_in_the_context():
    """--unroll: the drawn samples' last context frame becomes the network's 1-step prediction of it
    from the context shifted back one frame; the others stay real; no unroll draws when it is off."""
    from gamengen.diffusion.denoiser import Denoiser, DenoiserConfig, TrainingNoise
    from gamengen.diffusion.sampling import ddim_loop

    class Net(torch.nn.Module):  # a v-model whose answer depends on the context and the actions
        def forward(self, x, t, context, actions, bucket):
            return 0.5 * x + context.mean(1) + 0.01 * actions.float().sum(1).view(-1, 1, 1, 1)

    gens = [torch.Generator().manual_seed(i) for i in range(6)]
    off = TrainingNoise.draw(gens, (2, 3, 3), 4, DenoiserConfig())
    assert off.unroll is None and off.unroll_noise is None
    gens = [torch.Generator().manual_seed(i) for i in range(6)]
    on = TrainingNoise.draw(gens, (2, 3, 3), 4, DenoiserConfig(unroll=0.5))
    assert torch.equal(on.noise, off.noise) and torch.equal(on.timesteps, off.timesteps)  # same draws before
    d = Denoiser(Net(), DenoiserConfig(unroll=0.5))
    ctx, acts = torch.randn(6, 4, 2, 3, 3), torch.randint(0, 5, (6, 4))
    which = torch.tensor([True, False, True, False, False, True])
    out = d.unrolled(ctx, acts, which, on.unroll_noise)
    assert torch.equal(out[~which], ctx[~which]) and torch.equal(out[:, :-1], ctx[:, :-1])
    i = 2  # by hand: one DDIM step of the v-model from the shifted-back context
    prev = torch.cat([ctx[i:i + 1, :1], ctx[i:i + 1, :-1]], 1)
    prev_acts = torch.cat([acts[i:i + 1, :1], acts[i:i + 1, :-1]], 1)
    model = lambda x, t: Net()(x, t, prev, prev_acts, None)  # noqa: E731
    want = ddim_loop(model, on.unroll_noise[i:i + 1], d.schedule("ddim", 1))
    assert torch.allclose(out[i, -1], want[0], atol=1e-6)
    assert not torch.allclose(out[i, -1], ctx[i, -1])


def no_change_v(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The exact v of data that is always 0, at (fractional) timesteps placed by log sigma, as
    vp_denoised places them: x_t = sqrt(1 - ab) eps, so v = sqrt(ab) x_t / sqrt(1 - ab)."""
    import numpy as np

    log_sigmas = np.log([math.sqrt((1 - a) / a) for a in ALPHAS])
    ls = np.interp(t.double().numpy(), np.arange(len(ALPHAS)), log_sigmas)
    ab = torch.as_tensor(1 / (1 + np.exp(2 * ls)), dtype=x.dtype).view(-1, 1, 1, 1)
    return ab.sqrt() * x / (1 - ab).sqrt()


class NoChangeNet(torch.nn.Module):
    """A network that has learnt 'nothing moves': it predicts a residual of zero (or, trained on
    frames, the frame zero) whatever the context."""

    def forward(self, noisy, t, context, actions, bucket):
        return no_change_v(noisy, t.expand(len(noisy)))


def test_a_residual_model_that_predicts_no_change_plays_copy_last():
    """--residual: the change of variables around the network makes 'no change' mean the context's
    last frame, exactly, through DDIM and Euler at any step count; the plain model's 'nothing' is
    the zero frame. In training, copy-last then costs no loss."""
    from gamengen.diffusion.denoiser import Denoiser, DenoiserConfig, TrainingNoise
    from gamengen.models.world_model import SamplerConfig

    g = torch.Generator().manual_seed(0)
    ctx, acts = torch.randn(2, 3, 4, 5, 6, generator=g), torch.zeros(2, 3, dtype=torch.long)
    noise = torch.randn(2, 4, 5, 6, generator=g)
    residual, plain = Denoiser(NoChangeNet(), DenoiserConfig(residual=True)), Denoiser(NoChangeNet(), DenoiserConfig())
    x = torch.randn(2, 4, 5, 6, generator=g)
    for t in (0.0, 1.0, 250.5, 500.0, 999.0):  # the denoised guess at any noise level, fractional too
        lo = min(int(t), 998)  # log sigma is linear between timesteps
        sigma2 = ((1 - ALPHAS[lo]) / ALPHAS[lo]) ** (1 - (t - lo)) * ((1 - ALPHAS[lo + 1]) / ALPHAS[lo + 1]) ** (t - lo)
        ab = 1 / (1 + sigma2)
        for d, want in ((residual, ctx[:, -1]), (plain, torch.zeros_like(x))):
            v = d.guided(ctx, acts, 1.0, 0.0)(x, torch.tensor([t]))
            torch.testing.assert_close(math.sqrt(ab) * x - math.sqrt(1 - ab) * v, want, atol=1e-4, rtol=1e-4)
    euler = SamplerConfig(solver="euler", steps=8, guidance=1.0)  # ends at sigma 0: its sample is that guess
    torch.testing.assert_close(residual.sample(ctx, acts, noise, euler), ctx[:, -1], atol=1e-4, rtol=1e-4)
    # CFG's other branch has no history, so its anchor is zero: w pushes away from the zero frame
    guided = residual.sample(ctx, acts, noise, SamplerConfig(solver="euler", steps=2, guidance=1.5))
    torch.testing.assert_close(guided, 1.5 * ctx[:, -1], atol=1e-4, rtol=1e-4)
    ddim = residual.sample(ctx, acts, noise, SamplerConfig(steps=4, guidance=1.0))  # DDIM ends at t = 0, not 1
    assert (ddim - ctx[:, -1]).abs().max() < 0.2 < ctx[:, -1].abs().max()

    draws = TrainingNoise(torch.tensor([10, 900]), noise, torch.zeros_like(ctx), torch.zeros(2),
                          torch.zeros(2, dtype=torch.bool))
    assert float(residual.loss(ctx[:, -1], ctx, acts, draws)) < 1e-8
    assert float(plain.loss(ctx[:, -1], ctx, acts, draws)) > 0.1
