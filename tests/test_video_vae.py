"""GameGen-X's video VAE (§3.3) as a causal 4x temporal VAE over the 2D AE: shapes, causality,
training on the toy store, exact resume, the folder, and clip PSNR beside the 2D AE's."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import cli
from gamengen.data.store import Store
from gamengen.errors import UserError
from gamengen.models.video_vae import ClipCodec, build_temporal_vae
from gamengen.train.video_vae import VideoVAETrainConfig, clip_psnr, heldout_clips, train_video_vae


def tiny_vae(seed: int = 0):
    torch.manual_seed(seed)
    return build_temporal_vae("tiny", 4).eval()


def test_preset_sizes_are_the_documented_ones():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(build_temporal_vae("tiny", 4)) == 90_756
    assert count(build_temporal_vae("cpu", 16)) == 1_444_368
    with pytest.raises(UserError, match="unknown video VAE preset"):
        build_temporal_vae("huge", 4)


@torch.no_grad()
def test_clip_lengths_map_to_latent_frames_and_back():
    m = tiny_vae()
    for frames, latent in ((1, 1), (5, 2), (17, 5)):
        z = torch.randn(2, frames, 4, 6, 10)
        post = m.encode(z)
        assert post.mean.shape == post.logvar.shape == (2, latent, 4, 6, 10)
        assert m.decode(post.mean).shape == z.shape
    for frames in (0, 2, 4, 6, 16):
        with pytest.raises(UserError, match=r"1 \+ 4k frames"):
            m.encode(torch.randn(1, frames, 4, 6, 10))
    with pytest.raises(UserError, match="1 \\+ 4k"):
        VideoVAETrainConfig(frames=16)


@torch.no_grad()
def test_the_encoder_is_causal_and_encodes_prefixes_alone():
    m, z = tiny_vae(), torch.randn(1, 17, 4, 6, 6)
    base = m.encode(z).mean
    for j in (1, 4, 5, 9, 16):  # change frame j: latent frames i with 4i < j saw only frames before it
        z2 = z.clone()
        z2[:, j] += torch.randn_like(z2[:, j])
        got, first = m.encode(z2).mean, -(-j // 4)
        assert torch.equal(got[:, :first], base[:, :first]), j
        assert not torch.allclose(got[:, first], base[:, first]), j  # the group holding frame j does change
    # A single image is a 1-frame clip, and a continuation's context encodes without its future.
    for frames in (1, 5, 9, 13):
        assert torch.allclose(m.encode(z[:, :frames]).mean, base[:, :1 + (frames - 1) // 4], atol=1e-5)


@torch.no_grad()
def test_the_decoder_is_causal():
    m, v = tiny_vae(), torch.randn(1, 5, 4, 6, 6)
    base = m.decode(v)
    for j in (1, 2, 3, 4):  # change latent frames j.. : frames 0..4(j-1) came from latents < j
        v2 = v.clone()
        v2[:, j:] += 1.0
        got, keep = m.decode(v2), 4 * (j - 1) + 1
        assert torch.equal(got[:, :keep], base[:, :keep]), j
        assert not torch.allclose(got[:, keep], base[:, keep]), j


def cfg(steps: int, **kw) -> VideoVAETrainConfig:
    return VideoVAETrainConfig(**{**dict(preset="tiny", steps=steps, batch_size=4, learning_rate=3e-3,
                                         checkpoint_every=10, keep_checkpoints=10), **kw})


@pytest.fixture(scope="module")
def runs(toy, tmp_path_factory):
    """An untrained codec, one run of 40 steps, and a run of 20 steps continued to 40 in its folder."""
    root = tmp_path_factory.mktemp("video_vae")
    args = (toy / "store", toy / "ae")
    untrained = train_video_vae(*args, root / "zero", cfg(0))
    whole = train_video_vae(*args, root / "whole", cfg(40))
    train_video_vae(*args, root / "parts", cfg(20))
    parts = train_video_vae(*args, root / "parts", cfg(40))
    clips = heldout_clips(Store.open(toy / "store"), 17, 0.1, n=4)
    assert len(clips) == 4, "the toy store's held-out episodes should hold 17-frame clips"
    return root, untrained, whole, parts, clips


def test_training_lowers_the_latent_mse(runs):
    _, untrained, whole, _, clips = runs
    before, after = clip_psnr(untrained, clips), clip_psnr(whole, clips)
    assert after["latent_mse"] < 0.7 * before["latent_mse"], (before, after)
    assert after["clip_psnr"] > before["clip_psnr"] + 1.0, (before, after)
    assert whole.meta["train_steps"] == 40 and whole.meta["heldout_clip_psnr"] > 0


def test_a_run_in_two_pieces_equals_one_run(runs, toy):
    """Resume is exact, and the same seed gives the same weights (the two folders trained apart)."""
    from safetensors.torch import load_file

    root, _, whole, parts, _ = runs
    a, b = whole.vae.state_dict(), parts.vae.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert whole.scale == parts.scale
    assert json.loads((root / "whole" / "losses.json").read_text()) == \
        json.loads((root / "parts" / "losses.json").read_text())
    for step in ("step-00000020", "step-00000040"):
        x, y = (load_file(root / r / "checkpoints" / step / "tensors.safetensors") for r in ("whole", "parts"))
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), step
    before = {p: p.stat().st_mtime_ns for p in (root / "whole").rglob("*")}
    with pytest.raises(UserError, match=r"other settings \(seed\)"):
        train_video_vae(toy / "store", toy / "ae", root / "whole", cfg(40, seed=1))
    assert {p: p.stat().st_mtime_ns for p in (root / "whole").rglob("*")} == before


def test_the_folder_round_trips_and_holds_no_pickles(runs):
    root, _, whole, _, clips = runs
    back = ClipCodec.load(root / "whole" / "model")
    assert back.scale == whole.scale and back.meta == whole.meta
    v = whole.encode_clip(clips[0])
    assert v.shape == whole.latent_shape(17) == (5, 4, 16, 16)
    assert torch.equal(back.encode_clip(clips[0]), v)
    out = whole.decode_clip(v)
    assert out.dtype == np.uint8 and out.shape == clips[0].shape
    assert np.array_equal(back.decode_clip(v), out)
    with pytest.raises(UserError, match="1 \\+ 4k"):
        whole.encode_clip(clips[0][:6])
    assert not [p for p in root.rglob("*") if p.suffix in (".pkl", ".pt", ".pth", ".bin", ".ckpt", ".pickle")]


def test_broken_folders_get_one_line(runs, toy, tmp_path):
    root = runs[0]
    with pytest.raises(UserError, match="no video VAE folder"):
        ClipCodec.load(tmp_path / "nothing")
    with pytest.raises(UserError, match="holds a 2D autoencoder"):
        ClipCodec.load(toy / "ae")
    with pytest.raises(UserError, match="missing"):
        ClipCodec.load(root / "whole")  # the run folder, not its model/
    bad = tmp_path / "bad"
    shutil.copytree(root / "whole" / "model", bad)
    weights = bad / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UserError, match="damaged"):
        ClipCodec.load(bad)
    meta = bad / "gamengen_video_vae.json"
    d = json.loads(meta.read_text())
    meta.write_text(json.dumps({**d, "version": 99}))
    with pytest.raises(UserError, match="version 99"):
        ClipCodec.load(bad)
    meta.write_text(json.dumps({**d, "format": "gamengen-world-model"}))
    with pytest.raises(UserError, match="not a video VAE folder"):
        ClipCodec.load(bad)
    meta.write_text("{")
    with pytest.raises(UserError, match="not valid JSON"):
        ClipCodec.load(bad)


def test_clip_psnr_is_reported_beside_the_2d_ae(runs):
    """The codec reconstructs through the 2D AE, so it cannot beat it by much; both figures are real
    PSNRs of the same frames (the 2D AE's one checked by hand)."""
    _, untrained, whole, _, clips = runs
    r = clip_psnr(whole, clips)
    assert set(r) == {"clip_psnr", "ae_psnr", "latent_mse", "frames"} and r["frames"] == 4 * 17
    assert r["ae_psnr"] >= r["clip_psnr"] - 0.5
    ae = whole.frame
    mse = np.mean([np.mean((ae.decode(ae.encode(c)).astype(float) - c) ** 2) for c in clips])
    assert abs(r["ae_psnr"] - 10 * np.log10(255**2 / mse)) < 1e-6
    assert clip_psnr(untrained, clips)["ae_psnr"] == r["ae_psnr"]  # the same 2D AE underneath
    one = clip_psnr(whole, clips[0])  # a single clip (F, H, W, 3) works too
    assert one["frames"] == 17


def test_the_pixel_loss_adds_to_the_latent_loss(toy, tmp_path):
    """Same seed, same first batch and noise: the pixel term through the frozen 2D decoder adds a positive amount."""
    losses = {}
    for w in (0.0, 1.0):
        seen = []
        train_video_vae(toy / "store", toy / "ae", tmp_path / str(w), cfg(1, pixel_weight=w),
                        report=lambda done, total, loss: seen.append(loss))
        losses[w] = seen[0]
    assert losses[1.0] > losses[0.0] and np.isfinite(losses[1.0])


def test_clips_longer_than_every_episode_are_refused_before_any_write(toy, tmp_path):
    with pytest.raises(UserError, match="no training episode has 4001 frames"):
        train_video_vae(toy / "store", toy / "ae", tmp_path / "run", cfg(1, frames=4001))
    assert not (tmp_path / "run").exists()


def test_several_stores_train_as_one_pool(toy, tmp_path):
    """Two stores (two recordings here; games in use) train one codec: the run records both, the
    held-out PSNR pools both stores' clips, and a store of another frame size is refused by name."""
    other = tmp_path / "other"
    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "1500", "--seed", "5",
        "--out", other, check=True)
    codec = train_video_vae([toy / "store", other], toy / "ae", tmp_path / "run", cfg(2))
    settings = json.loads((tmp_path / "run" / "config.json").read_text())
    assert settings["data"] == [str((toy / "store").resolve()), str(other.resolve())]
    one = len(heldout_clips(Store.open(toy / "store"), 17, 0.1)) + len(heldout_clips(Store.open(other), 17, 0.1))
    assert codec.meta["heldout_frames"] == 17 * one and codec.meta["env_id"] == "toy:cursor"
    small = tmp_path / "small"
    cli("record", "--env", "toy:cursor", "--resolution", "16x16", "--steps", "50", "--out", small, check=True)
    with pytest.raises(UserError, match=f"the store {small} holds 16x16"):
        train_video_vae([toy / "store", small], toy / "ae", tmp_path / "refused", cfg(2))
    assert not (tmp_path / "refused").exists()
