"""Evaluation (issue 6): metrics against known values, the report on the toy model, FVD wiring with
a stand-in detector, and bad input."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from conftest import Server, cli, needs_browser
from gamengen.eval.fvd import fvd, load_i3d
from gamengen.eval.metrics import MAX_DB, frechet_distance, perceptual, psnr, ssim
from gamengen.models.world_model import WorldModel


def texture(h=48, w=64, seed=0) -> np.ndarray:
    """A smooth random picture (so a shift changes it gradually), values well inside 0..255."""
    rng = np.random.default_rng(seed)
    small = rng.uniform(40, 215, (h // 8, w // 8, 3))
    return np.kron(small, np.ones((8, 8, 1))).astype(np.uint8)


def test_psnr_known_values():
    x = texture()
    assert psnr(x, x) == MAX_DB
    # a uniform error of 16 grey levels: MSE 256, PSNR = 10 log10(255^2 / 256)
    assert psnr(x + 16, x) == pytest.approx(10 * np.log10(255**2 / 256), abs=1e-3)
    # Gaussian noise of std 10 (no clipping at mid-grey): PSNR close to 20 log10(255 / 10)
    grey = np.full((120, 160, 3), 128, np.uint8)
    noisy = (grey + np.random.default_rng(1).normal(0, 10, grey.shape)).round().clip(0, 255).astype(np.uint8)
    assert psnr(noisy, grey) == pytest.approx(20 * np.log10(255 / 10), abs=0.1)


def test_ssim_and_psnr_fall_with_a_shift():
    x = texture()
    assert ssim(x, x) == pytest.approx(1.0, abs=1e-4)
    shifts = [1, 4, 8]
    s = [ssim(np.roll(x, k, axis=1), x) for k in shifts]
    p = [psnr(np.roll(x, k, axis=1), x) for k in shifts]
    assert s[0] < 1.0 and s[0] > s[1] > s[2]
    assert p[0] > p[1] > p[2]


def test_frechet_distance_known_values():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(500, 6))
    assert frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    d = np.array([1.0, -2.0, 0, 0, 0, 3.0])
    assert frechet_distance(a, a + d) == pytest.approx(float(d @ d), rel=1e-6)  # same covariance, mean moved
    c = a - a.mean(0)
    # covariance times 4: tr(C) + tr(4C) - 2 tr(2C) = tr(C)
    assert frechet_distance(c, 2 * c) == pytest.approx(float(np.trace(np.cov(c, rowvar=False))), rel=1e-6)


def test_lpips_says_unavailable_without_its_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty hub cache: no AlexNet weights
    metric, why = perceptual()
    assert metric is None and why.startswith("unavailable")


class StandInI3D(torch.nn.Module):
    """Not I3D: per-frame channel means and stds as 'features', with I3D's call signature, so the
    FVD path (TorchScript load, clip layout, Fréchet distance) runs without the real weights."""

    def forward(self, x: torch.Tensor, rescale: bool = False, resize: bool = True,
                return_features: bool = True) -> torch.Tensor:
        return torch.cat([x.mean(dim=(3, 4)).flatten(1), x.std(dim=(3, 4)).flatten(1)], dim=1)


@pytest.fixture(scope="module")
def standin_i3d(tmp_path_factory):
    path = tmp_path_factory.mktemp("i3d") / "i3d_torchscript.pt"
    torch.jit.script(StandInI3D()).save(str(path))
    return path


def test_fvd_wiring_with_a_standin_detector(standin_i3d, tmp_path):
    det, why = load_i3d(standin_i3d)
    assert det is not None and why == ""
    rng = np.random.default_rng(0)
    real = rng.integers(0, 256, (12, 16, 24, 32, 3), dtype=np.uint8)
    other = rng.integers(0, 256, (12, 16, 24, 32, 3), dtype=np.uint8)
    darker = (real * 0.7).astype(np.uint8)
    assert fvd(det, real, real) == pytest.approx(0.0, abs=1e-6)
    assert fvd(det, real, darker) > 10 * fvd(det, real, other)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a model")
    det, why = load_i3d(bad)
    assert det is None and "not a TorchScript I3D" in why
    det, why = load_i3d(tmp_path / "missing.pt")
    assert det is None and why.startswith("unavailable: I3D weights not found")


def test_eval_report_on_the_toy_model(toy, toy_model, standin_i3d, tmp_path):
    out = tmp_path / "report"
    res = cli("eval", "--model", toy_model, "--data", toy / "store", "--out", out, "--samples", "12",
              "--episodes", "3", "--ar-steps", "32", "--long-steps", "300", "--action-contexts", "8",
              "--i3d", standin_i3d, check=True)
    assert "wrote" in res.stdout
    r = json.loads((out / "report.json").read_text())
    tf = r["teacher_forced"]["all"]
    # the toy model predicts the next frame far better than repeating the last one
    assert tf["model"]["mean"] > tf["copy_last"]["mean"] + 3, tf
    assert tf["ae"]["n"] == tf["model"]["n"] == 12
    ar = r["autoregressive"]
    assert len(ar["model"]["mean"]) == len(ar["frozen"]["mean"]) == 32
    assert ar["model"]["mean"][0] > 25  # step 1 is a teacher-forced prediction (the toy model scores ~33 dB)
    assert r["long_rollout"]["steps"] == 300 and len(r["long_rollout"]["stats"]) == 300
    assert set(r["long_rollout"]["status_bar_db"]["at"]) == {"100", "300"}  # 1000 is past this rollout
    af = r["action_following"]
    assert af["contexts"] == 8 and af["accuracy"] > af["chance"], af
    assert r["fvd"]["n_clips"] == 3 and "fvd16" in r["fvd"] and "fvd32" in r["fvd"]
    md = (out / "report.md").read_text()
    if r["lpips"].startswith("unavailable"):  # missing LPIPS weights leave the rest of the report intact
        assert "unavailable" in md and "copy-last PSNR" in md
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert (out / png).stat().st_size > 1000
    page = (out / "report.html").read_text()
    srcs = re.findall(r'src="([^"]*)"', page)
    assert len(srcs) >= 5 and all(s.startswith("data:image/png;base64,") for s in srcs)  # self-contained


def test_eval_bad_input(toy, toy_model, doom_store, tmp_path):
    from gamengen.data.latents import split
    from gamengen.data.store import Store

    res = cli("eval", "--model", toy_model, "--data", doom_store, "--out", tmp_path / "a")
    assert res.returncode == 2 and "does not hold this model's game" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = cli("eval", "--model", tmp_path, "--data", toy / "store", "--out", tmp_path / "b")
    assert res.returncode == 2 and "no world model" in res.stderr
    few = tmp_path / "few"  # three episodes, none in the held-out share
    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--seed", "2", "--episodes", "3",
        "--max-episode-steps", "40", "--out", few, check=True)
    assert not split(Store.open(few).episodes(), 0.1)[1]
    res = cli("eval", "--model", toy_model, "--data", few, "--out", tmp_path / "c")
    assert res.returncode == 2 and "no held-out episodes" in res.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


@needs_browser
def test_blind_ab_page_records_answers(toy, toy_model, browser, tmp_path):
    out = tmp_path / "ab"
    server = Server("eval", "ab", "--model", toy_model, "--data", toy / "store", "--out", out, "--pairs", "4",
                    "--no-open", ready="A/B test")
    try:
        key = json.loads((out / "ab.json").read_text())
        assert [p["seconds"] for p in key["pairs"]] == [1.6, 3.2, 1.6, 3.2]
        page = browser.new_page()
        page.goto(server.url)
        page.wait_for_function("window.gamengenAB.pairs.length === 4")
        picks = []
        for _ in range(4):  # answer every pair with the side that is really real, except the last one
            i = page.evaluate("window.gamengenAB.i")
            pair = page.evaluate(f"window.gamengenAB.pairs[{i}].pair")
            real = key["pairs"][pair]["real"]
            side = real if len(picks) < 3 else ("b" if real == "a" else "a")
            page.wait_for_function("document.getElementById('va').readyState >= 2")  # the clip plays
            page.click(f"#pick-{side}")
            picks.append(side)
            page.wait_for_function(f"window.gamengenAB.i === {len(picks)}")
        page.wait_for_function("window.gamengenAB.summary !== undefined")
        summary = page.evaluate("window.gamengenAB.summary")
        assert summary["answers"] == 4 and summary["picked_real"] == 0.75
        assert "75%" in page.inner_text("#summary")
        # the key never reaches the page, and clips need the token
        assert "real" not in page.evaluate("JSON.stringify(window.gamengenAB.pairs)")
        assert urllib.request.urlopen(f"{server.base}/pairs?token={server.token}").status == 200
        try:
            urllib.request.urlopen(f"{server.base}/pairs")
            raise AssertionError("no token was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 403
    finally:
        server.stop()
    res = cli("eval", "ab", "--out", out, "--summary", check=True)
    assert json.loads(res.stdout)["picked_real"] == 0.75
    lines = (out / "answers.jsonl").read_text().splitlines()
    assert len(lines) == 4 and sum(json.loads(x)["correct"] for x in lines) == 3


def test_ablations_train_and_report_their_variants(toy, toy_model, tmp_path):
    res = cli("ablate", "context", "--data", toy / "store", "--ae", toy / "ae", "--out", tmp_path / "ctx",
              "--values", "1,4", "--train-steps", "30", "--samples", "8", check=True)
    assert "wrote" in res.stdout
    r = json.loads((tmp_path / "ctx" / "ablation.json").read_text())
    assert [row["value"] for row in r["rows"]] == [1, 4] and all(row["psnr"]["n"] == 8 for row in r["rows"])
    for n in (1, 4):  # each variant is a real model with its own context
        meta, _ = WorldModel.read_meta(tmp_path / "ctx" / f"context-{n}" / "model")
        assert meta.context == n
    assert (tmp_path / "ctx" / "ablation.png").stat().st_size > 1000
    cli("ablate", "noise-aug", "--data", toy / "store", "--ae", toy / "ae", "--out", tmp_path / "noise",
        "--train-steps", "30", "--episodes", "2", "--ar-steps", "8", "--context", "4", check=True)
    off, _ = WorldModel.read_meta(tmp_path / "noise" / "noise-aug-off" / "model")
    on, _ = WorldModel.read_meta(tmp_path / "noise" / "noise-aug-on" / "model")
    assert off.denoiser.max_noise_level == 0.0 and on.denoiser.max_noise_level == 0.7
    r = json.loads((tmp_path / "noise" / "ablation.json").read_text())
    assert [len(row["curve"]) for row in r["rows"]] == [8, 8]
    cli("ablate", "steps", "--data", toy / "store", "--model", toy_model, "--out", tmp_path / "steps",
        "--values", "1,4", "--samples", "8", check=True)
    r = json.loads((tmp_path / "steps" / "ablation.json").read_text())
    assert [row["value"] for row in r["rows"]] == [1, 4]
    assert "| 32.58 |" in (tmp_path / "steps" / "ablation.md").read_text()  # the paper's App. A.4 value beside ours
    # data-policy: a scripted store stands in for the agent's; both models play the same examples
    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "2000", "--seed", "2", "--policy", "scripted",
        "--out", tmp_path / "scripted", check=True)
    cli("ablate", "data-policy", "--data", f"agent={tmp_path / 'scripted'}", "--data", f"random={toy / 'store'}",
        "--ae", toy / "ae", "--out", tmp_path / "dp", "--train-steps", "30", "--episodes", "4", "--context", "4",
        check=True)
    rows = json.loads((tmp_path / "dp" / "ablation.json").read_text())["rows"]
    assert {(r["value"], r["group"]) for r in rows} == {(p, g) for p in ("agent", "random")
                                                       for g in ("easy", "medium", "hard", "all")}
    for r in rows:
        if r["group"] == "all":
            assert r["psnr"]["n"] == r["psnr_first"]["n"] == len(r["scores"]) == 4 and r["horizon_steps"] == 90  # 3 s
    assert "agent − random" in (tmp_path / "dp" / "ablation.md").read_text()
    bad = cli("ablate", "sideways", "--data", toy / "store", "--out", tmp_path / "x")
    assert bad.returncode == 2 and "unknown ablation" in bad.stderr


def test_eval_ae_ceiling_beside_copy_last(toy, doom_store, tmp_path):
    out = tmp_path / "ae"
    res = cli("eval", "ae", "--ae", toy / "ae", "--data", toy / "store", "--out", out, "--samples", "40",
              "--heldout", "0.3", check=True)
    assert "autoencoder ceiling" in res.stdout
    r = json.loads((out / "ae.json").read_text())
    assert r["all"]["ae"]["n"] == 40 and r["moving"]["ae"]["n"] == r["moving"]["copy_last"]["n"] > 0
    # the tiny AE reconstructs the toy game far better than the last frame predicts it
    assert r["moving"]["ae"]["mean"] > r["moving"]["copy_last"]["mean"] + 3, r["moving"]
    assert (out / "ae_strip.png").stat().st_size > 500
    bad = cli("eval", "ae", "--ae", toy / "ae", "--data", doom_store, "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "160x120 frames" in bad.stderr and "32x32" in bad.stderr, bad.stderr
    assert not (tmp_path / "bad").exists()


def test_status_bar_match_tells_real_frames_from_blobs(doom_store):
    from gamengen.data.store import Store
    from gamengen.eval.rollout import StatusBarMatch

    store = Store.open(doom_store)
    eps = [np.asarray(store.open_episode(r)["frames"][::4]) for r in store.episodes()]
    match = StatusBarMatch(np.concatenate(eps[:-1]))
    real = eps[-1]  # an episode the bank does not hold
    # the dissolved look: detail gone below 16-pixel blobs, colours kept
    t = torch.from_numpy(real).permute(0, 3, 1, 2).float()
    blobs = torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(t, 16), size=real.shape[1:3],
                                            mode="bilinear").round().byte().permute(0, 2, 3, 1).numpy()
    assert match(real).mean() > match(blobs).mean() + 6, (match(real).mean(), match(blobs).mean())
