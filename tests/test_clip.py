"""`gamengen clip train / generate / continue` (GameGen-X §3.3, §3.5), end to end on real data: a
toy-game recording curated into 17-frame clips, a tiny 2D AE and video VAE trained on it, tiny presets."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import CLIP_STEPS as STEPS  # the clip_run fixture's training steps
from conftest import cli, snapshot

PROMPT = "A 0.6-second clip of the toy game cursor: the player mostly presses UP."


@pytest.fixture(scope="module")
def trained(clip_run) -> Path:
    return clip_run


@pytest.fixture(scope="module")
def model(trained):
    from gamengen.models.clip_model import ClipModel

    return ClipModel.from_pretrained(trained / "run" / "model")


def fixed_loss(net, model, root: Path, batches: int = 6) -> float:
    """The masked flow loss of ``net`` on the same draws every time (steps no training run reaches)."""
    from gamengen.curate.dataset import ClipDataset
    from gamengen.train.clip import ClipTrainConfig, batch_loss, draw_sample
    from gamengen.train.clip_data import cache_latents, cache_text, make_batch

    ds = ClipDataset.open(root / "clips")
    latents = cache_latents(ds, model.codec, root / "run" / "cache", stage=pytest.fail)  # cached: no re-encoding
    text = cache_text([ds.meta(i)["captions"]["caption"] for i in range(len(ds))], model.text, root / "run" / "cache",
                      stage=pytest.fail)
    cfg = ClipTrainConfig.from_preset("tiny")
    with torch.no_grad():
        return float(np.mean([batch_loss(net, make_batch([draw_sample(cfg, 10**6 + s, i, len(ds), latents.shape[1:])
                                                          for i in range(8)], latents, text, torch.device("cpu")),
                                         model.conditions(8)) for s in range(batches)]))


def test_clip_train_writes_a_model_that_learned(trained, model):
    from gamengen.models.msdit import MSDiT

    m = model.meta
    assert (m.frames, m.height, m.width, m.fps, m.train_steps) == (17, 32, 32, 30.0, STEPS)
    assert m.env_ids == ["toy:cursor"] and m.presets == {"msdit": "tiny", "text": "tiny", "video_vae": "tiny",
                                                         "ae": "tiny"}
    assert model.latent_shape == (5, 4, 16, 16) and model.net.config.text_dim == model.text.width == 16
    assert (model.sampler.steps, model.sampler.shift) == (20, 1.0)
    assert len(json.loads((trained / "run" / "losses.json").read_text())) == STEPS
    assert (trained / "run" / "text" / "gamengen_text.json").is_file()  # stage A pretrained and kept it
    assert not [p for p in trained.rglob("*") if p.suffix in (".pkl", ".pt", ".pth", ".bin", ".ckpt", ".pickle")]
    fresh = MSDiT(**model.net.config).eval()  # a fresh MSDiT predicts v = 0
    before, after = fixed_loss(fresh, model, trained), fixed_loss(model.net, model, trained)
    assert after < 0.75 * before, (before, after)


def test_a_run_in_pieces_equals_one_run(trained, tmp_path):
    """Exact resume: 8 steps then 16 == 16 at once == stopped by --max-minutes then resumed (and --text
    skips stage A)."""
    from gamengen.errors import UserError
    from gamengen.train.clip import ClipTrainConfig, train_clip

    def run(out, steps, **kw):
        cfg = ClipTrainConfig.from_preset("tiny", steps=steps, checkpoint_every=4, **kw)
        return train_clip(trained / "clips", out, cfg, codec=trained / "vae" / "model", text=trained / "run" / "text")

    whole = run(tmp_path / "whole", 16)
    run(tmp_path / "parts", 8)
    parts = run(tmp_path / "parts", 16)
    late = run(tmp_path / "late", 16, max_minutes=0.0)  # stops after its first step, exporting the model
    assert late.meta.train_steps == 1 and (tmp_path / "late" / "model" / "gamengen_clip.json").is_file()
    late = run(tmp_path / "late", 16)  # the same command resumes (--max-minutes may change)
    for other in (parts, late):
        a, b = whole.net.state_dict(), other.net.state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads((tmp_path / r / "losses.json").read_text()) for r in ("whole", "parts", "late")]
    assert losses[0] == losses[1] == losses[2] and len(losses[0]) == 16
    assert not (tmp_path / "whole" / "text").exists()
    before = snapshot(tmp_path / "whole")
    with pytest.raises(UserError, match=r"other settings \(seed\)"):
        run(tmp_path / "whole", 16, seed=1)
    assert snapshot(tmp_path / "whole") == before


def test_the_export_is_the_moving_average_and_the_checkpoint_the_last_weights(trained, tmp_path):
    """With an EMA the model folder holds the average and the checkpoint the last weights; with
    --ema-decay 0 they are the same; a run started before the EMA existed resumes without one."""
    from gamengen.train import checkpoint
    from gamengen.train.clip import ClipTrainConfig, train_clip

    def run(out, **kw):
        cfg = ClipTrainConfig.from_preset("tiny", steps=6, checkpoint_every=3, **kw)
        model = train_clip(trained / "clips", out, cfg, codec=trained / "vae" / "model", text=trained / "run" / "text")
        return model.net.state_dict(), checkpoint.load_latest(out / "checkpoints", pytest.fail)["model"]

    export, last = run(tmp_path / "ema")
    assert not all(torch.equal(export[k], last[k]) for k in export)
    assert "moving average" in (tmp_path / "ema" / "model" / "README.md").read_text()
    export, last = run(tmp_path / "plain", ema_decay=0.0)
    assert all(torch.equal(export[k], last[k]) for k in export)
    settings = json.loads((tmp_path / "plain" / "config.json").read_text())
    del settings["ema_decay"]  # as written before the EMA
    (tmp_path / "plain" / "config.json").write_text(json.dumps(settings))
    run(tmp_path / "plain", ema_decay=0.0)


def test_several_clip_datasets_train_as_one(trained, tmp_path):
    """`clip train --data A --data B`: one model on both (one dataset per game); datasets of another
    clip size are refused in one line before any write."""
    from gamengen.curate.dataset import ClipDataset

    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "600", "--seed", "2",
        "--out", tmp_path / "store2", check=True)
    cli("curate", "--from", tmp_path / "store2", "--out", tmp_path / "clips2", "--min-seconds", "2", "--min-motion",
        "0", "--max-windows", "2", check=True)
    common = ["--codec", trained / "vae" / "model", "--text", trained / "run" / "text", "--preset", "tiny",
              "--steps", "3"]
    cli("clip", "train", "--data", trained / "clips", "--data", tmp_path / "clips2", "--out", tmp_path / "run",
        *common, "--pooled-text", "--bf16", check=True)  # and the two levers of docs/gamegen_x.md reach the run
    assert json.loads((tmp_path / "run" / "model" / "msdit" / "config.json").read_text())["pooled_text"] is True
    assert json.loads((tmp_path / "run" / "config.json").read_text())["bf16"] is True
    meta = json.loads((tmp_path / "run" / "model" / "gamengen_clip.json").read_text())["meta"]
    sizes = [len(ClipDataset.open(p)) for p in (trained / "clips", tmp_path / "clips2")]
    assert meta["dataset"]["clips"] == sum(sizes) and len(meta["dataset"]["paths"]) == 2, meta["dataset"]
    assert meta["env_ids"] == ["toy:cursor"]
    cli("curate", "--from", tmp_path / "store2", "--out", tmp_path / "short", "--min-seconds", "2", "--min-motion",
        "0", "--max-windows", "2", "--clip-frames", "13", check=True)
    res = cli("clip", "train", "--data", trained / "clips", "--data", tmp_path / "short", "--out", tmp_path / "bad",
              *common)
    assert res.returncode == 2 and "differ" in res.stderr and "--clip-frames" in res.stderr, res.stderr
    assert not (tmp_path / "bad").exists()


def test_clip_train_text_pretrains_an_encoder_clip_train_takes(trained, tmp_path):
    from gamengen.models.text_encoder import CaptionEncoder

    cli("clip", "train-text", "--data", trained / "clips", "--out", tmp_path / "text", "--preset", "tiny",
        "--steps", "5", check=True)
    enc = CaptionEncoder.load(tmp_path / "text")
    assert enc.preset == "tiny" and enc.width == 16
    hidden, mask = enc.encode([PROMPT])
    assert hidden.shape[-1] == 16 and mask.sum() > 5
    before = snapshot(tmp_path / "text")
    res = cli("clip", "train-text", "--data", trained / "clips", "--out", tmp_path / "text", "--preset", "tiny")
    assert res.returncode == 2 and "exists" in res.stderr and snapshot(tmp_path / "text") == before


def test_the_draws_follow_the_config():
    """§3.5: 25% continuation with x uniform in 1..L-1, 25% text dropout independent of the task;
    t logit-normal; each draw keyed by (seed, step, sample)."""
    from gamengen.train.clip import ClipTrainConfig, draw_sample

    cfg = ClipTrainConfig.from_preset("tiny")
    draws = [draw_sample(cfg, s, i, 24, (5, 1, 1, 1)) for s in range(1000) for i in range(4)]
    n = len(draws)
    cont = [d for d in draws if d.context > 0]
    assert abs(len(cont) / n - 0.25) < 0.025
    assert abs(sum(d.drop_text for d in draws) / n - 0.25) < 0.025
    assert abs(sum(d.drop_text for d in cont) / len(cont) - 0.25) < 0.05  # independent of the task
    counts = np.bincount([d.context for d in cont], minlength=5)
    assert counts[0] == 0 and all(abs(c / len(cont) - 0.25) < 0.05 for c in counts[1:]), counts
    logit = np.log([d.t / (1 - d.t) for d in draws])
    assert abs(logit.mean()) < 0.06 and abs(logit.std() - 1) < 0.06
    assert abs(np.bincount([d.clip for d in draws], minlength=24) / n - 1 / 24).max() < 0.015
    again = draw_sample(cfg, 7, 3, 24, (5, 1, 1, 1))
    assert (again.clip, again.context, again.drop_text, again.t) == (draws[31].clip, draws[31].context,
                                                                     draws[31].drop_text, draws[31].t)
    assert torch.equal(again.noise, draws[31].noise)
    assert all(d.context_t == 0 for d in draws)  # no context noise unless asked for
    noisy = ClipTrainConfig.from_preset("tiny", context_noise=0.4)
    same = [draw_sample(noisy, s, i, 24, (5, 1, 1, 1)) for s in range(1000) for i in range(4)]
    assert [(d.clip, d.context, d.drop_text, d.t) for d in same] == [(d.clip, d.context, d.drop_text, d.t)
                                                                     for d in draws]  # the other draws unchanged
    levels = np.array([d.context_t for d in same if d.context > 0])
    assert all(d.context_t == 0 for d in same if d.context == 0)  # text-to-video has no context to noise
    assert levels.min() >= 0 and levels.max() < 0.4 and abs(levels.mean() - 0.2) < 0.015  # U(0, 0.4)
    never = ClipTrainConfig.from_preset("tiny", continuation=0.0, text_dropout=0.0)
    assert not any(draw_sample(never, s, 0, 24, (5, 1, 1, 1)).context or
                   draw_sample(never, s, 0, 24, (5, 1, 1, 1)).drop_text for s in range(200))


def test_image_steps_train_on_each_clips_first_latent_frame(trained, model):
    """§3.5's length buckets: a step is an image step with probability image_share, drawn apart from the
    samples (so a run without them draws as before), and takes batch x L first latent frames."""
    from gamengen.curate.dataset import ClipDataset
    from gamengen.train.clip import ClipTrainConfig, draw_sample, step_length
    from gamengen.train.clip_data import cache_latents, cache_text, make_batch

    cfg = ClipTrainConfig.from_preset("tiny", image_share=0.3)
    lengths = [step_length(cfg, s, 5) for s in range(2000)]
    assert set(lengths) == {1, 5} and abs(lengths.count(1) / 2000 - 0.3) < 0.03
    assert {step_length(ClipTrainConfig.from_preset("tiny"), s, 5) for s in range(200)} == {5}
    plain = ClipTrainConfig.from_preset("tiny")
    a, b = draw_sample(plain, 3, 1, 24, (5, 4, 16, 16)), draw_sample(cfg, 3, 1, 24, (5, 4, 16, 16))
    assert (a.clip, a.context, a.t) == (b.clip, b.context, b.t) and torch.equal(a.noise, b.noise)

    ds = ClipDataset.open(trained / "clips")
    latents = cache_latents(ds, model.codec, trained / "run" / "cache", stage=pytest.fail)
    text = cache_text([ds.meta(i)["captions"]["caption"] for i in range(len(ds))], model.text,
                      trained / "run" / "cache", stage=pytest.fail)
    draws = [draw_sample(cfg, 7, i, len(ds), (1, *latents.shape[2:])) for i in range(10)]
    batch = make_batch(draws, latents, text, torch.device("cpu"))
    assert batch.z.shape == (10, 1, *latents.shape[2:]) and not batch.context.any()  # an image is never continued
    assert torch.equal(batch.z[:, 0], torch.from_numpy(latents[[d.clip for d in draws], 0].astype(np.float32)))
    with pytest.raises(Exception, match="shares"):
        ClipTrainConfig.from_preset("tiny", image_share=1.5)


def test_init_starts_a_run_from_a_clip_model(trained, model, tmp_path):
    """`clip train --init MODEL`: the MSDiT's weights (fresh Adam), its codec and text encoder by
    default; its steps count in the export; a model of another shape is refused before any write."""
    from gamengen.models.clip_model import ClipModel

    base = ["clip", "train", "--data", trained / "clips", "--preset", "tiny", "--init", trained / "run" / "model"]
    cli(*base, "--out", tmp_path / "zero", "--steps", "0", check=True)
    zero = ClipModel.from_pretrained(tmp_path / "zero" / "model")
    a, b = model.net.state_dict(), zero.net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a) and zero.meta.train_steps == STEPS
    cli(*base, "--out", tmp_path / "more", "--steps", "3", "--image-share", "0.5", check=True)
    more = ClipModel.from_pretrained(tmp_path / "more" / "model")
    assert more.meta.train_steps == STEPS + 3 and more.meta.training["image_share"] == 0.5
    assert "then trained 3 steps" in (tmp_path / "more" / "model" / "README.md").read_text()
    assert fixed_loss(more.net, model, trained) < 0.9 * fixed_loss(type(model.net)(**model.net.config), model, trained)
    res = cli(*base, "--out", tmp_path / "bad", "--steps", "1", "--pooled-text")
    assert res.returncode == 2 and "pooled" in res.stderr and res.stderr.count("\n") == 1, res.stderr
    res = cli(*base[:-1], trained / "vae" / "model", "--out", tmp_path / "bad", "--steps", "1")
    assert res.returncode == 2 and "video VAE" in res.stderr, res.stderr
    assert not (tmp_path / "bad").exists()


def read_video(path: Path) -> np.ndarray:
    import imageio.v2 as imageio

    return np.stack(imageio.mimread(path))


def test_generate_writes_the_clip_and_is_seeded(trained, model, tmp_path):
    from gamengen.engine.clip import generate

    res = cli("clip", "generate", "--model", trained / "run" / "model", "--prompt", PROMPT, "--out",
              tmp_path / "new" / "a.mp4", "--seed", "3", "--steps", "4", "--png", check=True)
    assert "17 frames at 30 fps, 32x32" in res.stdout
    video = read_video(tmp_path / "new" / "a.mp4")
    assert video.shape == (17, 32, 32, 3)
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["a.mp4", "a.png"]  # no temporary left
    a = generate(model, PROMPT, seed=3, steps=4)
    assert a.shape == (17, 32, 32, 3) and a.dtype == np.uint8
    assert np.abs(video.astype(int) - a).mean() < 12  # the same clip, through H.264
    assert np.array_equal(a, generate(model, PROMPT, seed=3, steps=4))
    assert not np.array_equal(a, generate(model, PROMPT, seed=4, steps=4))
    other = generate(model, "Keys: DOWN 80%, LEFT 20%. The toy game cursor at night.", seed=3, steps=4)
    assert np.abs(other.astype(int) - a).mean() > 0.5  # the text is read


def test_continue_keeps_the_context(trained, model, tmp_path):
    from gamengen.data.store import Store
    from gamengen.engine.clip import context_frames_used, continue_clip

    store = Store.open(trained / "store")
    rec = store.episodes()[1]
    frames = np.asarray(store.open_episode(rec)["frames"][:40])
    res = cli("clip", "continue", "--model", trained / "run" / "model", "--from", f"{trained / 'store'}:{rec.id}:40",
              "--prompt", PROMPT, "--out", tmp_path / "c.mp4", "--steps", "4", check=True)
    assert "frames 1-13" in res.stdout
    assert read_video(tmp_path / "c.mp4").shape == (17, 32, 32, 3)
    for given, used in ((27, 13), (7, 5), (1, 1)):  # the last 1 + 4k frames, leaving a latent frame to make
        assert context_frames_used(model, given) == used
        ctx = frames[40 - given:40]
        out = continue_clip(model, ctx, PROMPT, seed=0, steps=4)
        assert out.shape == (17, 32, 32, 3)
        with torch.no_grad():
            recon = model.codec.decode_clip(model.codec.encode_clip(ctx[-used:]))
        # The latents are held exactly; the causal decoder gives the same frames up to float rounding.
        assert np.abs(out[:used].astype(int) - recon).max() <= 1, used
        assert not np.array_equal(out[used:], np.repeat(out[used - 1:used], 17 - used, 0))


def test_a_continuation_samples_with_its_own_cfg_weight_and_shift(trained, model, tmp_path):
    """ClipSampler.continuation_guidance / _shift: a continuation takes them, text-to-clip keeps its own;
    they travel in gamengen_clip.json, and a file written without them loads as before (None)."""
    from dataclasses import replace

    from gamengen.engine.clip import continue_clip, generate
    from gamengen.models.clip_model import ClipModel, ClipSampler

    frames = continue_clip(model, np.zeros((5, 32, 32, 3), np.uint8), PROMPT, seed=0, steps=3)  # any context
    plain = model.sampler
    assert (plain.continuation_guidance, plain.continuation_shift) == (None, None)
    assert plain.for_task(True) == plain.for_task(False) == (plain.guidance, plain.shift)
    own = replace(plain, continuation_guidance=1.0, continuation_shift=3.0)
    assert own.for_task(True) == (1.0, 3.0) and own.for_task(False) == (plain.guidance, plain.shift)
    tuned = ClipModel(model.net, model.codec, model.text, model.meta, own)
    ctx = frames[:5]
    assert np.array_equal(continue_clip(tuned, ctx, PROMPT, seed=1, steps=3),
                          continue_clip(model, ctx, PROMPT, seed=1, steps=3, guidance=1.0, shift=3.0))
    assert not np.array_equal(continue_clip(tuned, ctx, PROMPT, seed=1, steps=3),
                              continue_clip(model, ctx, PROMPT, seed=1, steps=3))
    assert np.array_equal(generate(tuned, PROMPT, seed=1, steps=3), generate(model, PROMPT, seed=1, steps=3))
    tuned.save_pretrained(tmp_path / "m")
    assert ClipModel.from_pretrained(tmp_path / "m").sampler == own
    with pytest.raises(ValueError, match="continuation guidance"):
        replace(plain, continuation_guidance=-1.0).check()
    meta = json.loads((tmp_path / "m" / "gamengen_clip.json").read_text())
    assert meta["sampler"]["continuation_shift"] == 3.0
    assert ClipSampler(**{k: v for k, v in meta["sampler"].items() if not k.startswith("continuation")}) == plain


def refused(args: list, capsys, monkeypatch, *words: str) -> str:
    """Run the real entry point in this process: exit 2 and one line."""
    from gamengen.cli import main

    monkeypatch.setattr(sys, "argv", ["gamengen", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert e.value.code == 2 and len(lines) == 1, (e.value.code, err)
    assert lines[0].startswith("error: ") and "fix:" in lines[0] and "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def bad_models(trained: Path, root: Path) -> dict[str, tuple[Path, str]]:
    """Folders that are not clip models, each with a word its error must say."""
    from gamengen.train.text_encoder import pretrain

    good = trained / "run" / "model"
    out = {"codec folder": (trained / "vae" / "model", "video VAE"), "run folder": (trained / "run", "model"),
           "missing": (root / "nothing", "no clip model")}
    for name in ("bad json", "corrupt weights", "wide text"):
        shutil.copytree(good, root / name)
    (root / "bad json" / "gamengen_clip.json").write_text("{not json")
    weights = root / "corrupt weights" / "msdit" / "diffusion_pytorch_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    shutil.rmtree(root / "wide text" / "text")
    pretrain([PROMPT], "cpu", steps=1, batch_size=1).save(root / "wide text" / "text")  # 256 wide, the MSDiT reads 16
    out.update({"bad json": (root / "bad json", "JSON"), "corrupt weights": (root / "corrupt weights", "damaged"),
                "wide text": (root / "wide text", "256 wide")})
    return out


def test_bad_input_is_one_line_exit_2_and_nothing_written(trained, tmp_path, capsys, monkeypatch):
    model, store = trained / "run" / "model", trained / "store"
    rec = json.loads((store / "s1-w0" / "manifest.jsonl").read_text().splitlines()[0])
    (tmp_path / "afile").write_text("x")
    before = snapshot(trained), snapshot(tmp_path)
    gen = ["clip", "generate", "--model", model, "--out"]
    cases = [
        (gen + [tmp_path / "o" / "a.mp4", "--prompt", " "], "empty"),
        (gen + [tmp_path / "o" / "a.mp4", "--prompt", "word " * 400], "tokens"),
        (gen + [tmp_path / "afile" / "a.mp4", "--prompt", PROMPT], "not a folder"),
        (gen + [tmp_path / "a.txt", "--prompt", PROMPT], ".mp4"),
        (gen + [tmp_path / "a.mp4", "--prompt", PROMPT, "--steps", "0"], "steps"),
    ]
    cont = ["clip", "continue", "--model", model, "--prompt", PROMPT, "--out", tmp_path / "o" / "c.mp4", "--from"]
    cases += [
        (cont + [f"{tmp_path / 'nostore'}:e000000"], "not a trajectory store"),
        (cont + [f"{store}:e999999"], "no episode"),
        (cont + [f"{store}:{rec['id']}:0"], "out of range"),
        (cont + [f"{store}:{rec['id']}:{rec['length'] + 1}"], "out of range"),
        (cont + ["just-a-name"], "STORE:EPISODE"),
    ]
    train = ["clip", "train", "--out", tmp_path / "run", "--preset", "tiny", "--steps", "1"]
    cases += [
        (train + ["--data", store, "--codec", trained / "vae" / "model"], "not a clip dataset"),
        (train + ["--data", trained / "clips"], "--codec"),
        (train + ["--data", trained / "clips", "--codec", trained / "ae"], "not a video VAE"),
        (train + ["--data", trained / "clips", "--codec", trained / "vae" / "model", "--text", trained / "ae"],
         "not a text encoder"),
        (train + ["--data", trained / "clips", "--codec", trained / "vae" / "model", "--preset", "huge"], "preset"),
    ]
    for args, word in cases:
        refused(args, capsys, monkeypatch, word)
    assert (snapshot(trained), snapshot(tmp_path)) == before
    for name, (folder, word) in bad_models(trained, tmp_path / "models").items():
        refused(["clip", "generate", "--model", folder, "--prompt", PROMPT, "--out", tmp_path / "o" / "a.mp4"],
                capsys, monkeypatch, word)
    assert not (tmp_path / "o").exists() and not (tmp_path / "run").exists()


def test_the_real_command_exits_2_on_a_world_model_folder(trained, tmp_path):
    (tmp_path / "wm").mkdir()
    (tmp_path / "wm" / "gamengen_wm.json").write_text("{}")
    res = cli("clip", "generate", "--model", tmp_path / "wm", "--prompt", PROMPT, "--out", tmp_path / "x.mp4")
    assert res.returncode == 2 and res.stderr.strip().count("\n") == 0, res.stderr
    assert "world model" in res.stderr and not (tmp_path / "x.mp4").exists()


def test_bench_clip_times_text_to_clip_and_continuation(trained):
    res = cli("bench", "clip", "--model", trained / "run" / "model", "--prompt", PROMPT, "--repeats", "1",
              "--steps", "3", "--json", check=True)
    r = json.loads(res.stdout)
    assert (r["frames"], r["resolution"], r["euler_steps"], r["msdit_calls"]) == (17, "32x32", 3, 6)
    assert r["text_to_clip_s"] > 0 and r["continuation_s"] > 0 and r["stages_s"]["decode"] > 0
    assert r["real_time"] == pytest.approx(r["clip_seconds"] / r["text_to_clip_s"])
    res = cli("bench", "clip", "--model", trained / "run" / "model", "--prompt", " ")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr


def test_short_captions_are_the_summary_field(trained):
    """The paper's caption ablation (§4.3): `--captions short` trains on the Summary field alone."""
    from gamengen.curate.dataset import ClipDataset
    from gamengen.errors import UserError
    from gamengen.train.clip import ClipTrainConfig, open_datasets

    ds = ClipDataset.open(trained / "clips")
    _, full = open_datasets([trained / "clips"])
    _, short = open_datasets([trained / "clips"], "short")
    fields = ds.meta(0)["captions"]["fields"]
    assert short[0] == fields["Summary"] and fields["Summary"] in full[0] and len(full[0]) > 2 * len(short[0])
    with pytest.raises(UserError, match="caption kind"):
        ClipTrainConfig.from_preset("tiny", captions="long")


def test_clip_export_halves_the_msdit_and_loads_as_float32(trained, model, tmp_path):
    from gamengen.engine.clip import generate
    from gamengen.models.clip_model import ClipModel

    res = cli("clip", "export", "--model", trained / "run" / "model", "--out", tmp_path / "bundle",
              "--note", "Trained in a test.", check=True)
    assert "MB" in res.stdout
    size = lambda p: (p / "msdit" / "diffusion_pytorch_model.safetensors").stat().st_size  # noqa: E731
    assert size(tmp_path / "bundle") < 0.6 * size(trained / "run" / "model")
    again = ClipModel.from_pretrained(tmp_path / "bundle")
    assert next(again.net.parameters()).dtype == torch.float32
    assert "Trained in a test." in (tmp_path / "bundle" / "README.md").read_text()
    a, b = generate(model, PROMPT, 0, 4), generate(again, PROMPT, 0, 4)
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 2.0  # float16 weights: a rounding apart
    res = cli("clip", "export", "--model", trained / "run" / "model", "--out", tmp_path / "bundle")
    assert res.returncode == 2 and "exists" in res.stderr


def test_the_bundled_clip_model_generates_from_the_readme_prompt(tmp_path):
    """The README's `clip generate` example, as written there, on the bundled models/clip-doom."""
    import re

    root = Path(__file__).resolve().parents[1]
    found = re.search(r'clip generate --model (\S+) .*?--prompt "(.*?)"\n```', (root / "README.md").read_text(), re.S)
    assert found, "the README's clip generate example is missing"
    model, prompt = root / found.group(1), found.group(2).replace("\\\n", "")  # bash drops backslash-newline in quotes
    cli("clip", "generate", "--model", model, "--prompt", prompt, "--out", tmp_path / "clip.mp4", "--png", check=True)
    assert (tmp_path / "clip.mp4").stat().st_size > 1000 and (tmp_path / "clip.png").stat().st_size > 1000
