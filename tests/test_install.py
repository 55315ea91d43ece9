"""gamengen works as a plain (non-editable) install: `play` finds the bundled model from a checkout or
through $GAMENGEN_MODEL, and says in one line how to point at a model when there is none."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gamengen.cli import common
from gamengen.errors import UserError

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / common.BUNDLED_MODEL_DIR


def test_the_bundled_model_is_found_from_the_environment_then_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "bundled_model_candidates", lambda: [Path.cwd() / common.BUNDLED_MODEL_DIR])
    monkeypatch.delenv(common.MODEL_ENV, raising=False)
    (tmp_path / "checkout" / common.BUNDLED_MODEL_DIR).mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "mine").mkdir()

    monkeypatch.chdir(tmp_path / "checkout")
    assert common.find_bundled_model() == tmp_path / "checkout" / common.BUNDLED_MODEL_DIR
    assert common.BUNDLED_MODEL() == common.find_bundled_model()  # what click calls when --model is not given
    monkeypatch.setenv(common.MODEL_ENV, str(tmp_path / "mine"))
    assert common.find_bundled_model() == tmp_path / "mine"  # the environment wins

    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv(common.MODEL_ENV, str(tmp_path / "missing"))
    with pytest.raises(UserError, match="GAMENGEN_MODEL=.*missing is not a folder.*--model DIR"):
        common.find_bundled_model()
    monkeypatch.delenv(common.MODEL_ENV)
    with pytest.raises(UserError) as e:
        common.find_bundled_model()
    assert "--model DIR" in str(e.value) and "GAMENGEN_MODEL" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with gamengen installed from a copy of this checkout, not editable. It sees the
    test venv's packages (torch, typer, ...), so nothing is downloaded."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src-copy"  # a copy, so the build writes its build/ and egg-info there, not in the checkout
    shutil.copytree(REPO / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    py = venv / "bin" / "python"
    # A venv made from a venv's python takes the base interpreter as its "system", so point it at this
    # venv's site-packages as well. A plain path line in a .pth file does not run the .pth files there,
    # so the checkout's editable install (__editable__.gamengen-*.pth) stays out of it.
    target_site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                      capture_output=True, text=True, check=True).stdout.strip())
    (target_site / "_test_venv_packages.pth").write_text(sysconfig.get_path("purelib") + "\n")
    res = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                          "--ignore-installed", "--disable-pip-version-check", "--quiet", str(src)],
                         capture_output=True, text=True, timeout=600, env=_clean_env())
    assert res.returncode == 0, f"pip install failed:\n{res.stdout}\n{res.stderr}"
    return venv


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", common.MODEL_ENV, "VIRTUAL_ENV")}
    return {**env, **extra}


def _run(venv: Path, args: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=_clean_env(**env))


def test_a_plain_install_plays_from_a_checkout_or_says_how_to_point_at_a_model(installed, tmp_path):
    where = _run(installed, ["python", "-c", "import gamengen, pathlib; "
                             "print(pathlib.Path(gamengen.__file__).parent)"], cwd=tmp_path)
    pkg = Path(where.stdout.strip())
    assert pkg.is_relative_to(installed), f"gamengen came from {pkg}, not the plain install\n{where.stderr}"
    assert (pkg / "play" / "static" / "index.html").is_file() and list((pkg / "play" / "keymaps").glob("*.json"))

    res = _run(installed, ["gamengen", "play", "--help"], cwd=tmp_path)
    assert res.returncode == 0 and "--model" in res.stdout, res.stdout + res.stderr

    # no models/ here and none beside the installed package: one line saying how, exit 2, no server
    res = _run(installed, ["gamengen", "play", "--no-open", "--port", "0"], cwd=tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
    assert lines[0].startswith("error: ") and "--model DIR" in lines[0] and "GAMENGEN_MODEL" in lines[0]
    res = _run(installed, ["gamengen", "play", "--no-open", "--port", "0"], cwd=tmp_path,
               GAMENGEN_MODEL=str(tmp_path / "nowhere"))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stdout + res.stderr
    assert "GAMENGEN_MODEL=" in res.stderr and "--model DIR" in res.stderr

    # from the checkout's root, or anywhere with GAMENGEN_MODEL, the default is the bundled model
    find = "from gamengen.cli.common import BUNDLED_MODEL; print(BUNDLED_MODEL())"
    res = _run(installed, ["python", "-c", find], cwd=REPO)
    assert res.returncode == 0 and Path(res.stdout.strip()).resolve() == BUNDLED.resolve(), res.stdout + res.stderr
    res = _run(installed, ["python", "-c", find], cwd=tmp_path, GAMENGEN_MODEL=str(BUNDLED))
    assert res.returncode == 0 and Path(res.stdout.strip()) == BUNDLED, res.stdout + res.stderr
