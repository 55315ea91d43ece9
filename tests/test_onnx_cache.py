"""Play's frame graph is cached in the user's cache folder, keyed by what it depends on; a damaged or
stale entry is rebuilt (engine/fast.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gamengen.engine import fast

pytestmark = pytest.mark.skipif(not fast.available(), reason="onnx/onnxruntime not installed")


def tiny_parts(seed: int = 0):
    """A tiny random U-Net (context 2, 3 actions), its codec, and a 2-step DDIM schedule."""
    from gamengen.diffusion.sampling import DDIMSchedule, scaled_linear_alphas
    from gamengen.models.autoencoder import AE_PRESETS, FrameCodec, build_autoencoder
    from gamengen.models.unet import ActionConditionedUNet
    from gamengen.train.world_model import UNET_PRESETS

    torch.manual_seed(seed)
    codec = FrameCodec(build_autoencoder(AE_PRESETS["tiny"]).eval(), 16, 16, pad_multiple=4)
    C, h, w = codec.latent_shape()
    net = ActionConditionedUNet(latent_channels=C, latent_height=h, latent_width=w, context=2, n_actions=3,
                                **UNET_PRESETS["tiny"]).eval()
    alphas = scaled_linear_alphas()
    return net, codec, DDIMSchedule.trailing(alphas, 2), alphas


def tiny_path(seed: int = 0):
    net, codec, schedule, alphas = tiny_parts(seed)
    return lambda: fast.OnnxPath(net, codec, schedule, alphas, context=2, threads=1)


def run_once(path) -> np.ndarray:
    C, h, w = path.codec.latent_shape()
    g = torch.Generator().manual_seed(0)
    z, _, _ = path.frame(torch.randn(1, 2, C, h, w, generator=g), torch.tensor([[0, 1]]), torch.tensor([0]), 1.5,
                      torch.randn(1, C, h, w, generator=g))
    return z.numpy()


def test_the_graph_is_cached_reused_and_rebuilt_when_damaged_or_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("GAMENGEN_CACHE", str(tmp_path))
    make = tiny_path()
    cold = make()
    assert cold.source == "exported"
    graphs = sorted((tmp_path / "onnx").glob("*.onnx"))
    assert len(graphs) == 1 and json.loads(graphs[0].with_suffix(".json").read_text())["bytes"] == graphs[0].stat().st_size
    warm = make()
    assert warm.source == "cache"
    np.testing.assert_array_equal(run_once(warm), run_once(cold))

    graphs[0].write_bytes(graphs[0].read_bytes()[:1000])  # damaged (a crash mid-copy, a bad disk)
    rebuilt = make()
    assert rebuilt.source == "exported"
    np.testing.assert_array_equal(run_once(rebuilt), run_once(cold))
    assert make().source == "cache"

    other = tiny_path(seed=1)()  # other weights: another entry, never the first one's graph
    assert other.source == "exported" and len(list((tmp_path / "onnx").glob("*.onnx"))) == 2
    assert not np.array_equal(run_once(other), run_once(cold))


def test_an_unwritable_cache_still_plays(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("GAMENGEN_CACHE", str(blocked))
    path = tiny_path()()
    assert path.source == "exported" and np.isfinite(run_once(path)).all()


@pytest.mark.parametrize("guidance", [1.0, 1.5])
def test_a_residual_models_graph_plays_the_reference_frames(tmp_path, monkeypatch, guidance):
    """--residual models: the frame graph carries the change of variables (the context's last frame
    as the anchor, zero in CFG's other branch) and gives the eager path's latents."""
    from gamengen.diffusion.denoiser import Denoiser, DenoiserConfig
    from gamengen.engine.runtime import EagerPath

    monkeypatch.setenv("GAMENGEN_CACHE", str(tmp_path))
    net, codec, schedule, alphas = tiny_parts()
    plain = fast.OnnxPath(net, codec, schedule, alphas, context=2, guided=guidance != 1.0, threads=1)
    path = fast.OnnxPath(net, codec, schedule, alphas, context=2, guided=guidance != 1.0, threads=1, residual=True)
    ref = EagerPath(Denoiser(net, DenoiserConfig(residual=True)), codec, schedule)
    C, h, w = codec.latent_shape()
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(1, 2, C, h, w, generator=g), torch.tensor([[2, 1]]), torch.tensor([3]), guidance,
            torch.randn(1, C, h, w, generator=g))
    z, _, _ = path.frame(*args)
    z_ref, _, _ = ref.frame(*args)
    torch.testing.assert_close(z, z_ref, atol=1e-4, rtol=1e-4)
    z_plain, _, _ = plain.frame(*args)
    assert not torch.allclose(z, z_plain, atol=1e-2)  # the residual graph is not the plain one
