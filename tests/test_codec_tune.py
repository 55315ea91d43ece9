"""`gamengen clip tune-codec` on the toy game's clip model: the decoders learn, the encoders and the
MSDiT do not move, `clip eval`'s held-out clips are never drawn, a run in pieces equals one run, and
bad input gets one line."""

from __future__ import annotations

import json

import numpy as np
import torch

from conftest import cli
from gamengen.curate.dataset import ClipDataset
from gamengen.eval.clip import split_clips
from gamengen.models.clip_model import ClipModel
from gamengen.models.video_vae import ClipCodec
from gamengen.train.codec_tune import CodecTuneConfig, TuneClips, decoders


def _args(clip_run, source, out, steps):
    return ["clip", "tune-codec", "--data", clip_run / "clips", "--codec", source, "--out", out, "--steps", steps,
            "--batch-size", 2, "--frames-per-clip", 3, "--learning-rate", "3e-3", "--checkpoint-every", 5]


def _changed(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return any(not torch.equal(sa[k], sb[k]) for k in sa)


def test_the_decoders_learn_and_nothing_else_moves(clip_run, tmp_path):
    source = clip_run / "run" / "model"
    res = cli(*_args(clip_run, source, tmp_path / "whole", 30), check=True)
    assert "step 30" in res.stdout, res.stdout
    before, after = ClipModel.from_pretrained(source), ClipModel.from_pretrained(tmp_path / "whole" / "model")
    t = after.codec.meta["decoder_tune"]
    assert t["steps"] == 30 and t["heldout_clips"] > 0
    assert t["heldout_clip_psnr_after"] > t["heldout_clip_psnr_before"] + 0.2, t
    # every video latent is what it was: both encoders and both scales, and the MSDiT, are untouched
    assert after.codec.frame.encoder_id() == before.codec.frame.encoder_id()
    assert (after.codec.scale, after.codec.frame.scale) == (before.codec.scale, before.codec.frame.scale)
    enc = ("enc_in.", "encoder.", "enc_out.")
    sa, sb = before.codec.vae.state_dict(), after.codec.vae.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa if k.startswith(enc))
    assert not _changed(before.net, after.net) and after.meta == before.meta and after.sampler == before.sampler
    for a, b in zip(decoders(before.codec), decoders(after.codec)):
        assert _changed(a, b)

    # in pieces: 10 steps, then the same command to 30, gives the same losses and weights
    cli(*_args(clip_run, source, tmp_path / "parts", 10), check=True)
    cli(*_args(clip_run, source, tmp_path / "parts", 30), check=True)
    whole, parts = (json.loads((tmp_path / r / "losses.json").read_text()) for r in ("whole", "parts"))
    np.testing.assert_allclose(parts, whole, rtol=1e-5, atol=1e-7)
    again = ClipModel.from_pretrained(tmp_path / "parts" / "model")
    for a, b in zip(decoders(after.codec), decoders(again.codec)):
        assert not _changed(a, b)

    # a codec folder in, a codec folder out; the same run re-run with it takes no step
    res = cli(*_args(clip_run, source / "codec", tmp_path / "whole", 30), check=True)
    codec = ClipCodec.load(tmp_path / "whole" / "model")
    assert codec.meta["decoder_tune"]["steps"] == 30
    for a, b in zip(decoders(after.codec), decoders(codec)):
        assert not _changed(a, b)


def test_the_adversarial_tune_resumes_exactly_and_differs_from_mse_alone(clip_run, tmp_path):
    source = clip_run / "run" / "model"
    adv = lambda out, steps: [*_args(clip_run, source, tmp_path / out, steps), "--adversarial", "0.5"]  # noqa: E731
    cli(*adv("whole", 8), check=True)
    cli(*adv("parts", 3), check=True)
    cli(*adv("parts", 8), check=True)  # resumed from step 3: the discriminator and its optimizer come back too
    cli(*_args(clip_run, source, tmp_path / "mse", 8), check=True)
    losses = {r: json.loads((tmp_path / r / "losses.json").read_text()) for r in ("whole", "parts", "mse")}
    np.testing.assert_allclose(losses["parts"], losses["whole"], rtol=1e-5, atol=1e-7)
    assert losses["whole"][0] == losses["mse"][0]  # the same first batch, before any step
    models = {r: ClipModel.from_pretrained(tmp_path / r / "model") for r in ("whole", "parts", "mse")}
    for a, b, m in zip(*(decoders(models[r].codec) for r in ("whole", "parts", "mse"))):
        assert not _changed(a, b) and _changed(a, m)
    assert models["whole"].codec.meta["decoder_tune"]["adversarial"] == 0.5
    assert models["whole"].codec.frame.encoder_id() == ClipModel.from_pretrained(source).codec.frame.encoder_id()


def test_clip_evals_heldout_clips_are_never_tuned_on(clip_run):
    codec = ClipCodec.load(clip_run / "vae" / "model")
    cfg = CodecTuneConfig()
    clips = TuneClips([clip_run / "clips"], codec, clip_run / "run" / "cache", cfg, print)
    train, held, _ = split_clips(ClipDataset.open(clip_run / "clips"), cfg.eval_seed, cfg.heldout_share)
    assert clips.train == [(0, i) for i in train] and clips.heldout == [(0, i) for i in held]
    assert held and not set(train) & set(held)


def test_bad_input_is_one_line_exit_2(clip_run, tmp_path):
    source = clip_run / "run" / "model"
    cli(*_args(clip_run, source, tmp_path / "run", 2), check=True)
    other = tmp_path / "other-codec"
    ClipCodec.load(source / "codec").save(other)
    c = ClipCodec.load(other)
    with torch.no_grad():
        next(c.vae.enc_in.parameters()).add_(1.0)  # an encoder weight moved: a codec of other latents
    c.save(other)
    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")}
    cases = {
        "a 2D autoencoder instead of a codec": (clip_run / "ae", tmp_path / "new"),
        "a missing folder": (tmp_path / "nope", tmp_path / "new"),
        "resumed over a codec with other encoders": (other, tmp_path / "run"),
    }
    for name, (src, out) in cases.items():
        res = cli(*_args(clip_run, src, out, 2))
        assert res.returncode == 2, (name, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "fix:" in lines[0], (name, res.stderr)
    assert not (tmp_path / "new").exists()
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*")} == kept
