"""The store's own guarantees: exact round trip, crash recovery, corruption detection."""

import json
import os
import shutil

import numpy as np
import pytest
import zarr

from conftest import cli
from gamengen.data.store import FRAME_CHUNK, ShardWriter, Store, StoreSpec
from gamengen.envs import ActionSet

SPEC = StoreSpec("toy:cursor", 24, 32, ActionSet(("A", "B", "C")), 1, 30.0, ("x",), ("automap",))


def write_episode(shard, eid, T, seed):
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (T, 24, 32, 3), dtype=np.uint8)
    extra = rng.integers(0, 256, (T, 24, 32, 3), dtype=np.uint8)
    w = shard.begin(eid, {"policy": "test"})
    for t in range(T):
        w.add(frames[t], t % 3, float(t), False, t == T - 1, {"x": t * 0.5}, {"automap": extra[t]})
    return w.finish(), frames, extra


@pytest.mark.parametrize("T", [1, FRAME_CHUNK - 1, FRAME_CHUNK, FRAME_CHUNK + 1, 1100])
def test_round_trip_is_exact_through_zarr(tmp_path, T):
    store = Store.create_or_open(tmp_path / "s", SPEC)
    shard = ShardWriter(store, "x", {"k": 1})
    rec, frames, extra = write_episode(shard, "e0", T, T)
    shard.close()
    g = zarr.open_group(tmp_path / "s" / rec.path, mode="r")  # plain zarr, no gamengen reader
    assert np.array_equal(g["frames"][:], frames) and np.array_equal(g["automap"][:], extra)
    assert g["actions"][:].tolist() == [t % 3 for t in range(T)]
    assert g["truncated"][:].tolist() == [t == T - 1 for t in range(T)]
    assert np.allclose(g["game_variables"][:, 0], np.arange(T) * 0.5)
    assert cli("data", "verify", tmp_path / "s").returncode == 0


def test_crash_leftovers_are_cleaned_or_listed(tmp_path):
    store = Store.create_or_open(tmp_path / "s", SPEC)
    shard = ShardWriter(store, "x", {"k": 1})
    write_episode(shard, "e0", 40, 0)
    rec1, _, _ = write_episode(shard, "e1", 40, 1)
    shard.close()
    manifest = tmp_path / "s" / "x" / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    # a kill between the rename and the manifest append, and a kill in the middle of writing
    manifest.write_text(lines[0] + "\n")
    os.makedirs(tmp_path / "s" / "x" / ".tmp-e2" / "frames")
    assert [r.id for r in Store.open(tmp_path / "s").episodes()] == ["e0"]  # readers see only whole, listed ones
    shard = ShardWriter(store, "x", {"k": 1})  # what a resumed recorder does first
    shard.close()
    assert [r.id for r in shard.records] == ["e0", "e1"]
    assert shard.records[1].sha256 == rec1.sha256
    assert not (tmp_path / "s" / "x" / ".tmp-e2").exists()


def test_flipped_byte_in_a_chunk_is_reported(tmp_path):
    store = Store.create_or_open(tmp_path / "s", SPEC)
    shard = ShardWriter(store, "x", {"k": 1})
    rec, _, _ = write_episode(shard, "e0", 100, 3)
    shard.close()
    chunk = tmp_path / "s" / rec.path / "frames" / "c.1.0.0.0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    res = cli("data", "verify", tmp_path / "s")
    assert res.returncode == 1
    assert "x/e0" in res.stdout and "sha256 mismatch" in res.stdout
    # the chunk's crc32c catches it on any read, even if the manifest hash were rewritten to match
    assert "unreadable" in res.stdout


def test_two_writers_cannot_share_a_shard(tmp_path):
    from gamengen.errors import UserError

    store = Store.create_or_open(tmp_path / "s", SPEC)
    first = ShardWriter(store, "x", {"k": 1})
    with pytest.raises(UserError, match="another recorder"):
        ShardWriter(store, "x", {"k": 1})
    first.close()


def test_shards_from_two_machines_merge_by_copying(tmp_path, toy_store):
    merged = tmp_path / "merged"
    shutil.copytree(toy_store, merged)
    other = tmp_path / "other"
    cli("record", "--env", "toy:cursor", "--steps", "300", "--out", other, "--seed", "99", check=True)
    shutil.copytree(other / "s99-w0", merged / "s99-w0")
    info = json.loads(cli("data", "info", merged, "--json", check=True).stdout)
    assert info["frames"] == 1500 + 300 and "s99-w0" in info["shards"]
    assert cli("data", "verify", merged).returncode == 0


def test_a_snapshot_is_frozen_while_the_source_grows(tmp_path):
    src = Store.create_or_open(tmp_path / "src", SPEC)
    shard = ShardWriter(src, "w0", {"policy": "test"})
    write_episode(shard, "e0", 70, 0)
    w = shard.begin("e1", {"policy": "test"})  # being written while the snapshot is taken
    w.add(np.zeros((24, 32, 3), np.uint8), 0, 0.0, False, False, {"x": 0.0}, {"automap": np.zeros((24, 32, 3), np.uint8)})
    res = cli("data", "snapshot", tmp_path / "src", "--out", tmp_path / "snap", check=True)
    assert "1 episodes, 70 frames" in res.stdout
    w.finish()
    write_episode(shard, "e2", 5, 2)
    shard.close()
    assert [r.id for r in Store.open(tmp_path / "snap").episodes()] == ["e0"]
    assert len(Store.open(tmp_path / "src").episodes()) == 3
    assert cli("data", "verify", tmp_path / "snap").returncode == 0
    again = cli("data", "snapshot", tmp_path / "src", "--out", tmp_path / "snap")
    assert again.returncode == 2 and "already exists" in again.stderr
