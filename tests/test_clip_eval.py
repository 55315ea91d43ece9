"""`gamengen clip eval` (GameGen-X §4.3 offline): a tiny clip model trained on two toy "games" (a
curated toy:cursor recording, and the same clips with the colour channels reversed and two
painted objects named in their captions), evaluated end to end; the flow measures and the caption
parsing on frames and texts made here."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import cli, snapshot

OBJECTS = {"imp": ("monsters", (0, 255, 0)), "medikit": ("items", (255, 255, 0))}
EVAL = ["--clips-per-game", "3", "--steps", "4", "--classifier-steps", "200"]


def mirror_dataset(src: Path, dst: Path, seed: int = 0) -> None:
    """A second game from a curated toy dataset: the colour channels reversed, the captions say
    "mirror" for "cursor", and each clip shows a green square ("imp") and a yellow one
    ("medikit"), each with probability 1/2, in frames 4-12 only, named in its Frame_Desc."""
    from gamengen.curate.captions import caption_record
    from gamengen.curate.dataset import ClipDataset, ClipWriter

    a = ClipDataset.open(src)
    w = ClipWriter(dst, a.clip_frames, a.height, a.width, a.fps, {"kind": "derived", "path": str(src)})
    rng = np.random.default_rng(seed)
    for i in range(len(a)):
        meta = json.loads(json.dumps(a.meta(i)).replace("cursor", "mirror"))
        meta.pop("index")
        frames = np.ascontiguousarray(a.frames(i)[..., ::-1])
        seen: dict[str, list[str]] = {}
        for name, (category, colour) in OBJECTS.items():
            if rng.random() < 0.5:
                y, x = rng.integers(0, a.height - 6), rng.integers(0, a.width - 6)
                frames[4:13, y:y + 6, x:x + 6] = colour
                seen.setdefault(category, []).append(name)
        view = ("In view: " + "; ".join(f"{c}: {', '.join(n)}" for c, n in sorted(seen.items())) + "."
                if seen else "No objects in view.")
        fields = meta["captions"]["fields"]
        fields["Frame_Desc"] = f"{view} Mean brightness 105/255 (moderately lit)."
        meta["captions"] = caption_record(fields)
        w.add(frames, meta)
    w.finish()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Two datasets, a 2D AE, a codec and a clip model trained on both, and one evaluation."""
    from gamengen.train.autoencoder import AETrainConfig, train_autoencoder

    root = tmp_path_factory.mktemp("clipeval")
    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "3000", "--seed", "1",
        "--out", root / "store", check=True)  # ~16 episodes, ~47 clips: enough to learn the painted objects
    cli("curate", "--from", root / "store", "--out", root / "cursor", "--min-seconds", "2", "--min-motion", "0",
        "--max-windows", "3", check=True)
    mirror_dataset(root / "cursor", root / "mirror")
    train_autoencoder(root / "store", root / "ae", AETrainConfig(preset="tiny", steps=60, decoder_steps=0,
                                                                 batch_size=16, learning_rate=3e-3), warn=print)
    cli("clip", "train-vae", "--data", root / "store", "--ae", root / "ae", "--out", root / "vae", "--preset", "tiny",
        "--steps", "20", "--batch-size", "4", "--learning-rate", "3e-3", check=True)
    cli("clip", "train", "--data", root / "cursor", "--data", root / "mirror", "--codec", root / "vae" / "model",
        "--out", root / "run", "--preset", "tiny", "--steps", "60", "--checkpoint-every", "30", check=True)
    res = cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
              "--out", root / "ev", *EVAL, check=True)
    assert "game accuracy (text-to-clip)" in res.stdout and "unavailable offline: FID" in res.stdout, res.stdout
    return root


def report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def test_the_report_holds_every_measure_side_by_side(root):
    from PIL import Image

    ev, res = root / "ev", report(root / "ev")
    files = sorted(p.relative_to(ev).as_posix() for p in ev.rglob("*") if p.is_file())
    assert files == ["classifier/classifier.json", "classifier/classifier.safetensors", "report.json", "report.md",
                     "strips/continuation.png", "strips/mirror.png", "strips/toy-cursor.png"], files
    assert [d["game"] for d in res["datasets"]] == ["toy:cursor", "mirror"]  # env id, else the folder's name
    for d in res["datasets"]:
        assert d["classifier_train"] + d["heldout"] == d["clips"] and d["heldout"] >= 3 and d["split_by"] == "episode"
    acc = res["game_accuracy"]
    assert acc["chance_uniform"] == 0.5 and acc["chance_majority"] == 0.5 and acc["target"] == 0.8
    assert acc["text_to_clip"]["n"] == acc["codec"]["n"] == 6
    assert set(acc["per_game"]) == {"toy:cursor", "mirror"}
    assert res["continuation"]["context_frames"] == 5 and res["continuation"]["consistency"]["target"] == 0.9
    for part in ("text_to_clip", "continuation", "real_heldout", "codec"):
        m = res["motion"][part]
        assert len(m["per_clip"]) == 6 and 0 <= m["motion_smoothness"]["value"] <= 1
        assert m["dynamic_degree"]["value"] == np.mean([c["dynamic"] for c in m["per_clip"]])
    assert res["unavailable"]["FID (Inception)"] == "unavailable (needs weights we never download)"
    assert res["unavailable"]["FVD (I3D)"].startswith("unavailable")  # no I3D file on this machine
    assert "held out from the classifier only" in res["heldout_note"] and "trained on" in res["heldout_note"]
    md = (ev / "report.md").read_text()
    assert "| metric | generated | real held-out | codec reconstruction | chance / target |" in md
    assert "![continuation](strips/continuation.png)" in md
    assert Image.open(ev / "strips" / "mirror.png").size == (4 * 32 + 3 * 2, 4 * 32 + 2 * 2 + 10)  # real + 3 made
    assert Image.open(ev / "strips" / "continuation.png").size == (5 * 32 + 3 * 2 + 10, 4 * 32 + 2 * 2 + 10)
    assert not [p for p in root.rglob("*") if p.suffix in (".pkl", ".pt", ".pth", ".bin", ".ckpt", ".pickle")]


def test_the_classifier_never_sees_an_evaluated_clip_and_separates_the_games(root):
    """Its figures are recomputed here from the frames with the saved classifier."""
    from gamengen.curate.dataset import ClipDataset
    from gamengen.eval.clip_classifier import ClipClassifier, objects_in_view

    res = report(root / "ev")
    clf = ClipClassifier.load(root / "ev")  # an eval folder or its classifier/ both load
    assert clf.games == ["toy:cursor", "mirror"] and [n for n, _ in clf.objects] == ["imp", "medikit"]
    trained = {t["path"]: set(t["clips"]) for t in clf.trained_on}
    for row in res["clips"]:
        assert row["clip"] not in trained[str(Path(row["dataset"]).resolve())]
    hits, found, false = [], [], []
    for k, name in enumerate(("cursor", "mirror")):
        ds = ClipDataset.open(root / name)
        train = trained[str((root / name).resolve())]
        held = [i for i in range(len(ds)) if i not in train]
        episodes = lambda idx: {ds.meta(i)["source"]["name"] for i in idx}  # noqa: E731
        assert train and held and not episodes(train) & episodes(held)  # whole episodes held out
        for i in held:
            p = clf.predict(ds.frames(i))
            hits.append(p.game == k)
            if name == "mirror":
                named = objects_in_view(ds.meta(i)["captions"]["fields"]).names
                found += [p.objects[j] >= 0.5 for j, (n, _) in enumerate(clf.objects) if n in named]
                false += [p.objects[j] >= 0.5 for j, (n, _) in enumerate(clf.objects) if n not in named]
    assert np.mean(hits) == res["game_accuracy"]["real_heldout"]["value"] >= 0.9  # trivially separable games
    o = res["objects"]["real_heldout"]
    assert (o["detected"]["n"], o["false_positive_rate"]["n"]) == (len(found), len(false))
    assert o["detected"]["value"] == np.mean(found) >= 0.7
    assert o["false_positive_rate"]["value"] == np.mean(false) <= 0.3
    assert len(found) >= 8 and len(false) >= 5


def test_a_second_eval_reuses_the_classifier_and_repeats_the_figures(root):
    cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
        "--out", root / "ev2", "--classifier", root / "ev", *EVAL, check=True)
    a, b = report(root / "ev"), report(root / "ev2")
    assert a["classifier"]["trained_here"] and not b["classifier"]["trained_here"]
    assert [d["heldout"] for d in a["datasets"]] == [d["heldout"] for d in b["datasets"]]
    assert all(d["split_by"] == "classifier" for d in b["datasets"])
    for key in ("game_accuracy", "objects", "continuation", "motion", "clips"):
        assert a[key] == b[key], key  # the same split, classifier, clips and noise
    for name in ("classifier.json", "classifier.safetensors"):
        assert (root / "ev" / "classifier" / name).read_bytes() == (root / "ev2" / "classifier" / name).read_bytes()


def test_chained_continuation_judges_each_chunk_beside_the_real_and_frozen_ones(root):
    """--chain 2: every continuation continued twice more from its own frames; chunk 1 is the
    continuation the report already judges, and each figure is recomputed here from the frames."""
    from PIL import Image

    from gamengen.curate.dataset import ClipDataset
    from gamengen.eval.clip_chain import detail
    from gamengen.eval.clip_classifier import ClipClassifier
    from gamengen.eval.metrics import psnr, view_rows

    rows = view_rows(32)
    cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
        "--out", root / "chain", "--classifier", root / "ev", "--chain", "2", *EVAL, check=True)
    a, b = report(root / "ev"), report(root / "chain")
    assert "chain" not in a and b["config"]["chain"] == 2
    ch = b["chain"]
    assert len(ch["chunks"]) == 3 and ch["new_frames_per_chunk"] == 12
    assert ch["chunks"][0]["consistency"] == b["continuation"]["consistency"]["text_to_clip"] == \
        a["continuation"]["consistency"]["text_to_clip"]  # the same continuations: chaining changes nothing before
    assert ch["real_next"]["consistency"] == b["continuation"]["consistency"]["real_heldout"]
    clf = ClipClassifier.load(root / "ev")
    sets = {str(root / n): ClipDataset.open(root / n) for n in ("cursor", "mirror")}
    frozen, real, hits, copy_last = [], [], [], []
    for row in b["clips"]:
        frames = sets[row["dataset"]].frames(row["clip"])
        held = np.repeat(frames[4:5], 12, 0)  # the last of the 5 context frames, held for the 12 new ones
        frozen.append(detail(held))
        real.append(detail(frames[5:]))
        hits.append(clf.predict(held).game == clf.predict(frames[:5]).game)
        copy_last.append(psnr(frames[4][:rows], frames[11][:rows]))  # new frame 7 against the held frame
    assert ch["frozen_start"]["detail"]["value"] == pytest.approx(np.mean(frozen), rel=1e-5)
    assert ch["real_next"]["detail"]["value"] == pytest.approx(np.mean(real), rel=1e-5)
    assert ch["frozen_start"]["consistency"]["value"] == np.mean(hits)
    ar = ch["against_real"]
    assert ar["frozen_start"]["psnr"][6] == pytest.approx(np.mean(copy_last), rel=1e-5)
    assert all(len(ar[k][m]) == 12 for k in ("continuation", "frozen_start", "codec") for m in ("psnr", "ssim"))
    assert all(0 < v < 1 for v in ar["continuation"]["ssim"])
    assert all(c["detail"]["n"] == 6 and c["detail"]["value"] > 0 for c in ch["chunks"])
    md = (root / "chain" / "report.md").read_text()
    assert "## Chained continuation (3 chunks of 12 new frames" in md and "| PSNR dB: frozen start (copy-last) |" in md
    # per game: the context's last frame, a gap, then the last frame of each of the 3 chunks
    assert Image.open(root / "chain" / "strips" / "chain.png").size == (32 + 10 + 3 * 32 + 2 * 2, 2 * 32 + 10)


def test_detail_falls_as_a_picture_dissolves():
    import cv2

    from gamengen.eval.clip_chain import detail

    rng = np.random.default_rng(0)
    sharp = rng.integers(0, 256, (3, 60, 80, 3)).astype(np.uint8)
    blurred = np.stack([cv2.GaussianBlur(f, (0, 0), 3) for f in sharp])
    flat = np.full_like(sharp, 90)
    assert detail(flat) == 0 and 0 < detail(blurred) < detail(sharp) / 5


def test_flow_measures_on_made_up_motion():
    """Dynamic degree: 0 for a still clip, 1 for a moving one; smoothness 1 for constant velocity,
    near 0 for motion reversing every frame, between for random steps."""
    import cv2

    from gamengen.eval.clip_motion import motion, wilson

    rng = np.random.default_rng(0)
    texture = cv2.GaussianBlur(rng.integers(0, 256, (200, 300, 3)).astype(np.uint8), (0, 0), 3)
    texture = cv2.normalize(texture, None, 0, 255, cv2.NORM_MINMAX)

    def clip(offsets) -> np.ndarray:  # (17, 120, 160, 3): a window sliding over the texture
        return np.stack([texture[40:160, 20 + o:180 + o] for o in offsets])

    still = motion(clip([0] * 17))
    steady = motion(clip([4 * k for k in range(17)]))
    shaking = motion(clip([0, 4] * 8 + [0]))
    random = motion(clip(rng.integers(0, 16, 17).tolist()))
    assert not still.dynamic and still.moving_pairs == 0 and still.smoothness == 1.0 and still.mean_flow < 0.05
    assert steady.dynamic and steady.moving_pairs == 16 and steady.smoothness > 0.95
    assert 2.5 < steady.mean_flow < 3.5  # 4 px at 160 wide = 3.2 px at 128
    assert shaking.dynamic and shaking.smoothness < 0.1
    assert random.dynamic and shaking.smoothness < random.smoothness < steady.smoothness - 0.3
    lo, hi = wilson(8, 10)
    assert 0.4 < lo < 0.8 < hi < 1.0 and wilson(10, 10)[1] == 1.0 and wilson(0, 10)[0] == 0.0


def test_objects_in_view_read_from_the_caption_template():
    from gamengen.eval.clip_classifier import object_targets, object_vocabulary, objects_in_view

    doom = {"Frame_Desc": "In view: monsters: imp x2, zombieman; items: health bonus x3, stimpack, medikit, 1 more; "
                          "scenery: dead marine. Mean brightness 36/255 (dark)."}
    v = objects_in_view(doom)
    assert v.names == {"imp": "monsters", "zombieman": "monsters", "health bonus": "items", "stimpack": "items",
                       "medikit": "items", "dead marine": "scenery"} and v.cut == {"items"}
    assert v.absent("demon", "monsters") and not v.absent("backpack", "items") and not v.absent("imp", "monsters")
    none = objects_in_view({"Frame_Desc": "No objects in view. Mean brightness 36/255 (dark)."})
    assert none.names == {} and none.absent("imp", "monsters")
    assert objects_in_view({"Frame_Desc": "Mean brightness 105/255 (moderately lit). Objects in view were not "
                                          "recorded."}) is None
    assert objects_in_view({"Frame_Desc": "Mean brightness 90/255 (dim). What is in view is unknown."}) is None
    vocab = object_vocabulary([v, none, objects_in_view(doom), None], most=3, min_clips=2)
    assert vocab == [("dead marine", "scenery"), ("health bonus", "items"), ("imp", "monsters")]
    target, known = object_targets(v, vocab + [("backpack", "items"), ("demon", "monsters")])
    assert target.tolist() == [1, 1, 1, 0, 0] and known.tolist() == [True, True, True, False, True]


def test_judge_data_trains_the_judge_and_leaves_the_evaluated_clips_as_they_were(root, tmp_path):
    """--judge-data: another recording of a game, every clip of it in the judge's training set and none
    evaluated; the evaluated clips, their prompts and noise are the same as without it."""
    from gamengen.eval.clip_classifier import ClipClassifier

    cli("record", "--env", "toy:cursor", "--resolution", "32x32", "--steps", "1500", "--seed", "7",
        "--out", tmp_path / "store", check=True)
    cli("curate", "--from", tmp_path / "store", "--out", tmp_path / "more", "--min-seconds", "2", "--min-motion", "0",
        "--max-windows", "3", check=True)
    cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
        "--judge-data", tmp_path / "more", "--classifier-clips", "1000", "--out", tmp_path / "ev", *EVAL, check=True)
    a, b = report(root / "ev"), report(tmp_path / "ev")
    assert [(c["dataset"], c["clip"], c["seed"]) for c in a["clips"]] == [(c["dataset"], c["clip"], c["seed"])
                                                                          for c in b["clips"]]
    more = next(d for d in b["datasets"] if d["path"] == str(tmp_path / "more"))
    assert more["split_by"] == "judge" and more["heldout"] == 0 and more["classifier_train"] == more["clips"] > 0
    assert b["classifier"]["config"]["max_train_clips"] == 1000
    trained = {t["path"]: t for t in ClipClassifier.load(tmp_path / "ev").trained_on}
    assert trained[str((tmp_path / "more").resolve())]["game"] == "toy:cursor"
    assert len(trained[str((tmp_path / "more").resolve())]["clips"]) == more["clips"]


def test_the_split_is_seeded_and_holds_out_whole_episodes(root):
    from gamengen.curate.dataset import ClipDataset
    from gamengen.eval.clip import split_clips

    ds = ClipDataset.open(root / "cursor")
    train, held, by = split_clips(ds, 0, 0.25)
    assert split_clips(ds, 0, 0.25) == (train, held, by) and by == "episode"
    assert sorted(train + held) == list(range(len(ds)))
    episodes = {ds.meta(i)["source"]["name"] for i in range(len(ds))}
    held_episodes = {ds.meta(i)["source"]["name"] for i in held}
    assert len(held_episodes) == round(0.25 * len(episodes))
    assert not held_episodes & {ds.meta(i)["source"]["name"] for i in train}
    assert any(split_clips(ds, s, 0.25)[1] != held for s in range(1, 6))


def refused(args: list, capsys, monkeypatch, word: str) -> None:
    """The real entry point in this process: exit 2, one line naming ``word``."""
    from gamengen.cli import main

    monkeypatch.setattr(sys, "argv", ["gamengen", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert e.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (e.value.code, lines)
    assert word in lines[0], lines[0]


def test_a_panel_of_judges_scores_by_their_mean_and_reports_each(root, tmp_path):
    """--judges 2: two judges on the same clips from seeds 0 and 1, scoring as one panel; each judge's own
    figures stand beside the panel's, and the saved panel scores the same again with --classifier."""
    import dataclasses

    from gamengen.curate.dataset import ClipDataset
    from gamengen.errors import UserError
    from gamengen.eval.clip_classifier import JudgePanel, load_judge

    res = cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
              "--out", tmp_path / "panel", *EVAL, "--judges", "2", check=True)
    assert "panel of 2 judges; each alone: seed 0: game accuracy" in res.stdout, res.stdout
    r = report(tmp_path / "panel")
    assert r["classifier"]["judges"] == 2 and [j["seed"] for j in r["judges"]] == [0, 1]
    assert all(j["game_accuracy"]["n"] == r["game_accuracy"]["text_to_clip"]["n"] for j in r["judges"])
    assert "A panel of 2 judges" in (tmp_path / "panel" / "report.md").read_text()
    panel = load_judge(tmp_path / "panel")
    assert isinstance(panel, JudgePanel) and [j.config.seed for j in panel.judges] == [0, 1]
    frames = ClipDataset.open(root / "mirror").frames(0)
    a, b = (j.predict(frames) for j in panel.judges)
    assert not np.allclose(a.game_probs, b.game_probs)  # two seeds, two judges
    p = panel.predict(frames)
    assert np.allclose(p.game_probs, (a.game_probs + b.game_probs) / 2) and p.game == int(p.game_probs.argmax())
    assert np.allclose(p.objects, (a.objects + b.objects) / 2)
    cli("clip", "eval", "--model", root / "run" / "model", "--data", root / "cursor", "--data", root / "mirror",
        "--out", tmp_path / "again", "--classifier", tmp_path / "panel", *EVAL, check=True)
    again = report(tmp_path / "again")
    for key in ("game_accuracy", "continuation", "judges"):
        assert again[key] == r[key], key
    # judges that trained on other clips cannot sit on one panel; a damaged panel is one clear error
    j = panel.judges[1]
    other = dataclasses.replace(j, trained_on=[{**t, "clips": t["clips"][1:]} for t in j.trained_on])
    with pytest.raises(UserError, match="different games, objects or clips"):
        JudgePanel([panel.judges[0], other])
    meta = tmp_path / "panel" / "classifier" / "panel.json"
    meta.write_text('{"format": "gamengen-clip-judge-panel", "version": 1, "judges": ["../../x"]}')
    with pytest.raises(UserError, match="outside it"):
        load_judge(tmp_path / "panel")
    meta.write_text("{not json")
    with pytest.raises(UserError, match="panel .* is damaged"):
        load_judge(tmp_path / "panel")


def test_bad_input_is_one_line_exit_2_and_nothing_written(root, tmp_path, capsys, monkeypatch):
    from gamengen.curate.dataset import ClipWriter

    cli("curate", "--from", root / "store", "--out", tmp_path / "short", "--min-seconds", "2", "--min-motion", "0",
        "--max-windows", "1", "--clip-frames", "13", check=True)
    empty = ClipWriter(tmp_path / "empty", 17, 32, 32, 30.0, {"kind": "derived"})
    empty.finish()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "badjson").mkdir()
    (tmp_path / "badjson" / "gamengen_clip.json").write_text("{not json")
    model, cursor, mirror = root / "run" / "model", root / "cursor", root / "mirror"
    before = snapshot(root), snapshot(tmp_path)
    ok = ["--model", model, "--data", cursor, "--data", mirror, "--out", tmp_path / "out"]

    def ev(*args):
        return ["clip", "eval", *args]

    cases = [
        (ev("--model", tmp_path / "nothing", *ok[2:]), "no clip model"),
        (ev("--model", root / "vae" / "model", *ok[2:]), "video VAE"),
        (ev("--model", tmp_path / "badjson", *ok[2:]), "JSON"),
        (ev("--model", model, "--data", tmp_path / "short", "--out", tmp_path / "out"), "13 frames"),
        (ev("--model", model, "--data", tmp_path / "empty", "--out", tmp_path / "out"), "no clips"),
        (ev("--model", model, "--data", root / "store", "--out", tmp_path / "out"), "not a clip dataset"),
        (ev("--model", model, "--data", cursor, "--data", cursor, "--out", tmp_path / "out"), "twice"),
        (ev(*ok, "--clips-per-game", "0"), "--clips-per-game"),
        (ev(*ok[:-1], tmp_path / "full"), "not empty"),
        (ev(*ok[:-1], tmp_path / "full" / "x" / "out"), "not a folder"),
        (ev(*ok, "--classifier", root / "vae"), "no clip classifier"),
        (ev(*ok, "--classifier-steps", "0"), "classifier"),
        (ev(*ok, "--judges", "0"), "--judges 0"),
        (ev(*ok, "--judges", "2", "--classifier", root / "ev"), "--judges 2 with --classifier"),
        (ev(*ok, "--steps", "0"), "steps"),
        (ev(*ok, "--context", "6"), "--context 6"),
        (ev(*ok, "--context", "17"), "too short to continue from 17"),
        (ev("--model", model, "--data", cursor, "--judge-data", mirror, "--out", tmp_path / "out"),
         "which no --data dataset is"),
        (ev(*ok, "--judge-data", cursor), "twice"),
        (ev(*ok, "--judge-data", tmp_path / "short"), "differ"),
        (ev(*ok, "--judge-data", tmp_path / "short", "--classifier", root / "ev"), "--judge-data trains the judge"),
    ]
    for args, word in cases:
        refused(args, capsys, monkeypatch, word)
    assert (snapshot(root), snapshot(tmp_path)) == before and not (tmp_path / "out").exists()


def test_a_reused_classifier_fits_its_clips_with_or_without_their_keys(root, tmp_path):
    """The judge's dataset check ignores the keys per frame (it never reads them), so a judge trained
    before curation kept keys still fits; any other change to clips.jsonl is caught."""
    from gamengen.curate.dataset import ClipDataset
    from gamengen.eval.clip import _fingerprint

    lines = (root / "cursor" / "clips.jsonl").read_text().splitlines()
    assert all("keys" in json.loads(x) for x in lines)
    variants = {}
    for name, edit in {"no keys": lambda d: d.pop("keys"), "caption": lambda d: d["captions"].update(caption="x")}.items():
        copy = tmp_path / name
        shutil.copytree(root / "cursor", copy)
        rows = [json.loads(x) for x in lines]
        for d in rows:
            edit(d)
        (copy / "clips.jsonl").write_text("".join(json.dumps(d) + "\n" for d in rows))
        variants[name] = _fingerprint(ClipDataset.open(copy))
    original = _fingerprint(ClipDataset.open(root / "cursor"))
    assert variants["no keys"] == original and variants["caption"] != original
