"""Stage 2 on the toy game: AE + world model through the real CLI; actions matter; resume; 2 processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

from conftest import TINY, TOY_AE, cli, snapshot
from gamengen.data.latents import LatentCache, LatentWindows, split
from gamengen.data.store import Store
from gamengen.train.run import KILL_AT_SAVE

def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / max(mse, 1e-10)))


def test_toy_model_follows_the_action(toy, toy_model):
    """Done-when: a tiny model trained briefly predicts the frame the *true* action produces, clearly
    better than under a wrong action. This checks conditioning and time indexing end to end."""
    from gamengen.diffusion.denoiser import Denoiser
    from gamengen.models.world_model import WorldModel

    model = WorldModel.from_pretrained(toy_model)
    codec, sampler = model.codec, model.sampler
    den = Denoiser(model.net, model.meta.denoiser)
    store = Store.open(toy / "store")
    _, held = split(store.episodes(), 0.1)
    windows = LatentWindows(store, LatentCache(codec, toy / "ae" / "latents"), held, model.meta.context)
    LatentCache(codec, toy / "ae" / "latents").build(store, held)
    rng = np.random.default_rng(0)
    true_psnr, wrong_psnr = [], []
    for i in rng.choice(len(windows), 24, replace=False):
        ctx, acts, _ = windows[int(i)]
        e = int(np.searchsorted(windows.starts, i, side="right") - 1)
        n = 1 + int(i) - int(windows.starts[e])
        truth = store.open_episode(held[e])["frames"][n]
        wrong = acts.copy()
        wrong[-1] = (acts[-1] + 1 + rng.integers(4)) % 5  # any other move
        preds = []
        for a in (acts, wrong):
            c, a_t = torch.from_numpy(ctx[None]), torch.from_numpy(a[None])
            noise = torch.randn((1, *ctx.shape[1:]), generator=torch.Generator().manual_seed(int(i)))
            z = den.sample(c, a_t, noise, sampler)
            preds.append(codec.decode(z)[0])
        true_psnr.append(psnr(preds[0], truth))
        wrong_psnr.append(psnr(preds[1], truth))
    margin = np.mean(true_psnr) - np.mean(wrong_psnr)
    print(f"PSNR true action {np.mean(true_psnr):.2f} dB, wrong action {np.mean(wrong_psnr):.2f} dB")
    # measured: 29.5 dB vs 25.1 dB (docs/world_model.md); a model ignoring actions scores ~0 margin
    assert margin > 2.0, (np.mean(true_psnr), np.mean(wrong_psnr))
    # measured 0.75 with one compute thread; a model that ignored the action would win none (the same
    # noise draws both predictions)
    assert np.mean(np.array(true_psnr) > np.array(wrong_psnr)) >= 0.6
    assert list((toy / "run" / "checkpoints").glob("step-*"))
    assert sorted(p.name for p in (toy / "run" / "samples").iterdir()) == ["step-00000300.png", "step-00000600.png"]
    assert len(json.loads((toy / "run" / "losses.json").read_text())) == 600


def run_train(toy, out, steps, extra=(), kill_at_save=None, env=None):
    """`gamengen train` in a subprocess; optionally SIGKILLed in the middle of saving a checkpoint."""
    code = ("import sys; from gamengen.train.world_model import TrainConfig, train; "
            f"train(sys.argv[1], sys.argv[2], sys.argv[3], TrainConfig.from_preset('tiny', steps={steps}, "
            f"checkpoint_every=10, sample_every=0), warn=print)")
    if kill_at_save is not None:
        env = {**(env or os.environ), KILL_AT_SAVE: str(kill_at_save)}
    return subprocess.run([sys.executable, "-c", code, str(toy / "store"), str(toy / "ae"), str(out)],
                          capture_output=True, text=True, env=env, timeout=900)


def test_kill_mid_save_and_resume_matches_uninterrupted(toy, tmp_path):
    ref = run_train(toy, tmp_path / "ref", 40)
    assert ref.returncode == 0, ref.stderr
    killed = run_train(toy, tmp_path / "run", 40, kill_at_save=20)
    assert killed.returncode == -9
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert ckpts == [".tmp-step-00000020", "step-00000010"]  # the half-saved one is not a checkpoint
    resumed = run_train(toy, tmp_path / "run", 40)
    assert resumed.returncode == 0, resumed.stderr
    a = json.loads((tmp_path / "ref" / "losses.json").read_text())
    b = json.loads((tmp_path / "run" / "losses.json").read_text())
    assert len(a) == len(b) == 40
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_damaged_checkpoint_falls_back_to_the_previous(toy, tmp_path):
    out = tmp_path / "run"
    assert run_train(toy, out, 20).returncode == 0
    tensors = out / "checkpoints" / "step-00000020" / "tensors.safetensors"
    data = bytearray(tensors.read_bytes())
    data[len(data) // 2] ^= 0xFF
    tensors.write_bytes(bytes(data))
    res = run_train(toy, out, 30)
    assert res.returncode == 0, res.stderr
    assert "step-00000020 is damaged" in res.stdout and "falling back" in res.stdout
    assert len(json.loads((out / "losses.json").read_text())) == 30


def test_two_processes_match_one_at_the_same_global_batch(toy, tmp_path):
    """`accelerate launch --num_processes 2` on CPU (gloo) trains like one process: each process takes
    half of the same global batch, and DDP averages the gradients."""
    accelerate = shutil.which("accelerate", path=os.path.dirname(sys.executable))
    steps = ["--steps", "12", "--batch-size", "16"]
    one = cli("train", "--data", toy / "store", "--ae", toy / "ae", "--out", tmp_path / "one", *TINY, *steps)
    assert one.returncode == 0, one.stderr
    two = subprocess.run([accelerate, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "gamengen", "train",
                          "--data", str(toy / "store"), "--ae", str(toy / "ae"), "--out", str(tmp_path / "two"),
                          *TINY, *steps], capture_output=True, text=True, timeout=900)
    assert two.returncode == 0, two.stderr[-3000:]
    a = json.loads((tmp_path / "one" / "losses.json").read_text())
    b = json.loads((tmp_path / "two" / "losses.json").read_text())
    # Stated tolerance: the two runs sum the same gradients in a different order, so they agree to
    # float32 rounding, which Adafactor carries forward; 1e-3 relative over 12 steps.
    np.testing.assert_allclose(b, a, rtol=1e-3)


def test_training_never_reads_heldout_episodes(toy, tmp_path):
    store = Store.open(toy / "store")
    train, held = split(store.episodes(), 0.1)
    assert held and train and not {r.path for r in held} & {r.path for r in train}
    ae = tmp_path / "ae"  # a copy without a latent cache: training must encode what it reads
    shutil.copytree(toy / "ae", ae, ignore=shutil.ignore_patterns("latents"))
    cli("train", "--data", toy / "store", "--ae", ae, "--out", tmp_path / "run", *TINY, "--steps", "2", check=True)
    cached = {p.stem for p in (ae / "latents").glob("*/*.npy")}
    assert cached == {r.sha256 for r in train}
    assert json.loads((tmp_path / "run" / "config.json").read_text())["heldout"] == 0.1


def test_bad_inputs_are_one_line_exit_2(toy, tmp_path):
    store16 = tmp_path / "store16"
    cli("record", "--env", "toy:cursor", "--resolution", "16x16", "--steps", "50", "--out", store16, check=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(toy / "store" / "store.json", empty / "store.json")
    cases = {
        "resolution": ["--data", store16, "--ae", toy / "ae"],
        "missing AE": ["--data", toy / "store", "--ae", tmp_path / "nope"],
        "preset": ["--data", toy / "store", "--ae", toy / "ae", "--preset", "huge"],
        "empty": ["--data", empty, "--ae", toy / "ae"],
    }
    for name, args in cases.items():
        out = tmp_path / f"run-{name.replace(' ', '')}"
        before = snapshot(tmp_path / "store16")
        res = cli("train", *args, "--out", out, "--steps", "2")
        assert res.returncode == 2, (name, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "fix:" in lines[0], (name, res.stderr)
        assert snapshot(tmp_path / "store16") == before
        assert not out.exists(), name



def test_train_init_starts_from_a_models_weights_and_refuses_another_size(toy, toy_model, tmp_path):
    """`train --init MODEL`: a new run starts from MODEL's weights (its first loss is the trained
    model's, not a random network's, on the same seeded draws) and counts MODEL's steps; a model of
    another size, or a missing one, is refused in one line before anything is written."""
    from gamengen.models.world_model import WorldModel

    out = tmp_path / "warm"
    cli("train", "--data", toy / "store", "--ae", toy / "ae", "--out", out, *TINY, "--steps", "5",
        "--init", toy_model, check=True)
    warm = json.loads((out / "losses.json").read_text())
    fresh = json.loads((toy / "run" / "losses.json").read_text())  # the same command's draws, from random weights
    assert warm[0] < 0.7 * fresh[0], (warm[:3], fresh[:3])
    meta, _ = WorldModel.read_meta(out / "model")
    assert meta.train_steps == 600 + 5
    assert "Started from the weights of" in (out / "model" / "README.md").read_text()
    for name, args in {"another size": ["--data", toy / "store", "--ae", toy / "ae", "--context", "8"],
                       "a missing model": ["--data", toy / "store", "--ae", toy / "ae", "--init", tmp_path / "nope"]
                       }.items():
        res = cli("train", *args, "--preset", "tiny", "--out", tmp_path / "refused", "--steps", "2",
                  *(["--init", toy_model] if "--init" not in args else []))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and "fix:" in lines[0], (name, res.stderr)
        assert not (tmp_path / "refused").exists(), name


def test_distill_and_runtime_bad_inputs_are_one_line_exit_2(toy, toy_model, tmp_path):
    store16 = tmp_path / "store16"
    cli("record", "--env", "toy:cursor", "--resolution", "16x16", "--steps", "50", "--out", store16, check=True)
    cases = {
        "distill from another game's store": ["distill", "--model", toy_model, "--data", store16, "--steps", "2"],
        "distill a missing model": ["distill", "--model", tmp_path / "nope", "--data", toy / "store"],
        "unknown runtime": ["eval", "--model", toy_model, "--data", toy / "store", "--runtime", "fast"],
    }
    for name, args in cases.items():
        out = tmp_path / "out"
        res = cli(*args, "--out", out)
        assert res.returncode == 2, (name, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "fix:" in lines[0], (name, res.stderr)
        assert not out.exists(), name

def test_paper_preset_runs_one_training_step():
    """SD-1.4-size U-Net at 320x256 with 64 frames of context: one step on CPU, batch 1."""
    from gamengen.diffusion.denoiser import Denoiser, DenoiserConfig, TrainingNoise
    from gamengen.models.unet import ActionConditionedUNet
    from gamengen.train.world_model import UNET_PRESETS

    net = ActionConditionedUNet(latent_channels=4, latent_height=32, latent_width=40, context=64, n_actions=12,
                                **UNET_PRESETS["paper"])
    assert net.unet.config.in_channels == 4 * 65 and sum(p.numel() for p in net.parameters()) > 8e8
    den = Denoiser(net, DenoiserConfig())
    gen = torch.Generator().manual_seed(0)
    draws = TrainingNoise.draw([gen], (4, 32, 40), 64, den.cfg)
    opt = torch.optim.Adafactor(net.parameters(), lr=2e-5)
    loss = den.loss(torch.randn(1, 4, 32, 40), torch.randn(1, 64, 4, 32, 40), torch.zeros(1, 64, dtype=torch.long),
                    draws)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)


def test_engine_plays_with_the_training_time_indexing(toy, toy_model):
    """NeuralWorld's context after reset equals the training window of the same target step, and
    NeuralEnv is a valid, seeded gymnasium env."""
    from gymnasium.utils.env_checker import check_env

    from gamengen.engine.world import NeuralEnv, NeuralWorld

    world = NeuralWorld(toy_model)
    store = Store.open(toy / "store")
    _, held = split(store.episodes(), 0.1)
    rec = next(r for r in held if r.length > 8)
    g = store.open_episode(rec)
    frames, actions = g["frames"][:8], g["actions"][:8].astype(np.int64)
    shown = world.reset(frames[:6], actions[:5])
    np.testing.assert_array_equal(shown, frames[5])
    cache = LatentCache(world.codec, toy / "ae" / "latents")
    cache.build(store, [rec])
    ctx, acts, _ = LatentWindows(store, cache, [rec], world.context)[5]  # target n = 6
    np.testing.assert_allclose(world.latents.numpy(), ctx, atol=2e-2)  # the cache stores float16
    assert list(world.past_actions.numpy()) + [actions[5]] == list(acts)
    nxt = world.step(int(actions[5]))
    assert nxt.shape == frames[6].shape and nxt.dtype == np.uint8
    assert psnr(nxt, frames[6]) > 20

    starts = [(frames[:6], actions[:5]), (frames[:3], actions[:2])]
    env = NeuralEnv(world, starts, max_steps=5)
    check_env(env, skip_render_check=True)
    a, _ = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    np.testing.assert_array_equal(a, b)
    one = [env.step(i % 5)[0] for i in range(3)]
    env.reset(seed=3)
    two = [env.step(i % 5)[0] for i in range(3)]
    np.testing.assert_array_equal(np.stack(one), np.stack(two))


def differing_checkpoints(a, b) -> list[str]:
    """The checkpoints that runs ``a`` and ``b`` both have and whose tensors differ."""
    def tensors(run, step):
        f = run / "checkpoints" / step / "tensors.safetensors"
        return f.read_bytes() if f.exists() else None

    return [c.name for c in sorted((a / "checkpoints").glob("step-*"))
            if tensors(b, c.name) is not None and tensors(a, c.name) != tensors(b, c.name)]


def test_train_ae_killed_resumes_to_the_same_weights(toy, tmp_path):
    """SIGKILL mid-run, re-run the same command: the AE ends bit-identical to an uninterrupted run."""
    import signal
    import time
    import warnings

    from safetensors.torch import load_file

    # The shared toy AE is the uninterrupted reference: the same command, every checkpoint kept.
    args = [*TOY_AE, "--data", toy / "store"]
    ref, run = toy / "ae", tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "gamengen", *map(str, args), "--out", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while not (run / "checkpoints" / "step-00000050").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (run / "checkpoints" / "step-00000050").exists()
    assert not (run / "gamengen_ae.json").exists()  # killed before the end
    left = sorted(p.name for p in (run / "checkpoints").iterdir())
    cli(*args, "--out", run, check=True)
    parted = differing_checkpoints(ref, run)
    if parted and parted[0] <= "step-00000050":
        # The killed run had parted from the reference *before* the kill: two uninterrupted runs of one
        # command differed, which is not the resume's doing. Judge the resume from the reference's own
        # checkpoint instead. (This test failed in 2 of about 8 full CI runs, never in over 20 runs alone, and
        # those failures did not record where the runs parted; the warning and message now do.)
        warnings.warn(f"two uninterrupted train-ae runs differed from {parted[0]} on; "
                      "judging the resume from the reference's step-50 checkpoint")
        run = tmp_path / "again"
        shutil.copytree(ref / "checkpoints" / "step-00000050", run / "checkpoints" / "step-00000050")
        cli(*args, "--out", run, check=True)
        left, parted = ["step-00000050 (the reference's)"], differing_checkpoints(ref, run)
    want = load_file(ref / "diffusion_pytorch_model.safetensors")
    got = load_file(run / "diffusion_pytorch_model.safetensors")
    assert want.keys() == got.keys()
    differ = {k: float((want[k] - got[k]).abs().max()) for k in want if not torch.equal(want[k], got[k])}
    assert not differ, (f"resumed from {left}; the checkpoints that differ from the uninterrupted run's: {parted}; "
                        f"{len(differ)} of {len(want)} final tensors differ, e.g. {list(differ.items())[:3]}")
    assert json.loads((run / "gamengen_ae.json").read_text())["scale"] == \
        json.loads((ref / "gamengen_ae.json").read_text())["scale"]
    # resuming with other settings is refused, and changes nothing
    before = snapshot(run)
    other = [a if a != "3e-3" else "1e-3" for a in args]
    res = cli(*other, "--out", run)
    assert res.returncode == 2 and "other settings (learning_rate)" in res.stderr
    assert snapshot(run) == before


def test_context_share_gives_the_same_prediction():
    """The fast path's split of the first convolution (context part once per frame) is exact."""
    from gamengen.models.unet import ActionConditionedUNet
    from gamengen.train.world_model import UNET_PRESETS

    torch.manual_seed(0)
    net = ActionConditionedUNet(latent_channels=4, latent_height=8, latent_width=8, context=6, n_actions=5,
                                **UNET_PRESETS["tiny"]).eval()
    x, ctx = torch.randn(2, 4, 8, 8), torch.randn(2, 6, 4, 8, 8)
    t, acts, bucket = torch.tensor([999, 500]), torch.randint(0, 5, (2, 6)), torch.tensor([0, 3])
    with torch.no_grad():
        full = net(x, t, ctx, acts, bucket)
        split_ = net.forward_from_share(x, t, net.context_share(ctx), acts, bucket)
    torch.testing.assert_close(split_, full, atol=1e-5, rtol=1e-4)
    assert net.unet.conv_in.in_channels == 4 * 7  # the swap was undone


def test_fast_runtime_plays_the_reference_frames(toy, toy_model):
    """The ONNX Runtime frame graph gives the eager fp32 path's latents and frames, on inputs other
    than the ones it was traced with (another guidance weight and context-noise bucket, real
    contexts, every action), and the actions still change its frames."""
    from gamengen.engine.world import EngineConfig, NeuralWorld

    cfg = dict(guidance=2.0, noise_level=0.3)
    fast = NeuralWorld(toy_model, EngineConfig(runtime="onnx", **cfg))
    ref = NeuralWorld(toy_model, EngineConfig(runtime="torch", **cfg))
    assert type(fast.runtime).__name__ == "OnnxPath" and type(ref.runtime).__name__ == "EagerPath"
    store = Store.open(toy / "store")
    _, held = split(store.episodes(), 0.1)
    g = store.open_episode(next(r for r in held if r.length > 8))
    frames, actions = g["frames"][:6], g["actions"][:5].astype(np.int64)
    for w in (fast, ref):
        w.reset(frames, actions, seed=7)
    start = fast.state()
    for a in range(fast.n_actions):
        f, r = fast.step(a), ref.step(a)
        torch.testing.assert_close(fast.latents, ref.latents, atol=1e-4, rtol=1e-4)
        assert np.abs(f.astype(int) - r.astype(int)).max() <= 2
    fast.restore(start, seed=1)
    one = fast.step(0)
    fast.restore(start, seed=1)
    assert np.abs(fast.step(1).astype(int) - one.astype(int)).mean() > 1  # action 1 moves the cursor


def test_distilled_student_makes_the_teachers_frames_in_one_step(toy, toy_model, tmp_path):
    """`gamengen distill` (paper App. A.4): the 1-step student, without CFG, lands closer to the
    teacher's 4-step CFG latents than the teacher itself sampled in 1 step, on held-out contexts;
    an interrupted run resumes to the same losses (and may resume under bf16 autocast); the student plays its own way (1 step, no CFG)."""
    from gamengen.engine.world import EngineConfig, NeuralWorld
    from gamengen.eval.heldout import context_at, heldout_episodes

    args = ["--model", toy_model, "--data", toy / "store", "--latents", toy / "ae" / "latents",
            "--checkpoint-every", "50"]
    cli("distill", *args, "--out", tmp_path / "whole", "--steps", "100", check=True)
    cli("distill", *args, "--out", tmp_path / "parts", "--steps", "10", check=True)
    cli("distill", *args, "--out", tmp_path / "parts", "--steps", "20", check=True)  # resumes at 10
    whole, parts = (json.loads((tmp_path / r / "losses.json").read_text()) for r in ("whole", "parts"))
    np.testing.assert_allclose(parts, whole[:20], rtol=1e-5, atol=1e-7)
    cli("distill", *args, "--out", tmp_path / "parts", "--steps", "30", "--bf16", check=True)  # precision may change
    bf16 = json.loads((tmp_path / "parts" / "losses.json").read_text())[20:]
    assert len(bf16) == 10 and bf16 != whole[20:30]  # autocast ran ...
    np.testing.assert_allclose(bf16, whole[20:30], rtol=0.2)  # ... and learns the same

    student = NeuralWorld(tmp_path / "whole" / "model", EngineConfig(runtime="torch"))
    assert student.steps == 1 and student.guidance == 1.0 and student.meta.distilled_from == str(toy_model)
    teacher = NeuralWorld(toy_model, EngineConfig(runtime="torch"))
    one_step = NeuralWorld(toy_model, EngineConfig(runtime="torch", steps=1))
    store, held = heldout_episodes(teacher.meta, toy / "store", min_length=12)
    errors = {"student": [], "teacher in 1 step": []}
    starts = [(rec, t) for rec in held for t in range(10, rec.length - 1, 9)][:8]
    for i, (rec, t) in enumerate(starts):
        frames, actions = context_at(store, rec, t, teacher.context)
        nxt = int(store.open_episode(rec)["actions"][t])
        for w in (student, teacher, one_step):
            w.reset(frames, actions, seed=i)
            w.step(nxt)
        errors["student"].append(float((student.latents[-1] - teacher.latents[-1]).pow(2).mean()))
        errors["teacher in 1 step"].append(float((one_step.latents[-1] - teacher.latents[-1]).pow(2).mean()))
    means = {k: float(np.mean(v)) for k, v in errors.items()}
    # measured 0.56 of the one-step teacher's error with one compute thread (below 0.5 with two): a
    # student that learned nothing starts from the teacher's weights and errs about as the teacher in 1 step
    assert means["student"] < 0.7 * means["teacher in 1 step"], means

    fast = NeuralWorld(tmp_path / "whole" / "model")  # the unguided frame graph: one branch, no CFG
    for w in (fast, student):
        w.reset(frames, actions, seed=0)
        w.step(nxt)
    torch.testing.assert_close(fast.latents, student.latents, atol=1e-4, rtol=1e-4)


def test_asymmetric_autoencoder_saves_loads_and_keeps_the_decoder_small(tmp_path):
    """cpu-asym: a 4x wider encoder (never run in play) before cpu-16ch's decoder; the folder holds
    diffusers' AsymmetricAutoencoderKL and loads back to the same numbers; other classes are refused."""
    import pytest

    from gamengen.errors import UserError
    from gamengen.models.autoencoder import AE_PRESETS, FrameCodec, build_autoencoder

    torch.manual_seed(0)
    asym, sym = (build_autoencoder(AE_PRESETS[p]) for p in ("cpu-asym", "cpu-16ch"))
    size = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert size(asym.encoder) > 10 * size(sym.encoder)
    # cpu-16ch's decoder stages, plus the mid-block attention diffusers' class always has, plus an
    # inpainting branch that never runs here
    attention = size(asym.decoder.mid_block.attentions)
    assert size(asym.decoder) - size(asym.decoder.condition_encoder) - attention == size(sym.decoder)
    codec = FrameCodec(asym.eval(), 120, 160, pad_multiple=32, scale=0.7)
    frames = np.random.default_rng(0).integers(0, 256, (2, 120, 160, 3), dtype=np.uint8)
    z = codec.encode(frames)
    assert z.shape == (2, *codec.latent_shape()) == (2, 16, 16, 20)
    codec.save(tmp_path / "ae", card="test")
    back = FrameCodec.load(tmp_path / "ae")
    assert type(back.ae).__name__ == "AsymmetricAutoencoderKL"
    assert np.array_equal(back.decode(back.encode(frames)), codec.decode(z))
    cfg = json.loads((tmp_path / "ae" / "config.json").read_text())
    (tmp_path / "ae" / "config.json").write_text(json.dumps({**cfg, "_class_name": "UNet2DModel"}))
    with pytest.raises(UserError, match="not one of the autoencoders"):
        FrameCodec.load(tmp_path / "ae")


def test_training_with_unrolls_lognormal_timesteps_and_residual_runs_both_data_paths(toy, tmp_path):
    """The drift and parameterisation levers train end to end, per-sample and batched, and the
    model folder says how it was trained."""
    for extra in ([], ["--batched-data"]):
        out = tmp_path / f"run{len(extra)}"
        cli("train", "--data", toy / "store", "--ae", toy / "ae", "--out", out, *TINY, "--steps", "12",
            "--unroll", "0.5", "--timesteps", "lognormal", "--residual", "--max-noise-level", "0.3", *extra,
            check=True)
        meta = json.loads((out / "model" / "gamengen_wm.json").read_text())["meta"]
        assert meta["denoiser"]["unroll"] == 0.5 and meta["denoiser"]["timesteps"] == "lognormal"
        assert meta["denoiser"]["residual"] is True and meta["denoiser"]["max_noise_level"] == 0.3
    for flag, value in (("--unroll", "2"), ("--max-noise-level", "-1")):
        bad = cli("train", "--data", toy / "store", "--ae", toy / "ae", "--out", tmp_path / "bad", flag, value)
        assert bad.returncode == 2 and flag in bad.stderr and not (tmp_path / "bad").exists()


def test_train_ae_learns_several_games_and_refuses_mixed_sizes(doom_store, toy, tmp_path):
    """`train-ae --data A --data B`: one AE over a real Freedoom store and a toy store of the same
    frame size, its meta naming both games (and no single key set, since theirs differ); stores of
    different frame sizes are refused in one line before anything is written."""
    toy160 = tmp_path / "toy160"
    w, h = Store.open(doom_store).spec.width, Store.open(doom_store).spec.height
    cli("record", "--env", "toy:cursor", "--resolution", f"{w}x{h}", "--steps", "200", "--seed", "3",
        "--out", toy160, check=True)
    out = tmp_path / "ae"
    cli("train-ae", "--data", doom_store, "--data", toy160, "--out", out, "--preset", "tiny", "--steps", "6",
        "--decoder-steps", "2", "--batch-size", "4", check=True)
    meta = json.loads((out / "gamengen_ae.json").read_text())
    assert meta["env_ids"] == ["vizdoom:freedoom1/E1M1", "toy:cursor"] and "env_id" not in meta
    assert "actions" not in meta
    assert str(doom_store) in (out / "README.md").read_text() and str(toy160) in (out / "README.md").read_text()
    res = cli("train-ae", "--data", doom_store, "--data", toy / "store", "--out", tmp_path / "mixed",
              "--preset", "tiny", "--steps", "2")
    assert res.returncode == 2 and "different sizes" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "mixed").exists()


def test_train_ae_init_starts_from_another_autoencoder(toy, tmp_path):
    """--init copies an AE's weights in before stage 1 (at learning rate 0 they come out unchanged);
    an AE of another preset's shape is refused in one line before anything is written."""
    from safetensors.torch import load_file

    out = tmp_path / "ae"
    cli("train-ae", "--data", toy / "store", "--out", out, "--preset", "tiny", "--init", toy / "ae", "--steps", "1",
        "--decoder-steps", "1", "--learning-rate", "0", check=True)
    a = load_file(toy / "ae" / "diffusion_pytorch_model.safetensors")
    b = load_file(out / "diffusion_pytorch_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert f"from the weights of `{toy / 'ae'}`" in (out / "README.md").read_text()
    res = cli("train-ae", "--data", toy / "store", "--out", tmp_path / "other", "--preset", "cpu", "--init", toy / "ae",
              "--steps", "1")
    assert res.returncode == 2 and "not of the cpu preset's shape" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (tmp_path / "other").exists()


def test_train_ae_bf16_autocast_is_close_to_fp32_and_may_change_on_resume(toy, tmp_path):
    """--bf16 runs the AE's forward passes in bf16 (weights stay fp32), and a run may resume with the
    other precision, since precision is not part of what the run learns: a run whose first step ran
    in bf16 (then stopped by its time budget) and whose other three ran in fp32 ends a little off a
    4-step fp32 run from the same seed (autocast ran), and only a little."""
    from safetensors.torch import load_file

    args = ["--data", toy / "store", "--preset", "tiny", "--steps", "4", "--decoder-steps", "0"]
    cli("train-ae", *args, "--out", tmp_path / "fp32", check=True)
    cli("train-ae", *args, "--out", tmp_path / "mixed", "--bf16", "--max-minutes", "0", check=True)
    assert "1 autoencoder steps" in (tmp_path / "mixed" / "README.md").read_text()
    cli("train-ae", *args, "--out", tmp_path / "mixed", "--no-bf16", check=True)
    assert "4 autoencoder steps" in (tmp_path / "mixed" / "README.md").read_text()
    a = load_file(tmp_path / "fp32" / "diffusion_pytorch_model.safetensors")
    b = load_file(tmp_path / "mixed" / "diffusion_pytorch_model.safetensors")
    moved = {k: (a[k] - b[k]).abs().max().item() for k in a}
    assert max(moved.values()) > 0
    assert all(torch.allclose(a[k], b[k], rtol=0.05, atol=0.02) for k in a), max(moved.items(), key=lambda kv: kv[1])


def test_train_ae_decoder_continuation_keeps_the_latents(toy, tmp_path):
    """A time-budgeted run re-run for more decoder fine-tune changes only the decoder, so it keeps the
    saved latent scale and with it the encoder's id: the latent cache, and the world models trained on
    those latents, stay valid (a re-measured scale would differ by the frames it drew)."""
    from safetensors.torch import load_file

    from gamengen.models.autoencoder import FrameCodec

    out = tmp_path / "ae"
    args = ["train-ae", "--data", toy / "store", "--out", out, "--preset", "tiny", "--steps", "2",
            "--decoder-steps", "1000000", "--max-minutes", "0"]
    cli(*args, check=True)  # the budget ends each stage after one step
    before, w0 = FrameCodec.load(out), load_file(out / "diffusion_pytorch_model.safetensors")
    cli(*args, check=True)  # resumes inside the decoder fine-tune
    after, w1 = FrameCodec.load(out), load_file(out / "diffusion_pytorch_model.safetensors")
    assert "1 autoencoder steps" in (out / "README.md").read_text()
    assert "2 decoder-only steps" in (out / "README.md").read_text()
    enc = [k for k in w0 if k.startswith(("encoder.", "quant_conv."))]
    assert enc and all(torch.equal(w0[k], w1[k]) for k in enc)
    assert any(not torch.equal(w0[k], w1[k]) for k in w0 if k.startswith("decoder."))
    assert after.scale == before.scale and after.encoder_id() == before.encoder_id()
