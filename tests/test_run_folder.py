"""The run folder every trainer shares (train/run.py): settings checked on resume, checkpoints, budget."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from gamengen.errors import UserError
from gamengen.train.run import KILL_AT_SAVE, Deadline, RunFolder


def test_a_run_resumes_with_its_settings_and_refuses_others(tmp_path):
    run = RunFolder(tmp_path / "run", {"lr": 0.1, "steps": 10}).open()
    assert json.loads(run.settings_path.read_text()) == {"lr": 0.1, "steps": 10}
    assert run.resume() is None
    run.save(5, {"step": 5, "w": torch.arange(3.0)})
    RunFolder(tmp_path / "run", {"lr": 0.1, "steps": 20}).open()  # more steps: the same run
    with pytest.raises(UserError, match=r"other settings \(lr\)"):
        RunFolder(tmp_path / "run", {"lr": 0.2, "steps": 20}).open()
    assert json.loads(run.settings_path.read_text())["steps"] == 20  # the refusal wrote nothing
    state = RunFolder(tmp_path / "run", {"lr": 0.1, "steps": 20}).resume()
    assert state["step"] == 5 and state["w"].tolist() == [0.0, 1.0, 2.0]


def test_a_file_where_the_run_belongs_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        RunFolder(tmp_path / "file", {}).open()


def test_a_kill_between_a_checkpoint_and_its_manifest_leaves_the_previous_one(tmp_path):
    code = ("import torch; from gamengen.train.run import RunFolder; r = RunFolder(r'%s', {}).open()\n"
            "for s in (1, 2): r.save(s, {'step': s, 'w': torch.ones(2) * s})" % (tmp_path / "run"))
    res = subprocess.run([sys.executable, "-c", code], env={**__import__("os").environ, KILL_AT_SAVE: "2"})
    assert res.returncode == -9
    assert RunFolder(tmp_path / "run", {}).resume(warn=lambda m: None)["step"] == 1


def test_no_deadline_never_passes_and_a_past_one_does():
    assert not Deadline(None).passed()
    assert Deadline(0).passed() and not Deadline(60).passed()


def test_bf16_asked_for_on_a_cpu_without_bf16_units_gets_a_warning(monkeypatch, capsys):
    """--bf16 without bf16 units runs emulated, ~10x slower: the training commands say so, once."""
    import torch

    from gamengen.cli.common import warn_slow_bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for native, warned in ((False, True), (True, False)):
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: native)
        warn_slow_bf16(True)
        err = capsys.readouterr().err
        assert ("has no bf16 units" in err) == warned and err.count("\n") == int(warned), err
        warn_slow_bf16(False)
        assert capsys.readouterr().err == ""
