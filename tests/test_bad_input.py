"""Bad input: one line saying what is wrong and how to fix it, exit code 2, nothing changed on disk."""

import os
import shutil

import pytest

from conftest import cli, snapshot


def assert_refused(res, *words):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and "fix:" in lines[0] and "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def record(out, env="toy:cursor", *extra):
    return cli("record", "--env", env, "--steps", "50", "--out", out, *extra)


def test_unknown_env_id(tmp_path):
    assert_refused(record(tmp_path / "s", "doom:E1M1"), "unknown env id")
    assert not (tmp_path / "s").exists()


def test_unwritable_output_folder(tmp_path):
    if os.geteuid() == 0:
        target = "/proc/gamengen-cannot-write-here/store"  # root ignores file modes; /proc refuses everyone
    else:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = ro / "store"
    assert_refused(record(target), "cannot")


@pytest.mark.parametrize("extra, words", [
    (("--env", "vizdoom:scenario/basic"), "env"),
    (("--resolution", "320x240"), "resolution"),
    (("--frame-skip", "2"), "frame skip"),
])
def test_existing_store_with_other_data_is_not_mixed(toy_store, tmp_path, extra, words):
    store = tmp_path / "s"
    shutil.copytree(toy_store, store)
    before = snapshot(store)
    res = cli("record", "--env", "toy:cursor", "--steps", "50", "--out", store, *extra)
    assert_refused(res, words)
    assert snapshot(store) == before


def test_existing_store_with_other_action_set(tmp_path):
    store = tmp_path / "s"
    cli("record", "--env", "atari:Breakout", "--steps", "30", "--out", store, check=True)
    spec = (store / "store.json").read_text().replace("atari:Breakout", "atari:Pong")
    (store / "store.json").write_text(spec)  # same env name as Pong, but Breakout's 4 actions
    before = snapshot(store)
    assert_refused(cli("record", "--env", "atari:Pong", "--steps", "30", "--out", store), "action set")
    assert snapshot(store) == before


def test_corrupt_manifest_line(toy_store, tmp_path):
    store = tmp_path / "s"
    shutil.copytree(toy_store, store)
    manifest = store / "s7-w0" / "manifest.jsonl"
    lines = manifest.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    manifest.write_text("\n".join(lines) + "\n")
    before = snapshot(store)
    for args in (("data", "verify", store), ("data", "info", store), ("data", "preview", store, "--out", tmp_path / "p.mp4")):
        assert_refused(cli(*args), "manifest.jsonl line 2")
    assert_refused(cli("record", "--env", "toy:cursor", "--steps", "1500", "--workers", "2", "--seed", "7", "--out", store),
                   "line 2")
    assert snapshot(store) == before


def test_store_path_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("not a store")
    for args in (("data", "verify", f), ("data", "info", f)):
        assert_refused(cli(*args), "is a file")
    assert_refused(record(f), "is a file")
    assert f.read_text() == "not a store"


def test_other_bad_values(tmp_path, toy_store):
    assert_refused(record(tmp_path / "a", "toy:cursor", "--resolution", "wide"), "resolution")
    assert_refused(record(tmp_path / "b", "toy:cursor", "--policy", "genius"), "policy")
    assert_refused(cli("record", "--env", "toy:cursor", "--out", tmp_path / "c"), "--steps")
    assert_refused(cli("data", "preview", toy_store, "--episode", "nope", "--out", tmp_path / "p.mp4"), "nope")
    assert_refused(cli("data", "preview", toy_store, "--out", tmp_path / "p.avi"), ".mp4")
    assert_refused(cli("data", "verify", tmp_path), "not a trajectory store")
    assert_refused(cli("train-ae", "--data", toy_store, "--out", tmp_path / "d", "--keep-checkpoints", "0"),
                   "--keep-checkpoints")
    assert not any((tmp_path / n).exists() for n in "abcd")
