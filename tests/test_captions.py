"""In-game events, objects in view and structured captions, on real ViZDoom recordings (no mocks).

One short Freedoom E1M1 recording with events and labels is shared by most tests; its events come
every 1-2 s of game time (EnvConfig.event_period_s, the tests' knob; the CLI keeps 5-10 s) so a few
hundred steps hold many of them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import cli, snapshot
from gamengen.data.captions import (GEN_FIELDS, INS_FIELDS, MAX_TOKENS, MAX_WORDS, Observed, caption, caption_text,
                                    effect_seen, estimate_tokens, instruction_text, picture_effect, word_count)
from gamengen.data.store import Store, StoreSpec, read_events, read_labels
from gamengen.envs import EnvConfig, make_env
from gamengen.envs.base import event_array
from gamengen.errors import UserError
from gamengen.record.recorder import RecordConfig, record

E1M1 = "vizdoom:freedoom1/E1M1"
FAST_EVENTS = EnvConfig(frame_skip=2, labels=True, events=True, event_period_s=(1.0, 2.0))


@pytest.fixture(scope="module")
def events_store(tmp_path_factory):
    out = tmp_path_factory.mktemp("events") / "store"
    record(out, RecordConfig(env_id=E1M1, policy="random", steps=500, max_episode_steps=250, seed=2, env=FAST_EVENTS))
    return Store.open(out)


def test_every_event_shows_its_effect():
    """Each event of the vocabulary, fired on E1M1's start, shows its documented effect."""
    env = make_env(E1M1, EnvConfig(labels=True, events=True))
    noop = env.action_set.names.index("NOOP")
    try:
        assert env.events[0].name == "none" and len(env.events) > 15
        for k in range(1, len(env.events)):
            steps = [env.reset(1)] + [env.step(noop) for _ in range(3)]
            t = len(steps) - 1
            env.fire_event(k)
            steps += [env.step(noop) for _ in range(40)]
            assert effect_seen(env.events[k].effect, t, Observed.from_steps(steps, env.variable_names), 40), \
                env.events[k].name
    finally:
        env.close()


def test_events_and_labels_are_logged_and_replay(events_store):
    spec = events_store.spec
    assert spec.labels and spec.version == 2 and spec.event_period_s == (1.0, 2.0)
    assert json.loads((events_store.root / "store.json").read_text())["events"][0]["name"] == "none"
    summons_seen = gives_seen = 0
    for rec in events_store.episodes():
        g = events_store.open_episode(rec)
        events = read_events(g)
        names, counts = read_labels(g)
        assert events.dtype == np.int16 and events.shape == (rec.length,)
        # the schedule is a pure function of the episode's env seed and the step index
        assert np.array_equal(events, event_array(rec.meta["env_seed"], rec.length, spec.fps, spec.event_period_s,
                                                  len(spec.events) - 1))
        assert counts.dtype == np.uint8 and counts.shape == (rec.length, len(names)) and list(names) == sorted(names)
        assert "DoomPlayer" not in names and counts.sum() > 0
        obs = Observed({v: np.asarray(g["game_variables"][:, j], float) for j, v in enumerate(spec.variables)},
                       np.asarray(g["frames"][:], float).mean(axis=(1, 2)), dict(zip(names, counts.T)))
        for t in np.nonzero(events)[0]:
            ev = spec.events[events[t]]
            seen = effect_seen(ev.effect, int(t), obs, 35)
            summons_seen += bool(seen and ev.kind == "monster")
            gives_seen += bool(seen and ev.kind in ("item", "weapon"))
    assert summons_seen >= 1 and gives_seen >= 1, (summons_seen, gives_seen)

    # replay: the env seed and the recorded actions give the same frames and the same events
    rec = events_store.episodes()[0]
    g = events_store.open_episode(rec)
    env = make_env(E1M1, FAST_EVENTS)
    try:
        step = env.reset(rec.meta["env_seed"])
        for t, a in enumerate(g["actions"][:]):
            assert np.array_equal(step.frame, g["frames"][t]), f"frame {t} differs on replay"
            step = env.step(int(a))
            assert step.event == g["events"][t]
    finally:
        env.close()


def test_captions_say_what_the_recording_holds(events_store):
    spec = events_store.spec
    checked_turns, checked_events = set(), 0
    for rec in events_store.episodes():
        g = events_store.open_episode(rec)
        actions, events = g["actions"][:], read_events(g)
        angle = g["game_variables"][:, spec.variables.index("ANGLE")]
        for start in range(0, rec.length - 20, 20):
            end = min(rec.length, start + 40)
            fields = caption(events_store, rec, start, end)
            assert tuple(fields) == GEN_FIELDS + INS_FIELDS and all(fields.values())
            assert caption(events_store, rec, start, end) == fields  # deterministic
            assert 'E1M1 "Outer Prison"' in fields["Summary"] and "Freedoom: Phase 1" in fields["Game_Meta"]
            counts = np.bincount(actions[start:end], minlength=len(spec.action_set))
            dominant = spec.action_set.names[int(np.argmax(counts))]  # argmax takes the first of a tie
            assert f"(dominant: {dominant})" in fields["Misc"] and f"pressing {dominant}" in fields["Summary"]
            # camera motion against the recorded ANGLE, unwrapped here independently
            turns = np.diff(np.degrees(np.unwrap(np.radians(angle[start:end]))))
            if abs(turns.sum()) >= 60 and abs(turns.sum()) >= 0.8 * np.abs(turns).sum():
                side = "left" if turns.sum() > 0 else "right"  # DOOM's angle grows counter-clockwise
                assert f"pan {side} {abs(turns.sum()):.0f} deg" in fields["Misc"], fields["Misc"]
                assert f"turn{'s' if 'in place' in fields['Summary'] else 'ing'} {side}" in fields["Summary"]
                checked_turns.add(side)
            for t in np.nonzero(events[start:end])[0]:
                if t < 3:  # at most 3 events are spelled out, the first three
                    assert spec.events[events[start + t]].text in fields["Trans"]
                    checked_events += 1
            first = np.nonzero(events[start:end])[0]
            if len(first):
                assert spec.events[events[start + first[0]]].text in fields["Summary"]
            for text in (caption_text(fields), instruction_text(fields)):
                assert word_count(text) <= MAX_WORDS and estimate_tokens(text) <= MAX_TOKENS
            raw = " ".join(f"{k}: {v}" for k, v in fields.items() if k in GEN_FIELDS)
            assert caption_text(fields) == raw  # the length guard never had to cut
    assert checked_turns == {"left", "right"} and checked_events >= 5


def test_a_request_is_worded_as_the_recorded_captions_are(events_store):
    """request_instruction (an eval's or a player's request at the end of a context) gives all five INS
    fields in the words the recorded captions use, so InstructNet reads what it trained on."""
    import re

    from gamengen.data.captions import fired_events, key_request, request_instruction

    rec = next(iter(events_store.episodes()))
    context = caption(events_store, rec, 0, 5)
    dim = next(e for e in events_store.spec.events if e.name == "lights_dim")
    text = request_instruction(context, 90.4, "TURN_LEFT", dim)
    fields = dict(re.findall(r"(Env|Trans|Light|Act|Misc): (.*?)(?= (?:Env|Trans|Light|Act|Misc): |$)", text))
    assert tuple(fields) == INS_FIELDS and fields["Env"] == context["Env"]
    assert [(e.name, at) for e, at in fired_events(fields["Trans"], events_store.spec.events)] == [("lights_dim", 0.1)]
    assert fields["Light"] == "Brightness 90/255 (moderately lit) at the start; lighting events: lights dim at 0.1 s."
    assert fields["Act"] == "The player turns left." and fields["Misc"].startswith("Keys: TURN_LEFT 100% (dominant: TURN_LEFT)")
    # the recorded captions' own words for each part (a template change must change both)
    for start in range(0, rec.length - 20, 20):
        real = caption(events_store, rec, start, start + 20)
        assert re.match(r"Brightness \d+/255 \((dark|dim|moderately lit|bright)\) at the start", real["Light"])
        assert re.match(r"Keys: ([\w+]+ \d+%, )*[\w+]+ \d+% \(dominant: [\w+]+\)\. Camera: ", real["Misc"])
        assert real["Act"].startswith("The player ") and real["Trans"][:3] in ("At ", "No ")
    plain = request_instruction(context, 20.0, "NOOP")
    assert "Trans: No in-game event. Light: Brightness 20/255 (dark) at the start, steady." in plain
    assert plain.endswith("Act: The player stays in place. Misc: Keys: NOOP 100% (dominant: NOOP). Camera: static.")
    # a combo of buttons (clip play's held keys) reads as a recorded combo action does: pan first
    assert request_instruction(context, 20.0, "MOVE_FORWARD+TURN_LEFT").endswith(
        "Act: The player walks forward and turns left. Misc: Keys: MOVE_FORWARD+TURN_LEFT 100% (dominant: "
        "MOVE_FORWARD+TURN_LEFT). Camera: pan left, dolly in.")
    assert key_request("JUMP") == "Act: The player presses JUMP. Misc: Keys: JUMP 100% (dominant: JUMP)."


def test_a_summon_in_view_makes_a_tense_caption(events_store):
    spec = events_store.spec
    for rec in events_store.episodes():
        g = events_store.open_episode(rec)
        events = read_events(g)
        names, counts = read_labels(g)
        for t in np.nonzero(events)[0]:
            ev = spec.events[events[t]]
            label = ev.effect.partition(":")[2]
            if ev.kind == "monster" and label in names and counts[t + 1:t + 5, names.index(label)].max(initial=0):
                fields = caption(events_store, rec, int(t), min(rec.length, int(t) + 20))
                assert fields["Trans"].startswith(f"At 0.0 s {ev.text}") and "(no effect visible)" not in fields["Trans"]
                assert "monsters:" in fields["Frame_Desc"] and "tense" in fields["Atmosphere"]
                return
    pytest.fail("no summoned monster came into view")


def test_old_and_plain_stores_read_as_before(tmp_path):
    # store.json exactly as docs/dataset.md shows a version-1 store
    old = {"action_set": {"buttons": [], "combos": [], "names": ["NOOP", "UP", "DOWN", "LEFT", "RIGHT"]},
           "compression_level": 1, "env_id": "toy:cursor", "format": "gamengen-trajectory-store", "fps": 30.0,
           "frame_skip": 1, "height": 120, "images": [], "variables": ["cursor_x", "cursor_y"], "version": 1,
           "width": 160}
    spec = StoreSpec.from_json(old, "store.json")
    assert not spec.labels and spec.events == () and spec.to_json() == old
    # a store recorded today without labels and events is still a version-1 store, episode arrays unchanged
    out = tmp_path / "plain"
    store = record(out, RecordConfig(env_id=E1M1, steps=60, env=EnvConfig(frame_skip=2)))
    assert json.loads((out / "store.json").read_text())["version"] == 1
    g = store.open_episode(store.episodes()[0])
    assert sorted(g.array_keys()) == ["actions", "frames", "game_variables", "rewards", "terminated", "truncated"]
    assert read_events(g) is None and read_labels(g) is None
    fields = caption(store, store.episodes()[0], 0, 60)
    assert "not recorded" in fields["Trans"] and "not recorded" in fields["Frame_Desc"]
    assert "summon" not in caption_text(fields) + instruction_text(fields)
    # a game without variables or a view: a minimal caption from the env id and the keys
    toy = record(tmp_path / "toy", RecordConfig(env_id="toy:cursor", steps=40))
    rec = toy.episodes()[0]
    fields = caption(toy, rec, 0, rec.length)
    dominant = toy.spec.action_set.names[int(np.argmax(np.bincount(toy.open_episode(rec)["actions"][:])))]
    assert "toy game cursor" in fields["Summary"] and f"(dominant: {dominant})" in fields["Misc"]
    assert "Camera motion was not recorded" in fields["Misc"]
    with pytest.raises(UserError):
        caption(toy, rec, 0, rec.length + 1)


def test_mixing_event_and_label_settings_is_refused(tmp_path):
    store = tmp_path / "s"
    base = ["record", "--env", E1M1, "--steps", "40", "--frame-skip", "2", "--out", store]
    cli(*base, "--events", "--labels", check=True)
    spec = json.loads((store / "store.json").read_text())
    assert spec["version"] == 2 and spec["labels"] and spec["event_period_s"] == [5.0, 10.0]
    before = snapshot(store)
    for extra, words in (((), "labels on (store) vs off"), (("--labels",), "events on (21 kinds, every 5-10 s) (store) vs off"),
                         (("--events",), "labels on (store) vs off")):
        res = cli(*base, "--seed", "1", *extra)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert snapshot(store) == before
    res = cli("data", "caption", store, "--frames", "30", check=True)
    assert res.stdout.startswith('GEN: Summary: A 1.7-second first-person clip of Freedoom: Phase 1, map E1M1 "Outer')
    assert "\nINS: Env: Map E1M1" in res.stdout
    res = cli("record", "--env", "toy:cursor", "--steps", "10", "--events", "--out", tmp_path / "toy")
    assert res.returncode == 2 and "ViZDoom" in res.stderr and not (tmp_path / "toy").exists()


def test_event_kinds_narrow_what_a_recording_fires(tmp_path):
    """--event-kinds records a vocabulary of the named events only (the store keeps it, so its events
    arrays index it, and a replay rebuilds it); resuming with another vocabulary, or an unknown name, is
    one line and exit 2."""
    from gamengen.eval.control import _env

    store = tmp_path / "s"
    base = ["record", "--env", E1M1, "--steps", "30", "--frame-skip", "2", "--out", store]
    cli(*base, "--event-kinds", "radiation_suit, invulnerability", check=True)
    spec = json.loads((store / "store.json").read_text())
    assert [e["name"] for e in spec["events"]] == ["none", "invulnerability", "radiation_suit"]  # the vocabulary's order
    before = snapshot(store)
    for extra, words in ((("--events",), "events on (2 kinds, every 5-10 s) (store) vs on (21 kinds"),
                         (("--event-kinds", "invulnerability,berserk"), "event vocabulary or period differs"),
                         (("--event-kinds", "rain"), "unknown event kind 'rain'"),
                         (("--event-kinds", " , "), "--event-kinds names no event"),
                         (("--event-period", "2,4"), "--event-period is given with events off"),
                         (("--events", "--event-period", "4"), "is not a (shortest, longest) gap"),
                         (("--events", "--event-period", "2,x"), "bad --event-period '2,x'")):
        res = cli(*base, "--seed", "1", *extra)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert snapshot(store) == before

    kinds = ("berserk", "lights_dim")
    out = tmp_path / "fast"
    record(out, RecordConfig(env_id=E1M1, policy="random", steps=160, max_episode_steps=80, seed=3,
                             env=EnvConfig(frame_skip=2, events=True, event_period_s=(0.5, 1.0), event_kinds=kinds)))
    s = Store.open(out)
    assert [e.name for e in s.spec.events] == ["none", *kinds]
    fired = np.concatenate([read_events(s.open_episode(r)) for r in s.episodes()])
    assert set(np.unique(fired)) == {0, 1, 2}, np.unique(fired)  # both kinds, nothing else
    env = _env(s.spec)  # eval-control's replays rebuild the store's own vocabulary
    try:
        assert env.events == s.spec.events
    finally:
        env.close()


def picture_events_seen(store: Store) -> tuple[int, int]:
    """(light and tint events the captions' picture rule sees, all of them) over a store: the frame
    before each against the mean of frames 3-6 after it."""
    seen = total = 0
    for rec in store.episodes():
        g = store.open_episode(rec)
        events, frames = read_events(g), g["frames"]
        for t in np.nonzero(events)[0]:
            if 1 <= t and t + 7 <= len(events):
                before = np.asarray(frames[t - 1]).reshape(-1, 3).mean(0)
                after = np.asarray(frames[t + 3:t + 7]).reshape(-1, 3).mean(0)
                shown = picture_effect(store.spec.events[events[t]].effect, before, after)  # None: no picture rule
                if shown is not None:
                    seen, total = seen + shown, total + 1
    return seen, total


def test_event_clear_ends_the_lasting_effects_before_each_event(tmp_path):
    """--event-clear takes the powerups a moment before each event, so each tint fires on an untinted
    view and shows: on the same seed and actions every tint event shows where, without it, the tints
    stack and some do not. The store keeps the setting (a resume with another is refused) and a
    replay rebuilds it and gives the recorded frames."""
    from gamengen.eval.control import _env, replay

    kinds = ("invulnerability", "radiation_suit", "berserk")
    seen = {}
    for clear in (None, 0.5):
        out = tmp_path / f"clear-{clear}"
        record(out, RecordConfig(env_id=E1M1, policy="random", steps=400, max_episode_steps=200, seed=3,
                                 env=EnvConfig(frame_skip=2, events=True, event_period_s=(1.0, 1.5), event_kinds=kinds,
                                               event_clear_s=clear)))
        seen[clear] = picture_events_seen(Store.open(out))
    assert seen[0.5][1] == seen[None][1] >= 12  # the same schedule
    assert seen[0.5][0] == seen[0.5][1] > seen[None][0], seen

    s = Store.open(out)
    assert json.loads((out / "store.json").read_text())["event_clear_s"] == 0.5 and s.spec.event_clear_s == 0.5
    info = json.loads(cli("data", "info", out, "--json", check=True).stdout)["events"]
    assert info["every_s"] == [1.0, 1.5] and info["cleared_s_before"] == 0.5 and set(info["fired"]) == set(kinds)
    assert sum(info["fired"].values()) >= seen[0.5][1]  # every event, seen or not, and those too near an end
    rec = s.episodes()[0]
    g = s.open_episode(rec)
    env = _env(s.spec)  # eval-control's replay: the same clearing, so the same frames after it
    try:
        assert env.config.event_clear_s == 0.5
        _, diverged = replay(env, rec.meta["env_seed"], np.asarray(g["actions"][:150]), np.asarray(g["frames"][150]))
        assert not diverged
    finally:
        env.close()

    store = tmp_path / "s"
    base = ["record", "--env", E1M1, "--steps", "30", "--frame-skip", "2", "--out", store]
    cli(*base, "--event-kinds", "berserk", "--event-period", "2,4", "--event-clear", "1", check=True)
    before = snapshot(store)
    for extra, words in ((("--event-kinds", "berserk", "--event-period", "2,4", "--event-clear", "0.5"),
                          "event clearing 1 s before each event (store) vs 0.5 s before each event (this run)"),
                         (("--event-kinds", "berserk", "--event-period", "2,4", "--event-clear", "3"),
                          "under the shortest gap between events (2 s)"),
                         (("--event-kinds", "berserk", "--event-period", "2,4"),
                          "event clearing 1 s before each event (store) vs off (this run)"),
                         (("--event-clear", "1",), "an event clearing time is given with events off")):
        res = cli(*base, "--seed", "1", *extra)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert snapshot(store) == before


def test_verify_and_export_cover_events_and_labels(tmp_path):
    """`data export` writes each step's event and the objects in view; `data verify` checks both
    arrays and finds an event index outside the store's vocabulary."""
    import csv

    import zarr

    store = tmp_path / "s"
    cli("record", "--env", E1M1, "--steps", "400", "--frame-skip", "2", "--events", "--labels", "--seed", "4",
        "--out", store, check=True)
    assert cli("data", "verify", store).returncode == 0
    cli("data", "export", store, "--out", tmp_path / "x", check=True)
    with open(tmp_path / "x" / "actions.csv") as f:
        rows = list(csv.DictReader(f))
    s = Store.open(store)
    rec = s.episodes()[0]
    g = s.open_episode(rec)
    events, (names, counts) = read_events(g), read_labels(g)
    mine = [r for r in rows if r["episode"] == rec.path.replace("/", "-")]
    assert [r["event"] for r in mine] == [s.spec.events[e].name for e in events]
    assert any(r["event"] != "none" for r in rows)  # 400 steps at skip 2 is 23 s: events every 5-10 s
    t = int(np.argmax(counts.sum(1)))
    assert mine[t]["in_view"] == ";".join(f"{n}={c}" for n, c in zip(names, counts[t]) if c) != ""
    arr = zarr.open_group(store / rec.path, mode="r+")["events"]
    arr[0] = len(s.spec.events)
    res = cli("data", "verify", store)
    assert res.returncode == 1 and f"events outside 0..{len(s.spec.events) - 1}" in res.stdout + res.stderr
