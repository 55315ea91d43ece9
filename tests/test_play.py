"""The browser player (issue 5): the real server in a subprocess, real WebSocket clients, a real
Chromium through Playwright, and the real ViZDoom for human recording."""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import websockets

from conftest import Server, cli, needs_browser, save_screenshot
from gamengen.envs import ActionSet
from gamengen.envs.vizdoom_env import DOOM_ACTIONS, DOOM_BUTTONS
from gamengen.models.world_model import WorldModel
from gamengen.play.keymap import ActionResolver, Keymap
from gamengen.play.server import unpack_frame





def http_status(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture(scope="module")
def toy_server(toy, toy_model, tmp_path_factory):
    """The toy world model with start contexts, served with the default limits."""
    model = tmp_path_factory.mktemp("play") / "model"
    shutil.copytree(toy_model, model)
    cli("starts", "--model", model, "--data", toy / "store", "--n", "2", check=True)
    server = Server("play", "--model", model, "--no-open", "--idle-timeout", "60")
    server.model = model
    yield server
    server.stop()


async def play_steps(server: Server, keys_per_step: list[list[str]], start: int = 0):
    """Connect, reset, step; returns (hello, [(header, images)]) with the reset frame first."""
    async with websockets.connect(server.ws, origin=server.origin, max_size=2**22) as ws:
        hello = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "reset", "start": start}))
        out = [unpack_frame(await ws.recv())]
        for i, keys in enumerate(keys_per_step):
            await ws.send(json.dumps({"type": "step", "seq": i + 1, "keys": keys}))
            out.append(unpack_frame(await ws.recv()))
        return hello, out


def decode(jpeg: bytes) -> np.ndarray:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))


def test_keymap_turns_held_keys_into_the_closest_trained_action():
    doom = ActionSet(tuple(DOOM_ACTIONS), DOOM_BUTTONS,
                     tuple(tuple(int(b in c) for b in DOOM_BUTTONS) for c in DOOM_ACTIONS.values()))
    r = ActionResolver(Keymap.for_env("vizdoom:freedoom1/E1M1"), doom)
    name = lambda keys: r.names[r.action(keys)]  # noqa: E731
    assert name([]) == "NOOP"
    assert name(["KeyW"]) == name(["ArrowUp"]) == "FORWARD"
    assert name(["KeyW", "KeyA"]) == "FORWARD+TURN_LEFT"
    assert name(["AltLeft", "ArrowLeft"]) == name(["Comma"]) == "STRAFE_LEFT"
    assert name(["Space"]) == name(["ControlLeft"]) == "ATTACK"
    assert name(["KeyE"]) == "USE"
    assert name(["KeyS", "KeyA"]) in ("BACKWARD", "TURN_LEFT")  # no such chord was trained: never adds buttons
    assert name(["KeyQ", "F5"]) == "NOOP"
    atari = ActionSet(("NOOP", "FIRE", "UP", "RIGHT", "LEFT", "DOWN", "UPRIGHT", "UPFIRE", "UPRIGHTFIRE"))
    r = ActionResolver(Keymap.for_env("atari:Breakout"), atari)
    assert r.names[r.action(["KeyW", "KeyD", "Space"])] == "UPRIGHTFIRE"
    assert r.names[r.action(["KeyW", "Space"])] == "UPFIRE"


def test_different_keys_give_different_frames_and_the_same_keys_the_same(toy_server):
    _, up = asyncio.run(play_steps(toy_server, [["ArrowUp"]] * 6))
    _, up2 = asyncio.run(play_steps(toy_server, [["ArrowUp"]] * 6))
    _, down = asyncio.run(play_steps(toy_server, [["ArrowDown"]] * 6))
    assert [h["step"] for h, _ in up] == list(range(7))
    assert [h["seq"] for h, _ in up[1:]] == list(range(1, 7))
    assert all(h["ms"]["frame graph"] > 0 for h, _ in up[1:])  # the fast path's one stage
    assert np.array_equal(decode(up[0][1][0]), decode(down[0][1][0]))  # same start
    assert all(a[1] == b[1] for a, b in zip(up, up2))  # reset seeds the noise: a replay is exact
    assert not np.array_equal(decode(up[-1][1][0]), decode(down[-1][1][0]))


def test_refuses_requests_without_the_token_or_from_elsewhere(toy_server):
    s = toy_server
    assert http_status(s.url) == 200
    assert http_status(s.base + "/") == 403
    assert http_status(s.base + "/?token=wrong") == 403
    port = s.base.rsplit(":", 1)[1]
    # DNS rebinding: a page on another name that resolves here still sends its own Host
    assert http_status(s.url, {"Host": f"evil.example:{port}"}) == 403

    async def ws_status(url, **kw):
        try:
            async with websockets.connect(url, **kw) as ws:
                await ws.recv()
                return 101
        except websockets.InvalidStatus as e:
            return e.response.status_code

    assert asyncio.run(ws_status(s.ws, origin=s.origin)) == 101
    assert asyncio.run(ws_status(s.ws.split("?")[0], origin=s.origin)) == 403
    assert asyncio.run(ws_status(s.ws + "x", origin=s.origin)) == 403
    assert asyncio.run(ws_status(s.ws, origin="http://evil.example")) == 403


def test_listens_on_loopback_only_unless_told(toy_server):
    port = int(toy_server.base.rsplit(":", 1)[1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if int(p, 16) == port and state == "0A":
                listening.append(addr)
    assert listening == ["0100007F"]  # 127.0.0.1, and nothing else
    res = cli("play", "--help")
    assert "127.0.0.1" in res.stdout


def test_eight_sessions_play_a_ninth_is_refused_and_junk_leaves_the_server_up(toy_server):
    s = toy_server

    async def load():
        clients = [await websockets.connect(s.ws, origin=s.origin) for _ in range(8)]
        for ws in clients:
            assert json.loads(await ws.recv())["type"] == "hello"
        # all 8 step at once; each gets its frames
        async def run(ws):
            await ws.send(json.dumps({"type": "reset", "start": 0}))
            got = [unpack_frame(await ws.recv())]
            for i in range(3):
                await ws.send(json.dumps({"type": "step", "seq": i + 1, "keys": ["ArrowLeft"]}))
                got.append(unpack_frame(await ws.recv()))
            return got
        results = await asyncio.gather(*(run(ws) for ws in clients))
        assert all(len(r) == 4 and r[-1][0]["step"] == 3 for r in results)
        ninth = await websockets.connect(s.ws, origin=s.origin)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ninth.recv()
        assert closed.value.rcvd.code == 1013 and "full" in closed.value.rcvd.reason
        for ws in clients:
            await ws.close()

    asyncio.run(load())

    rng = random.Random(0)
    junk = [lambda: "not json", lambda: "[1,2,3]", lambda: json.dumps({"type": "warp"}),
            lambda: json.dumps({"type": "step", "seq": 1, "keys": ["KeyW"]}),  # before any reset
            lambda: json.dumps({"type": "reset", "start": 99}), lambda: json.dumps({"type": "reset", "start": "0"}),
            lambda: json.dumps({"type": "record", "on": "yes"}), lambda: "x" * 5000,  # over max_message
            lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))),
            lambda: json.dumps({"type": "step", "seq": -1, "keys": []}),
            lambda: "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(1, 200)))]

    async def send_junk(n):
        codes = []
        for i in range(n):
            async with websockets.connect(s.ws, origin=s.origin) as ws:
                await ws.recv()  # hello
                if i % 3 == 0 and i % len(junk) != 3:  # some junk arrives mid-game (not the early step)
                    await ws.send(json.dumps({"type": "reset", "start": 0}))
                    await ws.recv()
                await ws.send(junk[i % len(junk)]())
                try:
                    while True:
                        await asyncio.wait_for(ws.recv(), 30)
                except websockets.ConnectionClosed as e:
                    codes.append(e.rcvd.code if e.rcvd else None)
        return codes

    first = asyncio.run(send_junk(110))
    rss_before = s.rss_kb()
    codes = first + asyncio.run(send_junk(220))
    rss_after = s.rss_kb()
    assert set(codes) <= {1003, 1007, 1009}, set(codes)
    assert toy_server.proc.poll() is None
    assert rss_after - rss_before < 30_000, (rss_before, rss_after)  # flat: no per-connection leak
    _, frames = asyncio.run(play_steps(s, [["ArrowRight"]] * 2))  # and it still plays
    assert frames[-1][0]["step"] == 2


def test_a_recorded_session_downloads_as_mp4(toy_server):
    import imageio.v3 as iio

    async def record():
        async with websockets.connect(toy_server.ws, origin=toy_server.origin) as ws:
            await ws.recv()
            await ws.send(json.dumps({"type": "reset", "start": 0}))
            await ws.recv()
            await ws.send(json.dumps({"type": "record", "on": True}))
            for i in range(6):
                await ws.send(json.dumps({"type": "step", "seq": i + 1, "keys": ["ArrowUp"]}))
                await ws.recv()
            await ws.send(json.dumps({"type": "record", "on": False}))
            return json.loads(await ws.recv())

    msg = asyncio.run(record())
    assert msg["type"] == "recording"
    with urllib.request.urlopen(f"{toy_server.base}/{msg['url']}", timeout=30) as r:
        assert r.headers["Content-Type"] == "video/mp4"
        video = r.read()
    assert iio.imread(video, extension=".mp4").shape[0] == 6
    assert http_status(f"{toy_server.base}/{msg['url'].split('?')[0]}") == 403


def test_the_pygame_window_plays_the_same_game(toy_server, monkeypatch):
    import pygame

    from gamengen.play.players import neural_player
    from gamengen.play.window import run_window

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    player = neural_player(toy_server.model)
    actions = []
    make = player.make_game

    def spying_game():
        game = make()
        step = game.step
        game.step = lambda a: (actions.append(player.resolver.names[a]), step(a))[1]
        return game

    player.make_game = spying_game
    press = {0: [pygame.event.Event(pygame.KEYDOWN, key=pygame.K_UP)],
             3: [pygame.event.Event(pygame.KEYUP, key=pygame.K_UP), pygame.event.Event(pygame.KEYDOWN, key=pygame.K_d)]}
    assert run_window(player, fps=1000, max_frames=6, events=lambda i: press.get(i, [])) == 6
    assert actions == ["UP"] * 3 + ["RIGHT"] * 3


def test_starts_refuses_a_store_of_another_game(toy, toy_model, doom_store, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(toy_model, model)
    res = cli("starts", "--model", model, "--data", doom_store)
    assert res.returncode == 2 and "does not hold this model's game" in res.stderr
    res = cli("play", "--model", model, "--no-open", "--port", "0")  # no starts yet
    assert res.returncode == 2 and "gamengen starts" in res.stderr


def test_human_play_of_the_real_game_is_recorded(tmp_path):
    server = Server("record", "--policy", "human", "--env", "vizdoom:freedoom1/E1M1", "--out", tmp_path / "store")

    async def human():
        async with websockets.connect(server.ws, origin=server.origin) as ws:
            hello = json.loads(await ws.recv())
            assert hello["views"] == ["real"]
            sent = []
            for keys_list in ([["KeyW"]] * 30 + [["KeyA", "KeyW"]] * 10, [["Space"]] * 12):
                await ws.send(json.dumps({"type": "reset", "start": 0}))
                await ws.recv()
                for i, keys in enumerate(keys_list):
                    await ws.send(json.dumps({"type": "step", "seq": i + 1, "keys": keys}))
                    h, _ = unpack_frame(await ws.recv())
                sent.append(keys_list)
            return hello, sent

    hello, sent = asyncio.run(human())
    out = server.stop()
    assert "2 episode(s) of your play saved" in out, out
    from gamengen.data.store import Store

    store = Store.open(tmp_path / "store")
    eps = sorted(store.episodes(), key=lambda r: r.id)
    assert [r.length for r in eps] == [40, 12]
    names = hello["actions"]
    acts = [names[a] for a in store.open_episode(eps[0])["actions"][:]]
    assert acts == ["FORWARD"] * 30 + ["FORWARD+TURN_LEFT"] * 10
    assert cli("data", "verify", tmp_path / "store").returncode == 0


BUNDLED = Path(__file__).resolve().parents[1] / "models" / "freedoom-e1m1"


@pytest.fixture(scope="module")
def bundled_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundled-server-tmp")  # its own temp dir, to see what it writes there
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(tmp))
        server = Server("play", "--model", BUNDLED, "--no-open")
    server.tmp = tmp
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ghost_server():
    server = Server("play", "--model", BUNDLED, "--no-open", "--ghost")
    yield server
    server.stop()


async def closed_by(server: Server, message: str):
    """Send one message after the hello; returns the close frame the server answers with."""
    async with websockets.connect(server.ws, origin=server.origin) as ws:
        await ws.recv()  # hello
        await ws.send(message)
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 30)
        return closed.value.rcvd


@pytest.mark.parametrize("message", ["[" * 4000, '{"type": ' + "[" * 4000, '{"":' * 1000, "[1, 2]", '"step"'])
def test_deep_or_non_object_json_is_closed_with_1007_and_the_server_plays_on(bundled_server, message):
    assert len(message) <= 4096  # under the size limit: the parser, not the size check, must refuse it
    rcvd = asyncio.run(closed_by(bundled_server, message))
    assert rcvd is not None and rcvd.code == 1007 and rcvd.reason, rcvd
    _, frames = asyncio.run(play_steps(bundled_server, [["KeyW"]]))  # a new connection still plays
    assert frames[-1][0]["step"] == 1


def test_stopping_an_empty_recording_says_nothing_was_recorded(bundled_server):
    async def record_nothing():
        async with websockets.connect(bundled_server.ws, origin=bundled_server.origin) as ws:
            await ws.recv()  # hello
            await ws.send(json.dumps({"type": "record", "on": True}))
            await ws.send(json.dumps({"type": "record", "on": False}))
            return json.loads(await asyncio.wait_for(ws.recv(), 30))

    msg = asyncio.run(record_nothing())
    assert msg == {"type": "recording", "url": None, "note": "nothing recorded"}
    folders = list(bundled_server.tmp.glob("gamengen-recordings-*"))
    assert len(folders) == 1 and not any(folders[0].iterdir())  # no file written


def test_the_favicon_needs_no_token_and_nothing_else_does(bundled_server):
    assert http_status(bundled_server.base + "/favicon.ico") == 204  # browsers ask without the page's token
    assert http_status(bundled_server.base + "/recording/x.mp4") == 403


def open_player(browser, server):
    page = browser.new_page(viewport={"width": 1360, "height": 760})
    page.goto(server.url)
    page.wait_for_function("window.gamengen && window.gamengen.hello !== null && window.gamengen.step === 0",
                           timeout=120_000)
    return page


def hold_and_play(page, key: str, frames: int, start: int = 0) -> dict[str, str]:
    """Reset to a start, hold a key for ``frames`` frames, pause; returns each view's pixels."""
    page.select_option("#startsel", str(start))
    page.click("#reset")
    page.wait_for_function("window.gamengen.step === 0")
    first = page.evaluate("window.gamengen.frames")
    page.keyboard.down(key)
    page.click("#start")
    page.wait_for_function(f"window.gamengen.frames >= {first + frames}", timeout=300_000)
    page.click("#pause")
    page.keyboard.up(key)
    page.wait_for_timeout(1000)  # the frame in flight lands
    return page.evaluate("Object.fromEntries([...document.querySelectorAll('canvas')].map(c => [c.id, c.toDataURL()]))")


@needs_browser
def test_the_bundled_game_plays_in_chromium(bundled_server, browser, tmp_path):
    page = open_player(browser, bundled_server)
    forward = hold_and_play(page, "ArrowUp", 16)
    turning = hold_and_play(page, "ArrowLeft", 16)
    assert page.evaluate("window.gamengen.frames") >= 32
    assert forward["view-model"] != turning["view-model"]
    hud = page.inner_text("#hud")
    assert re.search(r"FPS \d+\.\d", hud) and "p95" in hud and "frame graph" in hud, hud  # the fast path
    assert page.evaluate("window.gamengen.fps") > 0
    save_screenshot(page, tmp_path, "player.png")


@pytest.fixture(scope="module")
def default_server():
    server = Server("play", "--no-open")  # no --model: the bundled default, what `make play` opens
    yield server
    server.stop()


@needs_browser
def test_the_default_model_plays_in_chromium(default_server, browser):
    """`make play`'s model (defend_the_center's 1-step student, cli/common.BUNDLED_MODEL_DIR) plays in
    a real browser, and its two turns give different frames."""
    page = open_player(browser, default_server)
    assert page.evaluate("window.gamengen.hello.actions") == ["NOOP", "TURN_LEFT", "TURN_RIGHT", "ATTACK"]
    left = hold_and_play(page, "ArrowLeft", 16)
    right = hold_and_play(page, "ArrowRight", 16)
    assert left["view-model"] != right["view-model"]
    assert re.search(r"FPS \d+\.\d", page.inner_text("#hud"))


def test_ghost_mode_replays_each_start_and_runs_in_lockstep(ghost_server):
    starts = WorldModel.load_starts(BUNDLED)
    for i, s in enumerate(starts):  # the real game replays every start to its recorded frame
        # turning changes the real view where walking can be blocked by a wall; from a start at an
        # episode's first frame the real view stayed unchanged for 3 steps, so play 8
        _, frames = asyncio.run(play_steps(ghost_server, [["KeyA"]] * 8, start=i))
        header, (model, real) = frames[0]
        assert [v["name"] for v in header["views"]] == ["model", "real"] and not header["diverged"]
        assert np.abs(decode(real).astype(int) - s.frames[-1]).mean() < 8  # the JPEG of that frame (exact on the server)
        assert not np.array_equal(decode(frames[-1][1][1]), decode(real)), f"start {i}: the real game did not move"


@needs_browser
def test_ghost_mode_shows_both_views_in_chromium(ghost_server, browser, tmp_path):
    page = open_player(browser, ghost_server)
    views = hold_and_play(page, "ArrowUp", 20, start=len(WorldModel.load_starts(BUNDLED)) - 1)
    assert set(views) == {"view-model", "view-real"}
    save_screenshot(page, tmp_path, "ghost.png")


def test_ghost_plays_the_real_game_at_the_models_frame_skip(tmp_path):
    """A model trained at frame skip 2 is one neural step per two game tics: the real game beside it
    must step two tics, and the page must pace at 17.5 steps per second, not DOOM's 35."""
    import shutil

    from gamengen.play.players import neural_player

    model = tmp_path / "skip2"
    shutil.copytree(BUNDLED, model)
    card = json.loads((model / "gamengen_wm.json").read_text())
    card["meta"].update(frame_skip=2, fps=17.5)
    (model / "gamengen_wm.json").write_text(json.dumps(card))
    assert neural_player(BUNDLED).fps == 35.0
    player = neural_player(model, ghost=True)
    assert player.fps == 17.5
    game = player.make_game()
    try:
        game.reset(0)
        tic = game.real.env._game.get_episode_time()
        game.step(0)
        assert game.real.env._game.get_episode_time() - tic == 2
    finally:
        game.close()


def test_ghost_strips_compare_the_learned_view_with_the_real_one(tmp_path):
    from gamengen.envs import EnvConfig, make_env
    from gamengen.eval.ghost import horizontal_shift

    # the pan estimate on the real game: turning left moves the view right, turning right left,
    # walking forward hardly at all (DOOM starts a turn slowly: the first tics barely move)
    env = make_env("vizdoom:freedoom1/E1M1", EnvConfig(height=120, width=160))
    try:
        pans = {}
        for key in ("TURN_LEFT", "TURN_RIGHT", "FORWARD"):
            prev, a, total = env.reset(0).frame, env.action_set.names.index(key), 0.0
            for _ in range(30):
                frame = env.step(a).frame
                total, prev = total + horizontal_shift(prev, frame), frame
            pans[key] = total
    finally:
        env.close()
    assert pans["TURN_LEFT"] > 60 and pans["TURN_RIGHT"] < -60 and abs(pans["FORWARD"]) < 20, pans

    model = BUNDLED.parent / "freedoom-e1m1-1step"
    out = tmp_path / "ghost"
    res = cli("eval", "ghost", "--model", model, "--out", out, "--seconds", "1", check=True)
    assert "TURN_LEFT: 1 s: PSNR" in res.stdout
    g = json.loads((out / "ghost.json").read_text())
    assert [r["key"] for r in g["rows"]] == ["TURN_LEFT", "TURN_RIGHT", "FORWARD"]
    for r in g["rows"]:
        assert not r["diverged_start"] and r["steps"] == [35] and len(r["model_pan"]) == 1
    left = g["rows"][0]
    assert left["real_pan"][0] > 60  # the real game beside the model turned as it does alone
    from PIL import Image

    assert Image.open(out / "ghost_strip.png").size == (2 * 160, 3 * 2 * 120)  # 0 s and 1 s; real and model rows
    bad = cli("eval", "ghost", "--model", model, "--out", tmp_path / "bad", "--seconds", "2,1")
    assert bad.returncode == 2 and "--seconds" in bad.stderr and not (tmp_path / "bad").exists()


def test_a_server_steps_its_models_on_the_thread_its_command_loaded_them_on():
    # One OpenMP team per process (play/compute.py): both servers' sessions and the commands' loading
    # share one thread.
    import threading

    from gamengen.play.clip_server import ClipSessions
    from gamengen.play.compute import compute_thread, on_compute
    from gamengen.play.server import ServerConfig, Sessions

    loader = on_compute(threading.get_ident)
    assert loader != threading.get_ident()
    assert compute_thread().submit(threading.get_ident).result() == loader
    config = ServerConfig()
    assert ClipSessions(None, config).compute is compute_thread()
    sessions = Sessions(type("P", (), {"fps": 10})(), config)
    sessions.close()
    assert sessions.compute is compute_thread() and on_compute(threading.get_ident) == loader  # outlives a server


@pytest.mark.parametrize("user", [None, "PASSIVE"])
def test_commands_a_person_waits_on_take_openmp_s_own_wait_policy_back(user):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user:
        env["OMP_WAIT_POLICY"] = user
    code = ("import os, sys, gamengen.cli; from gamengen.cli.common import interactive_threads; "
            "a = os.environ.get('OMP_WAIT_POLICY'); interactive_threads(); "
            "print(a, os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    # Long jobs wait passively (the CLI's default); play and clip play get libgomp's spin-then-sleep,
    # unless the user chose a policy. The policy is read when torch loads, so loading the CLI must not.
    assert out == (["PASSIVE", "PASSIVE", "False"] if user else ["PASSIVE", "None", "False"])
