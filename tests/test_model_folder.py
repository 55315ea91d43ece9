"""The world model folder (models/world_model.py): round trip, format 1 and `gamengen model upgrade`,
foreign folders, the bundled models."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import cli, snapshot
from gamengen.diffusion.denoiser import DenoiserConfig
from gamengen.errors import UserError
from gamengen.models.world_model import SamplerConfig, Start, WorldModel, WorldModelMeta

ROOT = Path(__file__).resolve().parents[1]
BUNDLED, STUDENT = ROOT / "models" / "freedoom-e1m1", ROOT / "models" / "freedoom-e1m1-1step"
ACTIONS = {"names": ["NOOP", "LEFT", "RIGHT"], "buttons": ["L", "R"], "combos": [[0, 0], [1, 0], [0, 1]]}


def tiny_model(starts: bool = True) -> WorldModel:
    from gamengen.models.autoencoder import AE_PRESETS, FrameCodec, build_autoencoder
    from gamengen.models.unet import ActionConditionedUNet
    from gamengen.train.world_model import UNET_PRESETS

    torch.manual_seed(0)
    codec = FrameCodec(build_autoencoder(AE_PRESETS["tiny"]).eval(), 16, 16, pad_multiple=4, scale=0.5)
    net = ActionConditionedUNet(latent_channels=4, latent_height=8, latent_width=8, context=3, n_actions=3,
                                **UNET_PRESETS["tiny"]).eval()
    meta = WorldModelMeta(env_id="toy:cursor", action_set=ACTIONS, height=16, width=16, fps=15.0, frame_skip=2,
                          context=3, heldout=0.2, preset="tiny", train_steps=7,
                          denoiser=DenoiserConfig(max_noise_level=0.5))
    rng = np.random.default_rng(0)
    made = [Start(rng.integers(0, 256, (k, 16, 16, 3), dtype=np.uint8), np.arange(t, dtype=np.int64) % 3,
                  f"run/e{k}", seed) for k, t, seed in ((1, 0, 11), (3, 9, None))]
    return WorldModel(net, codec, meta, SamplerConfig(steps=3, guidance=2.0, context_noise_level=0.1),
                      made if starts else [])


def format_1(folder: Path) -> None:
    """Rewrite a folder's gamengen_wm.json as `gamengen train` wrote it before format 2."""
    meta, sampler = WorldModel.read_meta(folder)
    old = {"denoiser": {**asdict(meta.denoiser), "guidance": sampler.guidance,
                        "inference_noise_level": sampler.context_noise_level},
           "context": meta.context, "preset": meta.preset, "env_id": meta.env_id, "actions": meta.actions,
           "action_set": meta.action_set, "height": meta.height, "width": meta.width, "fps": meta.fps,
           "train_steps": meta.train_steps, "heldout": meta.heldout, "sampling_steps": sampler.steps}
    (folder / "gamengen_wm.json").write_text(json.dumps(old))


def one_line_error(res, *words) -> str:
    err = res.stderr.strip()
    assert res.returncode == 2 and err.startswith("error:") and "\n" not in err and "Traceback" not in err, res.stderr
    for w in words:
        assert w in err, err
    return err


def test_save_and_load_give_back_the_same_model(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "m")
    assert not [p for p in tmp_path.iterdir() if p.name != "m"]  # no temporary sibling is left
    back = WorldModel.from_pretrained(tmp_path / "m")
    assert back.meta == model.meta and back.sampler == model.sampler and back.meta.actions == ACTIONS["names"]
    assert WorldModel.read_meta(tmp_path / "m") == (model.meta, model.sampler)
    for a, b in zip(back.starts, model.starts, strict=True):
        assert np.array_equal(a.frames, b.frames) and np.array_equal(a.prefix, b.prefix)
        assert (a.episode, a.env_seed) == (b.episode, b.env_seed)
    for mine, theirs in ((model.net, back.net), (model.codec.ae, back.codec.ae)):
        ref = mine.state_dict()
        assert all(torch.equal(ref[k], v) for k, v in theirs.state_dict().items()) and ref.keys() == theirs.state_dict().keys()
    assert (back.codec.height, back.codec.width, back.codec.scale) == (16, 16, 0.5)
    d = json.loads((tmp_path / "m" / "gamengen_wm.json").read_text())
    assert (d["format"], d["version"], d["sampler"]["guidance"]) == ("gamengen-world-model", 2, 2.0)
    assert "guidance" not in d["meta"]["denoiser"]
    assert not list((tmp_path / "m").rglob("*.bin")) and not list((tmp_path / "m").rglob("*.pkl"))
    # saving again replaces the whole folder: a model without starts leaves none behind
    tiny_model(starts=False).save_pretrained(tmp_path / "m", card="# card\n")
    assert WorldModel.from_pretrained(tmp_path / "m").starts == []
    assert (tmp_path / "m" / "README.md").read_text() == "# card\n" and sorted(tmp_path.iterdir()) == [tmp_path / "m"]
    with pytest.raises(UserError, match="no start contexts"):
        WorldModel.load_starts(tmp_path / "m")
    WorldModel.save_starts(tmp_path / "m", model.starts[:1])
    assert [s.episode for s in WorldModel.load_starts(tmp_path / "m")] == ["run/e1"]


def test_a_format_1_folder_says_so_and_model_upgrade_converts_it(tmp_path):
    model = tiny_model()
    old = tmp_path / "old"
    model.save_pretrained(old)
    format_1(old)
    before = snapshot(old)
    res = cli("play", "--model", old, "--no-open", "--runtime", "torch")
    one_line_error(res, "format 1", f"gamengen model upgrade {old}")
    res = cli("eval", "--model", old, "--data", tmp_path / "store", "--out", tmp_path / "report")
    one_line_error(res, "format 1")
    assert snapshot(old) == before and not (tmp_path / "report").exists()

    cli("model", "upgrade", old, "--out", tmp_path / "copy", check=True)  # into a new folder
    assert snapshot(old) == before
    one_line_error(cli("model", "upgrade", old, "--out", tmp_path / "copy"), "exists")
    cli("model", "upgrade", old, check=True)  # in place
    for folder in (old, tmp_path / "copy"):
        back = WorldModel.from_pretrained(folder)
        assert back.meta == replace(model.meta, frame_skip=1)  # format 1 did not record the frame skip
        assert back.sampler == model.sampler and len(back.starts) == 2
        after = snapshot(folder)
        assert {k: v for k, v in after.items() if k != "gamengen_wm.json"} == \
            {k: v for k, v in before.items() if k != "gamengen_wm.json"}  # the weights, byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "old"]
    one_line_error(cli("model", "upgrade", old), "already format 2")


def test_foreign_folders_get_one_line_each(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "m")
    one_line_error(cli("play", "--model", tmp_path / "m" / "ae", "--no-open"), "autoencoder", "ae/")
    pipeline = tmp_path / "pipeline"
    pipeline.mkdir()
    (pipeline / "model_index.json").write_text("{}")
    one_line_error(cli("model", "upgrade", pipeline), "diffusers pipeline")
    one_line_error(cli("play", "--model", tmp_path / "none", "--no-open"), "no model folder")
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "gamengen_wm.json").write_text("{}")
    with pytest.raises(UserError, match="training run folder") as e:
        WorldModel.read_meta(run)
    assert str(run / "model") in e.value.fix
    (tmp_path / "m" / "gamengen_wm.json").write_text(json.dumps({"format": "gamengen-world-model", "version": 3}))
    with pytest.raises(UserError, match="format 3"):
        WorldModel.read_meta(tmp_path / "m")


def test_the_bundled_models_load():
    teacher, student = WorldModel.from_pretrained(BUNDLED), WorldModel.from_pretrained(STUDENT)
    assert teacher.sampler == SamplerConfig(steps=4, guidance=1.5) and teacher.meta.distilled_from is None
    assert student.sampler == SamplerConfig(steps=1, guidance=1.0)
    assert (student.meta.distilled_from, student.meta.distill_steps) == ("models/freedoom-e1m1", 1000)
    for m in (teacher, student):
        assert (m.meta.env_id, m.meta.width, m.meta.height, m.meta.context) == ("vizdoom:freedoom1/E1M1", 160, 120, 64)
        assert len(m.meta.actions) == 12 and m.meta.frame_skip == 1 and len(m.starts) == 3


def test_a_folder_swap_cut_between_its_renames_gets_the_old_folder_back(tmp_path):
    """write_folder_atomic: a crash after the old folder went aside and before the new one came in
    leaves only `.NAME.old-PID`; the next write puts it back first, and drops crashed temporaries."""
    from gamengen.atomic import write_folder_atomic

    folder = tmp_path / "model"
    aside = tmp_path / ".model.old-99999"
    aside.mkdir()
    (aside / "weights").write_text("old")
    (tmp_path / ".model.tmp-88888").mkdir()  # another crashed call's half-written folder

    def fails(tmp):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_folder_atomic(folder, fails)
    assert (folder / "weights").read_text() == "old"  # back, though this write failed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    write_folder_atomic(folder, lambda tmp: (tmp.mkdir(), (tmp / "weights").write_text("new")))
    assert (folder / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
