"""docs/dataset.md is complete: a store written from it without gamengen reads back exactly.

docs/examples/write_store_plain.py imports only numpy and zarr. If gamengen verifies its output and
returns the very frames and actions it wrote, with the documented time indexing, then the document
(which the script follows) says everything a writer needs.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from gamengen.data.store import Store, tree_sha256
from gamengen.data.windows import WindowSampler

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "write_store_plain.py"


def load_example():
    """The example as a module, to replay its game: it is a standalone script, not part of gamengen."""
    spec = importlib.util.spec_from_file_location("write_store_plain", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_plain(out: Path, seed: int = 0) -> None:
    res = subprocess.run([sys.executable, str(EXAMPLE), str(out), str(seed)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def gamengen(*args) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, as a user runs it."""
    if importlib.util.find_spec("gamengen.__main__") is not None:
        cmd = [sys.executable, "-m", "gamengen"]
    else:
        cmd = [os.path.join(os.path.dirname(sys.executable), "gamengen")]
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_a_store_written_without_gamengen_reads_back_exactly(tmp_path):
    ex = load_example()
    assert "gamengen" not in "".join(line for line in EXAMPLE.read_text().splitlines() if "import" in line)
    out = tmp_path / "store"
    write_plain(out)

    res = gamengen("data", "verify", out)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    res = gamengen("data", "info", out, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    info = json.loads(res.stdout)
    assert info["frames"] == sum(ex.LENGTHS) and info["episodes"] == len(ex.LENGTHS)
    assert info["actions"] == ["LEFT", "STAY", "RIGHT"] and info["unlisted_folders"] == 0

    store = Store.open(out)
    episodes = {}  # the example's episode index -> what it wrote, regenerated from its seed
    for rec in store.episodes():
        i = rec.meta["index"]
        episodes[rec.path] = ex.play(rec.meta["seed"] * 1000 + i, ex.LENGTHS[i])
        g = store.open_episode(rec)
        for name, want in episodes[rec.path].items():
            got = g[name][:]
            assert got.dtype == want.dtype and np.array_equal(got, want), (rec.path, name)
        # Time indexing, from the stored data and the game rule alone: actions[t] turns frames[t]
        # into frames[t+1], and game_variables[t] describe frames[t].
        x, y = (int(v) for v in g["game_variables"][0])
        state = (x, y, 3)
        for t in range(rec.length - 1):
            state, reward = ex.step(state, int(g["actions"][t]))
            assert np.array_equal(g["frames"][t + 1], ex.render(*state[:2])), (rec.path, t)
            assert g["rewards"][t] == reward and tuple(g["game_variables"][t + 1]) == state[:2]

    N = 4
    sampler = WindowSampler(store, context=N)
    assert len(sampler) == sum(L - 1 for L in ex.LENGTHS)  # the last action's frame is not stored
    for i in range(len(sampler)):
        w = sampler[i]
        ep = episodes[w.episode]
        n, k = w.n, min(N, w.n)  # k real context steps
        assert np.array_equal(w.target, ep["frames"][n])
        assert np.array_equal(w.frames[N - k :], ep["frames"][n - k : n])
        assert np.array_equal(w.actions[N - k :], ep["actions"][n - k : n])
        assert w.context_mask.tolist() == [False] * (N - k) + [True] * k
        assert (w.frames[: N - k] == ep["frames"][0]).all() and (w.actions[: N - k] == 0).all()
    assert sampler[0].n == 1 and sampler[0].context_mask.sum() == 1


def test_shards_of_separate_writers_merge_by_copying(tmp_path):
    ex = load_example()
    a, b = tmp_path / "a", tmp_path / "b"
    write_plain(a, seed=0)
    write_plain(b, seed=1)  # as if on another machine
    shutil.copytree(b / "plain-s1", a / "plain-s1")
    # a folder left by a killed writer is not in any manifest, so readers ignore it
    (a / "plain-s1" / ".tmp-e000002" / "frames").mkdir(parents=True)
    (a / "plain-s1" / ".tmp-e000002" / "frames" / "c.0.0.0.0").write_bytes(b"half an episode")
    write_plain(a, seed=0)  # resume: every episode is listed already, nothing is added

    res = gamengen("data", "verify", a)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    info = json.loads(gamengen("data", "info", a, "--json").stdout)
    assert info["shards"] == ["plain-s0", "plain-s1"] and info["episodes"] == 2 * len(ex.LENGTHS)
    assert info["frames"] == 2 * sum(ex.LENGTHS) and info["unlisted_folders"] == 1
    assert len((a / "plain-s0" / "manifest.jsonl").read_text().splitlines()) == len(ex.LENGTHS)


def test_the_documented_hash_order_is_gamengens(tmp_path):
    """Paths sort component by component, so `a/b` comes before `a.b` (plain string order differs)."""
    ex = load_example()
    folder = tmp_path / "ep"
    (folder / "a").mkdir(parents=True)
    for rel, data in [("a/b", b"1"), ("a.b", b"22"), ("a-b", b""), (".hidden", b"x"), ("zarr.json", b"{}")]:
        (folder / rel).write_bytes(data)
    assert ex.tree_sha256(str(folder)) == tree_sha256(folder)
