"""Shared helpers: run the real CLI in a subprocess and snapshot folders for 'nothing changed' checks."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# A compute thread per core, shared between the xdist workers. Left alone, each worker and each CLI
# it starts takes torch's default of one thread per core, so `make test`'s two workers ran four
# threads on two cores. Set here, before any test module loads torch, and inherited by the CLI's
# subprocesses; a value the user set wins.
_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))))


def cli(*args, check: bool = False, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run `gamengen ARGS` as a user would, capturing output."""
    res = subprocess.run([sys.executable, "-m", "gamengen", *map(str, args)], capture_output=True, text=True,
                         timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise AssertionError(f"gamengen {' '.join(map(str, args))} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root with its content hash (to prove a refused command changed nothing)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_file():
            out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[p.relative_to(root).as_posix() + "/"] = ""
    return out


@pytest.fixture(scope="session")
def toy_store(tmp_path_factory) -> Path:
    """A small toy-game store recorded once through the CLI, with two workers."""
    out = tmp_path_factory.mktemp("toy") / "store"
    cli("record", "--env", "toy:cursor", "--steps", "1500", "--workers", "2", "--out", out, "--seed", "7", check=True)
    return out


@pytest.fixture(scope="session")
def doom_store(tmp_path_factory) -> Path:
    """Real Freedoom E1M1 random play (short)."""
    out = tmp_path_factory.mktemp("doom") / "store"
    cli("record", "--env", "vizdoom:freedoom1/E1M1", "--policy", "random", "--steps", "600", "--workers", "2",
        "--max-episode-steps", "200", "--out", out, check=True)
    return out


TINY = ["--preset", "tiny", "--checkpoint-every", "10", "--sample-every", "0"]
# The toy AE's command. Every checkpoint is kept so that the kill test can use this run as its
# uninterrupted reference and say at which step a resumed run parts from it.
TOY_AE = ["train-ae", "--preset", "tiny", "--steps", "300", "--decoder-steps", "100", "--learning-rate", "3e-3",
          "--checkpoint-every", "25", "--keep-checkpoints", "20"]


def shared_temp(tmp_path_factory) -> Path:
    """This test run's temp folder that every xdist worker sees (each worker's own is one level down)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(folder: Path, build) -> Path:
    """`folder`, made by `build(folder)` once per test run rather than once per xdist worker: the first
    worker to need it builds it under a file lock while the other waits, then both use it. Tests only
    read these folders (they copy what they change), which is what makes sharing them safe."""
    from filelock import FileLock

    done = folder.parent / f".{folder.name}.built"
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build in the other worker left
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def toy(tmp_path_factory):
    """A 32x32 toy-game store and a tiny AE trained on it, shared by the tests."""
    def build(root: Path) -> None:
        cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "4000", "--seed", "1",
            "--out", root / "store", check=True)
        cli(*TOY_AE, "--data", root / "store", "--out", root / "ae", check=True)

    return built_once(shared_temp(tmp_path_factory) / "wm", build)


@pytest.fixture(scope="session")
def toy_model(toy):
    """The tiny world model of the Done-when: 600 steps through `gamengen train`."""
    def build(run: Path) -> None:
        cli("train", "--data", toy / "store", "--ae", toy / "ae", "--out", run, "--preset", "tiny",
            "--checkpoint-every", "10", "--sample-every", "300", "--steps", "600", check=True)

    return built_once(toy / "run", build) / "model"


os.environ.setdefault("PYTHONUNBUFFERED", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI does: no spinning threads on shared cores


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("GAMENGEN_REQUIRE_BROWSER"),
                                   reason="Debian chromium is not installed (.ci/run installs it)")


class Server:
    """`gamengen ARGS --port 0 --no-open` in a subprocess; the URL is read from what it prints."""

    def __init__(self, *args, ready: str = "player"):
        self.proc = subprocess.Popen([sys.executable, "-m", "gamengen", *map(str, args), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline, lines = time.time() + 300, []
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.search(r"(http://\S+)", line)
            if m and ready in line:
                self.url = m.group(1)
                self.base, self.token = self.url.split("/?token=")
                self.ws = self.base.replace("http://", "ws://") + "/ws?token=" + self.token
                return
        self.proc.kill()
        raise AssertionError("server did not start:\n" + "".join(lines))

    @property
    def origin(self) -> str:
        return self.base

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out


CLIP_STEPS = 60  # the clip model's training steps in clip_run


@pytest.fixture(scope="session")
def clip_run(tmp_path_factory) -> Path:
    """A store, its clip dataset, a 2D AE, a codec (`clip train-vae`) and a clip model (`clip train`)."""
    from gamengen.train.autoencoder import AETrainConfig, train_autoencoder

    def build(root: Path) -> None:
        cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "1500", "--seed", "1",
            "--out", root / "store", check=True)
        cli("curate", "--from", root / "store", "--out", root / "clips", "--min-seconds", "2", "--min-motion", "0",
            "--max-windows", "3", check=True)
        train_autoencoder(root / "store", root / "ae", AETrainConfig(preset="tiny", steps=60, decoder_steps=0,
                                                                     batch_size=16, learning_rate=3e-3), warn=print)
        cli("clip", "train-vae", "--data", root / "store", "--ae", root / "ae", "--out", root / "vae", "--preset", "tiny",
            "--steps", "20", "--batch-size", "4", "--learning-rate", "3e-3", check=True)
        res = cli("clip", "train", "--data", root / "clips", "--codec", root / "vae" / "model", "--out", root / "run",
                  "--preset", "tiny", "--steps", CLIP_STEPS, "--checkpoint-every", "20", check=True)
        assert f"step {CLIP_STEPS}" in res.stdout, res.stdout

    return built_once(shared_temp(tmp_path_factory) / "clip", build)


DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


def save_screenshot(page, tmp_path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name))
    if os.environ.get("GAMENGEN_DOCS_SCREENSHOTS"):  # refresh the committed pictures
        shutil.copy(tmp_path / name, DOCS_IMAGES / name)


INSTRUCT_STEPS = 12  # the InstructNet's training steps in instruct


@pytest.fixture(scope="session")
def instruct(clip_run) -> Path:
    """An InstructNet trained INSTRUCT_STEPS steps beside clip_run's model, with Canny prompts."""
    def build(out: Path) -> None:
        res = cli("clip", "train-instruct", "--model", clip_run / "run" / "model", "--data", clip_run / "clips",
                  "--out", out, "--steps", INSTRUCT_STEPS, "--batch-size", 4, "--checkpoint-every", 5,
                  "--prompt-kind", "canny", check=True)
        assert f"step {INSTRUCT_STEPS}" in res.stdout, res.stdout

    return built_once(clip_run / "instruct", build)


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "GAMENGEN_REQUIRE_BROWSER is set but chromium is missing"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()
