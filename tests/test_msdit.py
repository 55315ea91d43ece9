"""GameGen-X foundation model: the MSDiT network (models/msdit.py) and rectified flow (diffusion/flow.py)."""

from __future__ import annotations

import pytest
import torch

from gamengen.diffusion import flow
from gamengen.diffusion.flow import euler_sample, flow_loss, flow_times, frame_mask, guided, noised, sample_t
from gamengen.models import msdit
from gamengen.models.msdit import MSDIT_PRESETS, MSDiT


def tiny(seed: int = 0, perturb: float | None = 0.1, **changes) -> MSDiT:
    """The tiny preset (with config changes); with perturb, every parameter moved off its (partly zero)
    init by N(0, perturb)."""
    torch.manual_seed(seed)
    model = MSDiT(**{**MSDIT_PRESETS["tiny"], **changes}).eval()
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * perturb)
    return model


def inputs(B: int = 2, T: int = 4, h: int = 6, w: int = 8, L: int = 5, seed: int = 1) -> dict:
    """Keyword inputs for the tiny preset; sample 1's text is padded after 3 tokens."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[1:, 3:] = False
    return dict(x=torch.randn(B, T, 4, h, w, generator=g), t=torch.rand(B, T, generator=g),
                encoder_hidden_states=torch.randn(B, L, 16, generator=g), encoder_attention_mask=mask,
                fps=torch.full((B,), 24.0), num_frames=torch.full((B,), 4 * T - 3), height=torch.full((B,), 8 * h),
                width=torch.full((B,), 8 * w))


def run(model: MSDiT, kw: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**kw)


@pytest.mark.parametrize("T,h,w", [(1, 4, 4), (3, 7, 10), (5, 6, 8)])
def test_fresh_model_shape_and_zero_output(T, h, w):
    # Odd sides (7) go through the pad-and-crop path; the zero-init final layer makes v exactly 0.
    kw = inputs(T=T, h=h, w=w)
    out = run(tiny(perturb=None), kw)
    assert out.shape == kw["x"].shape
    assert torch.equal(out, torch.zeros_like(out))
    out = run(tiny(), kw)
    assert out.shape == kw["x"].shape and out.abs().mean() > 1e-2 and torch.isfinite(out).all()


def test_unpatchify_puts_each_patch_back_in_place():
    # A fresh model's blocks are the identity (zero gates), so with only the final linear made
    # non-zero a token's output is a function of its own input patch: a change at pixel (3, 5) must
    # come out in patch rows 2-3, columns 4-5 and nowhere else (odd h = 7 tests the padding too).
    model, kw = tiny(perturb=None), inputs(T=2, h=7, w=10)
    torch.nn.init.normal_(model.proj_out.weight)
    base = run(model, kw)
    x = kw["x"].clone()
    x[:, :, :, 3, 5] += 1.0
    diff = (run(model, dict(kw, x=x)) - base).abs().amax(dim=(0, 1, 2))  # (h, w)
    assert diff[2:4, 4:6].min() > 1e-4
    diff[2:4, 4:6] = 0
    assert torch.equal(diff, torch.zeros_like(diff))


def test_save_load_round_trip(tmp_path):
    model, kw = tiny(), inputs()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "diffusion_pytorch_model.safetensors").is_file()
    loaded = MSDiT.from_pretrained(tmp_path).eval()
    assert loaded.config.hidden_size == MSDIT_PRESETS["tiny"]["hidden_size"]
    assert torch.equal(run(loaded, kw), run(model, kw))


def test_gradient_checkpointing_same_gradients():
    grads = []
    for checkpointing in (False, True):
        model, kw = tiny(), inputs()
        if checkpointing:
            model.enable_gradient_checkpointing()
        model(**kw).square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert grads[0].abs().max() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)


@pytest.mark.parametrize("pooled_text", [False, True])
def test_text_mask(pooled_text):
    model, kw = tiny(pooled_text=pooled_text), inputs()
    base = run(model, kw)
    padded = dict(kw, encoder_hidden_states=kw["encoder_hidden_states"].clone())
    padded["encoder_hidden_states"][1, 3:] += 5.0  # under mask = False
    assert torch.allclose(run(model, padded), base, atol=1e-6)
    real = dict(kw, encoder_hidden_states=kw["encoder_hidden_states"].clone())
    real["encoder_hidden_states"][1, 1] += 1.0
    changed = run(model, real)
    assert (changed[1] - base[1]).abs().max() > 1e-3
    assert torch.equal(changed[0], base[0])  # samples do not mix


@pytest.mark.parametrize("pooled_text", [False, True])
def test_empty_mask_is_null_text(pooled_text):
    model, kw = tiny(pooled_text=pooled_text), inputs()
    B, L = kw["encoder_attention_mask"].shape
    dropped = run(model, dict(kw, encoder_attention_mask=torch.zeros(B, L, dtype=torch.bool)))
    text, mask = model.null_text(B, L)
    assert torch.equal(run(model, dict(kw, encoder_hidden_states=text, encoder_attention_mask=mask)), dropped)
    assert (dropped - run(model, kw)).abs().max() > 1e-3


def test_pooled_text_reaches_the_modulation_without_cross_attention():
    # With every cross-attention output zeroed, the caption can reach the velocity only through the
    # pooled path: it must with pooled_text and must not without it.
    kw = inputs()
    other = dict(kw, encoder_hidden_states=kw["encoder_hidden_states"] + 1.0)
    for pooled in (False, True):
        model = tiny(pooled_text=pooled)
        with torch.no_grad():
            for b in (*model.spatial_blocks, *model.temporal_blocks):
                b.cross.to_out[0].weight.zero_()
                b.cross.to_out[0].bias.zero_()
        moved = (run(model, other) - run(model, kw)).abs().max()
        assert (moved > 1e-3) if pooled else (moved == 0), (pooled, moved)


def test_metadata_and_timestep_matter():
    model, kw = tiny(), inputs()
    base = run(model, kw)
    for key, value in [("fps", 8.0), ("num_frames", 40), ("height", 96), ("width", 32)]:
        assert (run(model, dict(kw, **{key: torch.full((2,), value)})) - base).abs().max() > 1e-4, key
    t = kw["t"].clone()
    t[:, 2] = 0.0  # a frame's own t changes every frame's output (through temporal attention)
    assert (run(model, dict(kw, t=t))[:, 0] - base[:, 0]).abs().max() > 1e-4


def test_temporal_attention_mixes_frames():
    model, kw = tiny(), inputs(T=4)
    base = run(model, kw)
    x = kw["x"].clone()
    x[:, 0] += 1.0
    assert (run(model, dict(kw, x=x))[:, 3] - base[:, 3]).abs().max() > 1e-3


def test_blocks_attend_along_their_axis():
    # A spatial block never mixes frames; a temporal block never mixes spatial positions.
    model = tiny()
    B, T, S, D = 2, 3, 6, 32
    g = torch.Generator().manual_seed(0)
    x, mod, text = torch.randn(B, T, S, D, generator=g), torch.randn(B, T, 6, D, generator=g), torch.randn(B, 4, D)
    rope_s = model._rope([torch.arange(S, dtype=torch.float32) // 3, torch.arange(S, dtype=torch.float32) % 3])
    rope_t = model._rope([torch.arange(T, dtype=torch.float32)])
    spatial, temporal = model.spatial_blocks[0], model.temporal_blocks[0]
    with torch.no_grad():
        y_s, y_t = spatial(x, mod, text, None, rope_s), temporal(x, mod, text, None, rope_t)
        x2 = x.clone()
        x2[:, 0, 0] += torch.randn(D, generator=g)  # frame 0, position 0 (not a constant: LayerNorm removes it)
        z_s, z_t = spatial(x2, mod, text, None, rope_s), temporal(x2, mod, text, None, rope_t)
    assert torch.equal(z_s[:, 1:], y_s[:, 1:]) and (z_s[:, 0, 1:] - y_s[:, 0, 1:]).abs().max() > 1e-3
    assert torch.equal(z_t[:, :, 1:], y_t[:, :, 1:]) and (z_t[:, 1:, 0] - y_t[:, 1:, 0]).abs().max() > 1e-3


def patches(x: torch.Tensor, p: int = 2) -> torch.Tensor:
    """(B, F, C, h, w) -> (B, F, S, C, p, p): the model's tokens, row-major."""
    B, T, C, h, w = x.shape
    return x.view(B, T, C, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4, 6).reshape(B, T, -1, C, p, p)


def unpatches(t: torch.Tensor, h: int, w: int) -> torch.Tensor:
    B, T, S, C, p, _ = t.shape
    return t.view(B, T, h // p, w // p, C, p, p).permute(0, 1, 4, 2, 5, 3, 6).reshape(B, T, C, h, w)


@pytest.mark.parametrize("rope", [True, False])
def test_rope_gives_positions(monkeypatch, rope):
    # Without position information a transformer is equivariant to permuting its tokens; with RoPE
    # (2D in space, 1D in time) a permuted input must not give the permuted output.
    if not rope:
        monkeypatch.setattr(msdit, "apply_rotary_emb", lambda x, freqs: x)
    model, kw = tiny(), inputs(h=4, w=6)
    kw["t"] = torch.full_like(kw["t"], 0.5)  # same t everywhere, so only RoPE tells frames apart
    base = run(model, kw)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(3))
    x_s = unpatches(patches(kw["x"])[:, :, perm], 4, 6)
    moved_s = unpatches(patches(run(model, dict(kw, x=x_s)))[:, :, torch.argsort(perm)], 4, 6)
    frames = torch.tensor([2, 0, 3, 1])
    moved_t = run(model, dict(kw, x=kw["x"][:, frames]))[:, torch.argsort(frames)]
    for moved in (moved_s, moved_t):
        if rope:
            assert (moved - base).abs().max() > 1e-3
        else:
            assert torch.allclose(moved, base, atol=1e-5)


def test_paper_preset_forward():
    """The paper preset (1,215,293,840 parameters; ~4.9 GB in fp32) built in full on CPU and run once
    on a small latent (B=1, F=2, 4x4, 8 text tokens). About 11-15 s single-threaded
    (with a training job sharing the 2 cores), mostly the init."""
    model = MSDiT(**MSDIT_PRESETS["paper"]).eval()
    assert 1.20e9 < model.num_parameters() < 1.23e9
    B, T, L = 1, 2, 8
    with torch.no_grad():
        out = model(torch.randn(B, T, 4, 4, 4), torch.rand(B, T), torch.randn(B, L, 4096),
                    torch.ones(B, L, dtype=torch.bool), fps=torch.tensor([24.0]), num_frames=torch.tensor([5]),
                    height=torch.tensor([32]), width=torch.tensor([32]))
    assert out.shape == (B, T, 4, 4, 4) and torch.equal(out, torch.zeros_like(out))


# --- rectified flow -----------------------------------------------------------------------------


def test_frame_mask():
    assert frame_mask(2, 4, torch.tensor([0, 2])).tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert frame_mask(3, 3, 1).tolist() == [[0, 1, 1]] * 3


def test_noised_keeps_context_clean():
    g = torch.Generator().manual_seed(0)
    z, noise = torch.randn(2, 4, 3, 5, 5, generator=g), torch.randn(2, 4, 3, 5, 5, generator=g)
    t, mask = torch.tensor([0.3, 0.9]), frame_mask(2, 4, torch.tensor([1, 3]))
    x, t_frames = noised(z, noise, t, mask)
    assert torch.allclose(t_frames, torch.tensor([[0, 0.3, 0.3, 0.3], [0, 0, 0, 0.9]]))
    assert torch.equal(x[0, :1], z[0, :1]) and torch.equal(x[1, :3], z[1, :3])
    assert torch.allclose(x[0, 1:], 0.7 * z[0, 1:] + 0.3 * noise[0, 1:])
    assert torch.allclose(x[1, 3], 0.1 * z[1, 3] + 0.9 * noise[1, 3])


def test_context_noise_noises_the_context_and_tells_its_level():
    """GameNGen §3.2.1's noise augmentation on §3.3's context: context frames at their own flow time,
    the generated frames as before, and a zero level the clean path exactly."""
    g = torch.Generator().manual_seed(0)
    z, noise = torch.randn(2, 4, 3, 5, 5, generator=g), torch.randn(2, 4, 3, 5, 5, generator=g)
    t, mask = torch.tensor([0.3, 0.9]), frame_mask(2, 4, torch.tensor([1, 3]))
    x, t_frames = noised(z, noise, t, mask, torch.tensor([0.2, 0.0]))
    assert torch.allclose(t_frames, torch.tensor([[0.2, 0.3, 0.3, 0.3], [0, 0, 0, 0.9]]))
    assert torch.allclose(x[0, :1], 0.8 * z[0, :1] + 0.2 * noise[0, :1]) and torch.equal(x[1, :3], z[1, :3])
    assert torch.allclose(x[0, 1:], 0.7 * z[0, 1:] + 0.3 * noise[0, 1:])
    clean = noised(z, noise, t, mask)
    assert torch.equal(noised(z, noise, t, mask, torch.zeros(2))[0], clean[0])
    # the loss still counts the generated frames only: wrong on the noised context costs nothing
    m = mask[..., None, None, None]
    assert flow_loss(lambda x, t: noise - z + 100 * (1 - m), z, noise, t, mask, torch.tensor([0.2, 0.1])) == 0


def test_flow_loss_only_counts_generated_frames():
    g = torch.Generator().manual_seed(0)
    z, noise = torch.randn(2, 4, 3, 5, 5, generator=g), torch.randn(2, 4, 3, 5, 5, generator=g)
    t, mask = torch.tensor([0.3, 0.9]), frame_mask(2, 4, torch.tensor([1, 3]))
    m = mask[..., None, None, None]
    assert flow_loss(lambda x, t: noise - z, z, noise, t, mask) == 0
    assert flow_loss(lambda x, t: noise - z + 100 * (1 - m), z, noise, t, mask) == 0  # wrong on context only
    assert flow_loss(lambda x, t: noise - z + 2 * m, z, noise, t, mask).item() == pytest.approx(4.0)
    # The velocity is checked against x_t and t as the model receives them: v = (x_t - z) / t, with t = 0 on context.
    exact = lambda x, t: torch.where(t[..., None, None, None] > 0, (x - z) / t.clamp_min(1e-9)[..., None, None, None],
                                     noise - z)  # noqa: E731
    assert flow_loss(exact, z, noise, t, mask).item() == pytest.approx(0.0, abs=1e-9)

    # mean_weight: a shift of a frame's whole channel (a tint) costs 1 + w times as much; an error of zero
    # spatial mean costs the same as without it
    shift = torch.zeros(1, 1, 3, 1, 1)
    shift[:, :, 1] = 3.0
    assert flow_loss(lambda x, t: noise - z + shift * m, z, noise, t, mask, mean_weight=4.0).item() == \
        pytest.approx(5 * 9 / 3)
    checker = (torch.arange(5)[:, None] + torch.arange(5)).remainder(2).float() * 2 - 1  # +-1, mean 1/25
    checker = checker - checker.mean()
    plain = flow_loss(lambda x, t: noise - z + checker * m, z, noise, t, mask)
    assert flow_loss(lambda x, t: noise - z + checker * m, z, noise, t, mask, mean_weight=4.0).item() == \
        pytest.approx(plain.item(), rel=1e-5)

def test_sample_t():
    draw = lambda kind, seed: sample_t(4096, torch.Generator().manual_seed(seed), kind)  # noqa: E731
    assert torch.equal(draw("logit_normal", 0), draw("logit_normal", 0))
    for kind in ("logit_normal", "uniform"):
        t = draw(kind, 1)
        assert t.shape == (4096,) and 0 < t.min() and t.max() < 1 and abs(t.median() - 0.5) < 0.03
    # logit-normal puts fewer draws near the ends than uniform
    assert (draw("logit_normal", 1) < 0.1).float().mean() < 0.7 * (draw("uniform", 1) < 0.1).float().mean()
    with pytest.raises(ValueError):
        draw("cosine", 0)


def test_flow_times():
    assert flow_times(4) == pytest.approx([1, 0.75, 0.5, 0.25, 0])
    shifted = flow_times(4, shift=3.0)
    assert shifted[0] == 1 and shifted[-1] == 0 and all(a > b for a, b in zip(shifted, shifted[1:]))
    assert all(s >= u for s, u in zip(shifted, flow_times(4)))


def test_euler_reaches_point_mass_and_keeps_context():
    # Data always equal to c: x_t = (1 - t) c + t eps, so eps = (x_t - (1 - t) c) / t and the exact
    # velocity eps - c = (x_t - c) / t. Paths are straight, so Euler is exact at any step count.
    g = torch.Generator().manual_seed(0)
    c, noise = torch.randn(2, 5, 3, 4, 4, generator=g), torch.randn(2, 5, 3, 4, 4, generator=g)
    context = torch.randn(2, 2, 3, 4, 4, generator=g)
    seen = []

    def model(x, t):
        seen.append((x[:, :2].clone(), t.clone()))
        s = t[..., None, None, None]
        return torch.where(s > 0, (x - c) / s.clamp_min(1e-9), 0.0)

    out = euler_sample(model, noise, context, steps=3)
    assert len(seen) == 3 and torch.equal(out[:, :2], context)
    assert all(torch.equal(x, context) and (t[:, :2] == 0).all() and (t[:, 2:] > 0).all() for x, t in seen)
    assert torch.allclose(out[:, 2:], c[:, 2:], atol=1e-5)
    assert torch.allclose(euler_sample(model, noise, steps=4, shift=3.0), c, atol=1e-5)
    # A context shown noised to flow time 0.25 (GameNGen's noise augmentation at inference), returned clean.
    seen.clear()
    out = euler_sample(model, noise, context, steps=3, context_t=0.25)
    shown = 0.75 * context + 0.25 * noise[:, :2]
    assert all(torch.allclose(x, shown) and torch.allclose(t[:, :2], torch.tensor(0.25)) for x, t in seen)
    assert torch.equal(out[:, :2], context) and torch.allclose(out[:, 2:], c[:, 2:], atol=1e-5)
    assert torch.equal(euler_sample(model, noise, context, steps=3, context_t=0.0),
                       euler_sample(model, noise, context, steps=3))


def test_euler_maps_gaussian_data_monotonically():
    # Data z ~ N(mu, s^2) per element. x_t = a z + t eps (a = 1 - t) is N(a mu, a^2 s^2 + t^2), and the
    # exact velocity is E[eps - z | x_t] = (t - a s^2) / (a^2 s^2 + t^2) (x_t - a mu) - mu. In 1D the
    # ODE's map from noise to data is the monotone one: x_0 = mu + s eps.
    mu, s = 0.5, 0.3

    def model(x, t):
        t = t[..., None, None, None]
        a = 1 - t
        return (t - a * s**2) / (a**2 * s**2 + t**2) * (x - a * mu) - mu

    noise = torch.randn(2, 3, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    out = euler_sample(model, noise, steps=200)
    assert torch.allclose(out, mu + s * noise, atol=2e-2)
    assert abs(out.mean() - mu) < 0.02 and abs(out.std() - s) < 0.02


def test_guided():
    def model(x, t, scale, offset):
        return x * scale[:, None, None, None, None] + offset[:, None, None, None, None] + t[..., None, None, None]

    x, t = torch.randn(2, 3, 1, 2, 2), torch.rand(2, 3)
    cond = dict(scale=torch.tensor([2.0, 3.0]), offset=torch.tensor([1.0, -1.0]))
    uncond = dict(scale=torch.tensor([0.5, 1.0]), offset=torch.tensor([0.0, 0.0]))
    v_c, v_u = model(x, t, **cond), model(x, t, **uncond)
    assert torch.equal(guided(model, cond, uncond, 1.0)(x, t), v_c)
    assert torch.allclose(guided(model, cond, uncond, 3.0)(x, t), v_u + 3 * (v_c - v_u))
    with pytest.raises(ValueError):
        guided(model, cond, dict(scale=uncond["scale"]), 2.0)
    # Guidance on InstructNet's controls, composed with the text's; weight 1 is the plain CFG above.
    off = dict(scale=torch.tensor([1.5, 2.0]), offset=torch.tensor([0.5, 0.5]))
    v_o = model(x, t, **off)
    assert torch.equal(guided(model, cond, uncond, 3.0, off, 1.0)(x, t), guided(model, cond, uncond, 3.0)(x, t))
    assert torch.allclose(guided(model, cond, uncond, 3.0, off, 5.0)(x, t), v_u + 3 * (v_c - v_u) + 4 * (v_c - v_o))
    assert torch.allclose(guided(model, cond, uncond, 1.0, off, 5.0)(x, t), v_c + 4 * (v_c - v_o))
    with pytest.raises(ValueError):
        guided(model, cond, uncond, 2.0, dict(scale=off["scale"]), 5.0)


def test_guided_msdit_sampling_round():
    # The pieces together: a tiny MSDiT under CFG (one 2B batch) against its two branches run apart.
    model, kw = tiny(), inputs(T=3)
    B, L = kw["encoder_attention_mask"].shape
    meta = {k: kw[k] for k in ("fps", "num_frames", "height", "width")}
    cond = dict(encoder_hidden_states=kw["encoder_hidden_states"], encoder_attention_mask=kw["encoder_attention_mask"],
                **meta)
    text, mask = model.null_text(B, L)
    uncond = dict(encoder_hidden_states=text, encoder_attention_mask=mask, **meta)
    with torch.no_grad():
        v_c, v_u = model(kw["x"], kw["t"], **cond), model(kw["x"], kw["t"], **uncond)
        assert torch.allclose(guided(model, cond, uncond, 2.5)(kw["x"], kw["t"]), v_u + 2.5 * (v_c - v_u), atol=1e-5)
        out = euler_sample(guided(model, cond, uncond, 2.0), kw["x"], kw["x"][:, :1], steps=2)
    assert torch.equal(out[:, :1], kw["x"][:, :1]) and torch.isfinite(out).all()


def test_flow_imports_nothing_from_gamengen():
    # flow.py takes the network as a callable: it must not pull in models, training or the engine.
    with open(flow.__file__) as f:
        source = f.read()
    assert "import gamengen" not in source and "from gamengen" not in source and "from ." not in source
