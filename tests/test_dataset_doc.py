"""docs/dataset.md is complete: a store written from it without gamengen reads back exactly.

docs/examples/write_store_plain.py imports only numpy and zarr. If gamengen verifies its output and
returns the very frames and actions it wrote, with the documented time indexing, then the document
(which the script follows) says everything a writer needs. The document's worked example of a
training window is checked against the latent windows training reads.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from gamengen.data.latents import LatentCache, LatentWindows
from gamengen.data.store import ShardWriter, Store, StoreSpec, tree_sha256
from gamengen.data.windows import FrameWindows
from gamengen.envs import ActionSet

DOC = Path(__file__).resolve().parents[1] / "docs" / "dataset.md"
EXAMPLE = DOC.parent / "examples" / "write_store_plain.py"


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
    windows = FrameWindows(store, context=N)
    no_action = len(ex.STORE_JSON["action_set"]["names"])
    assert windows.n_actions == no_action
    assert len(windows) == sum(L - 1 for L in ex.LENGTHS)  # the last action's frame is not stored
    for i in range(len(windows)):
        w = windows[i]
        ep = episodes[w.episode]
        n, k = w.n, min(N, w.n)  # k real context steps
        assert np.array_equal(w.target, ep["frames"][n])
        assert np.array_equal(w.context[N - k :], ep["frames"][n - k : n])
        assert np.array_equal(w.actions[N - k :], ep["actions"][n - k : n])
        assert w.context_mask.tolist() == [False] * (N - k) + [True] * k
        assert (w.context[: N - k] == ep["frames"][0]).all() and (w.actions[: N - k] == no_action).all()
    assert windows[0].n == 1 and windows[0].context_mask.sum() == 1


def documented_example() -> tuple[dict, list[dict]]:
    """The worked example of docs/dataset.md's "Training windows": its settings and its table rows."""
    text = DOC.read_text()
    text = text[text.index("A worked example:") :]
    head = text[: text.index("|")]
    setting = {k: int(re.search(rf"\b{k} = (\d+)", head).group(1)) for k in ("N", "T", "n", "n_actions")}
    setting["names"] = [a.strip() for a in re.search(r"action set is\s+`([^`]*)`", head).group(1).split(",")]
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if cells[0] in ("context slot", "") or set(cells[0]) <= set("-"):
            continue
        slot, step, frame, action, mask = cells
        if not action:
            act = None  # the target's row
        elif "no action" in action:
            act = ("no action", int(action.split(",")[0]))  # "3, no action"
        else:
            act = ("actions", int(re.fullmatch(r"actions\[(\d+)\]", action).group(1)))
        rows.append({"slot": slot, "step": int(step.split(",")[0]), "padding": "padding" in step,
                     "frame": int(re.fullmatch(r"frames\[(\d+)\]", frame).group(1)), "action": act,
                     "mask": {"True": True, "False": False, "": None}[mask]})
    return setting, rows


def test_the_documented_window_is_what_training_reads(tmp_path):
    """The doc's worked example, on a store with that episode, through the real parts training uses:
    a (tiny, untrained) autoencoder, the latent cache and LatentWindows; and through FrameWindows."""
    from gamengen.models.autoencoder import AE_PRESETS, FrameCodec, build_autoencoder

    ex, rows = documented_example()
    N, T, n, no_action = ex["N"], ex["T"], ex["n"], ex["n_actions"]
    assert no_action == len(ex["names"])  # the "no action" token is one past the stored actions
    context, target = rows[:-1], rows[-1]
    assert [r["slot"] for r in context] == [str(j) for j in range(N)] and target["slot"] == "target"
    assert target["step"] == target["frame"] == n and target["action"] is None and target["mask"] is None
    # the table's steps are n-N..n-1, padded exactly where they fall before the episode start
    assert [r["step"] for r in context] == list(range(n - N, n))
    assert [r["padding"] for r in context] == [s < 0 for s in range(n - N, n)]

    H = W = 16
    spec = StoreSpec("doc:example", H, W, ActionSet(tuple(ex["names"])), 1, 30.0)
    store = Store.create_or_open(tmp_path / "store", spec)
    shard = ShardWriter(store, "s0", {})
    rng = np.random.default_rng(0)
    stored = []
    for eid, length in (("e0", T), ("e1", 3)):  # the documented episode first, then another
        frames = rng.integers(0, 256, (length, H, W, 3), dtype=np.uint8)  # every frame distinct
        actions = np.array([(t * 2 + 1) % no_action for t in range(length)], np.int64)
        w = shard.begin(eid, {})
        for t in range(length):
            w.add(frames[t], int(actions[t]), 0.0, False, t == length - 1, {})
        w.finish()
        stored.append((frames, actions))
    shard.close()
    frames, actions = stored[0]
    records = store.episodes()
    assert [r.length for r in records] == [T, 3]

    torch.manual_seed(0)
    codec = FrameCodec(build_autoencoder(AE_PRESETS["tiny"]).eval(), H, W)
    cache = LatentCache(codec, tmp_path / "latents")
    cache.build(store, records)
    latents = np.asarray(cache.load(records[0]), np.float32)
    assert all(not np.array_equal(latents[0], latents[t]) for t in range(1, T))  # padding is visible

    lw, fw = LatentWindows(store, cache, records, N), FrameWindows(store, N)
    assert len(lw) == len(fw) == (T - 1) + (3 - 1)
    assert list(lw.starts) == [0, T - 1, T + 1] and lw.n_actions == no_action
    i = n - 1  # the documented window's number: the first episode's targets are n = 1 .. T-1
    assert fw.locate(i) == lw.locate(i) == (0, n)

    want_actions = [no_action if r["action"][0] == "no action" else int(actions[r["action"][1]]) for r in context]
    for r in context:
        if r["action"][0] == "no action":
            assert r["action"][1] == no_action and r["padding"] and not r["mask"]
        else:
            assert r["action"][1] == r["step"] and r["mask"]  # a real step's own action
    ctx, acts, tgt = lw[i]
    assert ctx.dtype == tgt.dtype == np.float32 and acts.dtype == np.int64 and ctx.shape == (N, *codec.latent_shape())
    np.testing.assert_array_equal(ctx, latents[[r["frame"] for r in context]])
    np.testing.assert_array_equal(tgt, latents[target["frame"]])
    assert acts.tolist() == want_actions

    w = fw[i]
    assert (w.episode, w.n) == (records[0].path, n)
    np.testing.assert_array_equal(w.context, frames[[r["frame"] for r in context]])
    np.testing.assert_array_equal(w.target, frames[target["frame"]])
    assert w.actions.tolist() == want_actions and w.context_mask.tolist() == [r["mask"] for r in context]
    # the frame window, encoded, is the latent window (up to the cache's float16)
    np.testing.assert_allclose(codec.encode(w.context).numpy(), ctx, rtol=1e-2, atol=1e-2)

    # the rest of the paragraph: window n = T-1 has no padding; numbering runs on into the next episode
    ctx, acts, tgt = lw[T - 2]
    np.testing.assert_array_equal(ctx, latents[T - 1 - N : T - 1])
    assert acts.tolist() == actions[T - 1 - N : T - 1].tolist() and fw[T - 2].context_mask.all()
    w = fw[T - 1]
    assert (w.episode, w.n) == (records[1].path, 1)
    assert w.actions.tolist() == [no_action] * (N - 1) + [int(stored[1][1][0])]

    # the batched reader training uses on GPUs gives the same windows, all of them at once
    from gamengen.data.latents import DeviceWindows

    every = np.arange(len(lw))
    bctx, bacts, btgt = DeviceWindows(lw, "cpu").batch(every)
    for i in every:
        ctx, acts, tgt = lw[int(i)]
        np.testing.assert_array_equal(bctx[i].numpy(), ctx)
        np.testing.assert_array_equal(btgt[i].numpy(), tgt)
        assert bacts[i].tolist() == acts.tolist()


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

