"""`gamengen curate` (docs/curation.md): OGameData's curation (GameGen-X §3.2) of a video folder and
of trajectory stores, run through the real CLI on videos written here and on a real ViZDoom recording."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import cli, snapshot

FPS = 10
W, H = 64, 48
CUT = 60  # 01_two_scenes.mp4: the first frame of its second scene


def texture(seed: int, width: int = 400) -> np.ndarray:
    """(H, width, 3) float in [0, 1]: smooth noise of several scales, equalised to a uniform spread."""
    rng = np.random.default_rng(seed)
    t = sum(cv2.resize(rng.random((max(2, H // n), width // n, 3)).astype(np.float32), (width, H),
                       interpolation=cv2.INTER_CUBIC) * n ** 0.5 for n in (2, 4, 8, 16))
    rank = t.argsort(axis=None).argsort().reshape(t.shape)
    return rank / rank.max()


def sliding(tex: np.ndarray, n: int, step: int, x0: int) -> list[np.ndarray]:
    """n frames of a W-wide window over ``tex`` whose left edge moves ``step`` px per frame: with
    step > 0 the window moves right over the texture, so the content moves left in the frames."""
    t = (255 * tex).astype(np.uint8) if tex.dtype != np.uint8 else tex
    return [t[:, x0 + step * i:x0 + step * i + W] for i in range(n)]


def write_video(path: Path, frames, codec: str = "libx264", pixfmt: str = "yuv420p") -> None:
    import imageio.v2 as imageio

    extra = {"ffmpeg_params": ["-crf", "18"]} if codec == "libx264" else {}
    with imageio.get_writer(path, fps=FPS, codec=codec, macro_block_size=2, pixelformat=pixfmt, **extra) as w:
        for f in frames:
            w.append_data(np.ascontiguousarray(f))


def make_videos(folder: Path) -> None:
    """Six files of 6-12 s at 10 fps, 64x48; the comments say what curation must make of each."""
    folder.mkdir(parents=True)
    # two scenes, a hard cut at frame 60: content moving left (camera pans right), then right (pans left)
    write_video(folder / "01_two_scenes.mp4", sliding(texture(1), CUT, 1, 100) + sliding(texture(2), 60, -1, 250))
    shutil.copy(folder / "01_two_scenes.mp4", folder / "02_copy.mp4")  # near-duplicates of 01's clips
    write_video(folder / "03_static.mp4", sliding(texture(3), 60, 0, 100))  # a still picture: too static
    # moving 8-px blocks of luma 0-28 (mean 14): dark, yet enough contrast to pass the motion filter
    # (lossless FFV1 in .mkv, because H.264 smooths such dark detail away)
    blocks = np.kron(np.random.default_rng(4).random((H // 8, 50, 1)), np.ones((8, 8, 3)))
    write_video(folder / "04_dark.mkv", sliding((28 * blocks).astype(np.uint8), 60, 1, 100), codec="ffv1", pixfmt="bgr0")
    # the window moves left 2 px per frame, so the content moves right: the camera pans left
    write_video(folder / "05_pan.mp4", sliding(texture(5), 60, -2, 200))
    (folder / "06_broken.mp4").write_bytes(np.random.default_rng(6).integers(0, 256, 4000, np.uint8).tobytes())


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def assert_counts_add_up(report: dict) -> None:
    rows = {r["stage"]: r for r in report["stages"]}
    candidates = rows["windows"]["out"]
    clip_drops = sum(rows[s]["dropped"] for s in ("motion", "quality", "dedup"))
    assert candidates == report["kept"] + clip_drops
    assert report["dropped_clips"] == clip_drops
    for a, b in zip(report["stages"], report["stages"][1:]):
        assert b["in"] == a["out"], (a, b)
    for r in report["stages"]:
        assert r["dropped"] == sum(r["reasons"].values())
        if r["unit"] == r["out_unit"]:
            assert r["in"] == r["out"] + r["dropped"], r


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("videos") / "in"
    make_videos(folder)
    return folder


@pytest.fixture(scope="module")
def curated(videos) -> Path:
    out = videos.parent / "clips"
    res = cli("curate", "--from", videos, "--out", out, "--fps", FPS, "--resolution", f"{W}x{H}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    return out


def test_a_video_folder_is_split_filtered_deduplicated_and_labelled(curated):
    report = json.loads((curated / "report.json").read_text())
    clips, dropped = read_jsonl(curated / "clips.jsonl"), read_jsonl(curated / "dropped.jsonl")
    kept = {}
    for c in clips:
        kept.setdefault(c["source"]["name"], []).append(c)
    by_source = {}
    for d in dropped:
        by_source.setdefault(d["source"], []).append(d)

    # scene split: the hard cut is found within one frame
    scenes = [s for s in report["scenes"] if s["source"] == "01_two_scenes.mp4"]
    assert len(scenes) == 2 and abs(scenes[1]["first_frame"] - CUT) <= 1, scenes
    # both scenes are kept, with the pan direction of their content: left-moving content = camera pans right
    assert {c["scene"]: c["camera"]["flow"] for c in kept["01_two_scenes.mp4"]} == {0: "pan right", 1: "pan left"}
    assert {c["camera"]["flow"] for c in kept["05_pan.mp4"]} == {"pan left"}
    assert all(c["scores"]["dx"] > 0 for c in kept["05_pan.mp4"])  # content moving right: positive mean flow
    # the static video goes at the motion stage, the dark one at the quality stage, the copy as duplicates
    for name, stage, reason in (("03_static.mp4", "motion", "too static"), ("04_dark.mkv", "quality", "dark")):
        assert name not in kept and by_source[name], name
        assert {(d["stage"], d["reason"]) for d in by_source[name]} == {(stage, reason)}, by_source[name]
    # each clip of the copy duplicates the clip of the original at the same time, at distance 0
    assert "02_copy.mp4" not in kept
    originals = {c["start_s"]: c["index"] for c in kept["01_two_scenes.mp4"]}
    assert {(d["stage"], d["reason"]) for d in by_source["02_copy.mp4"]} == {
        ("dedup", f"near-duplicate of clip {i} (distance 0)") for i in originals.values()}
    assert all(d["reason"] == f"near-duplicate of clip {originals[d['start_s']]} (distance 0)"
               for d in by_source["02_copy.mp4"])
    # the undecodable file is skipped with one line, and the run goes on
    assert [(d["stage"], d["reason"]) for d in by_source["06_broken.mp4"]] == [("decode", "cannot be opened as a video")]
    assert_counts_add_up(report)
    assert {r["stage"]: r["dropped"] for r in report["stages"]} == {
        "decode": 1, "frame rate": 0, "scene split": 0, "length": 0, "windows": 0, "motion": 3, "quality": 3, "dedup": 6}
    # video captions fill the same ten fields, from what is known, and say what is not
    fields = clips[-1]["captions"]["fields"]
    assert list(fields) == ["Summary", "Game_Meta", "Character", "Frame_Desc", "Atmosphere",
                            "Env", "Trans", "Light", "Act", "Misc"]
    assert "05_pan.mp4" in fields["Summary"] and "pans left" in fields["Summary"] and "unknown" in fields["Summary"]
    assert fields["Character"].startswith("Unknown") and "pan left" in fields["Misc"]
    assert clips[-1]["captions"]["caption"].startswith("Summary: ")
    for name in ("report.md", "figures/hist_motion.png", "figures/hist_sharpness.png", "figures/hist_luma.png",
                 "figures/contact_kept.png", "figures/contact_dropped.png"):
        assert (curated / name).stat().st_size > 0, name


def test_the_clip_dataset_round_trips_with_the_frames_of_the_video(curated, videos):
    from gamengen.curate.dataset import ClipDataset

    ds = ClipDataset.open(curated)
    assert len(ds) == json.loads((curated / "report.json").read_text())["kept"] == 9
    assert (ds.clip_frames, ds.height, ds.width, ds.fps) == (17, H, W, FPS)
    cap = cv2.VideoCapture(str(videos / "05_pan.mp4"))
    decoded = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        decoded.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
    for i in range(len(ds)):
        frames, meta = ds.frames(i), ds.meta(i)
        assert frames.shape == (17, H, W, 3) and frames.dtype == np.uint8
        assert ds.keys(i) is None  # a video file records no keys
        if meta["source"]["name"] == "05_pan.mp4":  # same rate and size: the very frames of the file
            np.testing.assert_array_equal(frames, np.stack(decoded)[meta["source"]["frames"]])


def test_the_same_input_gives_the_same_clips(curated, videos, tmp_path):
    cli("curate", "--from", videos, "--out", tmp_path / "again", "--fps", FPS, "--resolution", f"{W}x{H}", check=True)
    assert (tmp_path / "again" / "clips.jsonl").read_bytes() == (curated / "clips.jsonl").read_bytes()
    assert (tmp_path / "again" / "dropped.jsonl").read_bytes() == (curated / "dropped.jsonl").read_bytes()


def test_an_existing_out_folder_is_refused_unless_overwrite(videos, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    res = cli("curate", "--from", videos, "--out", out, "--fps", FPS)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "--overwrite" in res.stderr
    assert snapshot(tmp_path) == before
    cli("curate", "--from", videos, "--out", out, "--fps", FPS, "--overwrite", check=True)
    assert not (out / "keep.txt").exists() and (out / "dataset.json").exists()


@pytest.mark.parametrize("case", ["missing", "file", "no videos", "only broken", "bad option", "fps above"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(case, videos, tmp_path):
    src = tmp_path / "src"
    args = []
    if case == "file":
        src.write_text("not a folder")
    elif case == "no videos":
        src.mkdir()
        (src / "notes.txt").write_text("hello")
    elif case == "only broken":  # every source dropped: the message names the stage that did it
        src.mkdir()
        shutil.copy(videos / "06_broken.mp4", src / "a.mp4")
    elif case == "bad option":
        src = videos
        args = ["--min-seconds", "20", "--max-seconds", "16"]
    elif case == "fps above":  # a video slower than --fps is dropped; with nothing left, exit 2
        src.mkdir()
        shutil.copy(videos / "05_pan.mp4", src / "a.mp4")
        args = ["--fps", "24"]
    before = snapshot(tmp_path)
    res = cli("curate", "--from", src, "--out", tmp_path / "deep" / "out", *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
    assert snapshot(tmp_path) == before  # not even the parent folder of --out
    if case == "only broken":
        assert "decode: 1 source(s) in, 0 source(s) out (1 cannot be opened as a video)" in lines[0]
    if case == "fps above":
        assert "frame rate" in lines[0] and "below --fps 24" in lines[0]


# -- trajectory stores -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def doom(tmp_path_factory) -> Path:
    """A real ViZDoom recording with events and labels (for full captions): one 24 s episode at 17.5 fps."""
    store = tmp_path_factory.mktemp("doom") / "store"
    cli("record", "--env", "vizdoom:freedoom1/E1M1", "--steps", "420", "--max-episode-steps", "420", "--frame-skip",
        "2", "--events", "--labels", "--seed", "3", "--out", store, check=True)
    return store


def test_a_doom_store_gives_clips_with_its_captions_pose_labels_and_frames(doom, tmp_path):
    from gamengen.curate.dataset import ClipDataset
    from gamengen.curate.sources import event_frames
    from gamengen.data.captions import caption, caption_text, instruction_text
    from gamengen.data.store import Store

    out = tmp_path / "clips"
    cli("curate", "--from", doom, "--out", out, check=True)
    store = Store.open(doom)
    (rec,) = store.episodes()
    episode = store.open_episode(rec)
    ds = ClipDataset.open(out)
    report = json.loads((out / "report.json").read_text())
    assert len(ds) == report["kept"] >= 10
    assert (ds.clip_frames, ds.height, ds.width, ds.fps) == (17, 120, 160, 17.5)
    for i in range(len(ds)):
        meta = ds.meta(i)
        start, end = meta["source"]["steps"]
        assert meta["source"]["sha256"] == rec.sha256 and meta["source"]["name"] == rec.path
        fields = caption(store, rec, start, end)  # the structured captions of data/captions.py, word for word
        assert meta["captions"] == {"fields": fields, "caption": caption_text(fields),
                                    "instruction": instruction_text(fields)}
        assert meta["camera"]["pose"] in ("static", "pan left", "pan right", "forward", "backward", "mixed")
        assert meta["camera"]["flow"] in ("static", "pan left", "pan right", "forward", "backward", "mixed")
        np.testing.assert_array_equal(ds.frames(i), np.asarray(episode["frames"][start:end]))  # store frames, unchanged
        # the keys held at each frame are the buttons of the action the store logged after it
        names, held = ds.keys(i)
        spec = store.spec.action_set
        assert names == list(spec.buttons)
        expect = np.asarray(spec.combos, np.float32)[np.asarray(episode["actions"][start:end], np.int64)]
        np.testing.assert_array_equal(held, expect)
    cam = report["camera"]
    assert cam["compared"] == len(ds) and 0 <= cam["agreement"] <= 1 and sum(cam["pose"].values()) == len(ds)
    # a scene is split at a 16 s maximum, and in-game events (a light change at step 108) are no cuts
    assert report["settings"]["max_frames"] == 280
    events = event_frames(store, rec)
    assert events and all(s["first_frame"] not in events for s in report["scenes"])
    assert_counts_add_up(report)


def synthetic_store(root: Path) -> Path:
    """A store written directly: 20 s at 10 fps of a panning texture; the player teleports at step 100
    (the picture goes on unchanged, so only the pose tells) and is dead from step 180."""
    from gamengen.data.store import ShardWriter, Store, StoreSpec
    from gamengen.envs.base import ActionSet

    spec = StoreSpec("toy:synthetic", H, W, ActionSet(("NOOP",)), 1, float(FPS),
                     ("HEALTH", "POSITION_X", "POSITION_Y", "ANGLE"))
    store = Store.create_or_open(root, spec)
    shard = ShardWriter(store, "s0", {})
    ep = shard.begin("e0", {})
    for t, frame in enumerate(sliding(texture(7, 500), 200, 2, 0)):
        x = 10.0 * t + (5000 if t >= 100 else 0)
        ep.add(frame, 0, 0.0, t == 199, False, {"HEALTH": 0.0 if t >= 180 else 100.0, "POSITION_X": x,
                                                  "POSITION_Y": 0.0, "ANGLE": 0.0})
    ep.finish()
    shard.close()
    return root


def test_a_store_is_cut_at_teleports_and_death_frames_are_dropped(tmp_path):
    store = synthetic_store(tmp_path / "store")
    out = tmp_path / "clips"
    cli("curate", "--from", store, "--out", out, "--max-windows", "5", check=True)
    report = json.loads((out / "report.json").read_text())
    assert [s["first_frame"] for s in report["scenes"]] == [0, 100]
    dead = [d for d in read_jsonl(out / "dropped.jsonl") if d["reason"] == "death"]
    assert dead and all(max(d["source_frames"]) >= 180 for d in dead)
    assert all(max(c["source"]["frames"]) < 180 for c in read_jsonl(out / "clips.jsonl"))
    assert_counts_add_up(report)


def test_window_placement_and_frame_fitting():
    from gamengen.curate.stages import fit, windows

    assert windows(60, 17) == [0, 22, 43]  # as many as fit, spread evenly, non-overlapping
    assert windows(17, 17) == [0] and windows(16, 17) == [] and windows(40, 17, most=1) == [11]
    for length in range(17, 300):
        starts = windows(length, 17)
        assert len(starts) == length // 17 and starts[-1] + 17 <= length
        assert all(b - a >= 17 for a, b in zip(starts, starts[1:]))
    wide = np.zeros((90, 160, 3), np.uint8)
    wide[:, 20:140] = 255  # the centre 4:3 part
    assert fit(wide, 60, 80).shape == (60, 80, 3) and fit(wide, 60, 80).min() == 255  # cropped, not squeezed


@pytest.mark.parametrize("native_fps", [10.0, 20.0])
def test_scenes_longer_than_the_maximum_are_cut_into_pieces_and_short_remainders_dropped(native_fps):
    from gamengen.curate.sources import Drop, Piece, SourceInfo, scan

    ratio = int(native_fps // FPS)
    tex = texture(8, 800)
    for seconds, forced, expect in (  # at 10 fps: pieces of 40..100 frames (4..10 s)
            (25.0, (), [("piece", 0, 100), ("piece", 100, 200), ("piece", 200, 250)]),  # 10 s pieces, 5 s remainder kept
            (23.0, (), [("piece", 0, 100), ("piece", 100, 200), ("drop", 200, 230)]),  # a 3 s remainder is dropped
            (15.0, (30,), [("drop", 0, 30), ("piece", 30, 130), ("drop", 130, 150)])):  # a cut at 3 s: short scene
        n = round(seconds * native_fps)
        frames = sliding(tex, n, 1, 0) if ratio == 1 else [f for f in sliding(tex, n // 2, 2, 0) for f in (f, f)]
        info = SourceInfo("synthetic", "video", native_fps, lambda: iter(frames), frozenset(c * ratio for c in forced))
        got = [("piece" if isinstance(x, Piece) else "drop", x.start, x.start + (len(x.frames) if isinstance(x, Piece)
                else x.frames)) for x in scan(info, 0, FPS, (H, W), 40, 100, 3.0)]
        assert got == expect, (native_fps, seconds, got)
        for x in scan(info, 0, FPS, (H, W), 40, 100, 3.0):
            if isinstance(x, Piece):  # target frame k of the grid is source frame k * ratio
                np.testing.assert_array_equal(x.src, (x.start + np.arange(len(x.frames))) * ratio)
            assert isinstance(x, (Piece, Drop))


def test_the_command_line_defaults_are_the_documented_thresholds():
    import inspect

    from gamengen.cli.curate import curate
    from gamengen.curate.stages import Thresholds

    defaults = {name: p.default.default for name, p in inspect.signature(curate).parameters.items()}
    t = Thresholds()
    for name in ("scene_threshold", "min_motion", "max_motion", "dark_luma", "flat_std", "dedup_distance"):
        assert defaults[name] == getattr(t, name), name
