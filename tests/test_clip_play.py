"""Interactive clip play (GameGen-X §3.4, §3.5): the real server in a subprocess with conftest's tiny
clip model and InstructNet, real WebSocket clients, a real Chromium, and `bench clip-play`."""

from __future__ import annotations

import asyncio
import io
import json
import re

import numpy as np
import pytest
import websockets
from PIL import Image

from conftest import Server, cli, needs_browser, save_screenshot
from gamengen.play.server import unpack_frame

STEPS = 4  # Euler steps per chunk: enough to be a real sampler, few enough for a quick test
PROMPT = "The cursor drifts across the toy board."


@pytest.fixture(scope="module")
def clip_server(clip_run, instruct):
    server = Server("clip", "play", "--model", clip_run / "run" / "model", "--instruct", instruct / "model",
                    "--steps", STEPS, "--no-open", "--idle-timeout", "60")
    yield server
    server.stop()


def frames_of(images: list[bytes]) -> np.ndarray:
    return np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])


def world(clip_run, instruct):
    from gamengen.engine.clip_play import ClipPlayConfig, ClipWorld
    from gamengen.models.clip_model import ClipModel
    from gamengen.models.instruct_model import InstructModel

    model = ClipModel.from_pretrained(clip_run / "run" / "model")
    return ClipWorld(model, InstructModel.from_pretrained(instruct / "model", model), ClipPlayConfig(steps=STEPS))


async def next_chunk(ws, timeout: float = 120) -> tuple[dict, np.ndarray]:
    data = await asyncio.wait_for(ws.recv(), timeout)
    assert isinstance(data, bytes), data
    header, images = unpack_frame(data)
    return header, frames_of(images)


def test_a_world_starts_from_text_and_each_chunk_continues_under_the_keys_held(clip_server, clip_run, instruct):
    async def play():
        async with websockets.connect(clip_server.ws, origin=clip_server.origin, max_size=2**24) as ws:
            hello = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "start", "prompt": "  ", "seed": 3}))
            error = json.loads(await ws.recv())  # the socket stays open: the player fixes the prompt
            await ws.send(json.dumps({"type": "start", "prompt": PROMPT, "seed": 3}))
            # keys held while the first clip is made: it is made from text alone, and they steer chunk 1
            await ws.send(json.dumps({"type": "keys", "seq": 1, "keys": ["ArrowRight"]}))
            chunks = [await next_chunk(ws)]
            await ws.send(json.dumps({"type": "played", "chunk": 0}))
            chunks.append(await next_chunk(ws))
            await ws.send(json.dumps({"type": "keys", "seq": 2, "keys": ["ArrowLeft", "KeyQ"]}))
            await ws.send(json.dumps({"type": "instruction", "text": "Light: the lights go out."}))
            await ws.send(json.dumps({"type": "played", "chunk": 1}))
            chunks.append(await next_chunk(ws))
            with pytest.raises(asyncio.TimeoutError):  # chunk 2 is not shown yet: nothing more is made
                await asyncio.wait_for(ws.recv(), 3)
            return hello, error, chunks

    hello, error, chunks = asyncio.run(play())
    w = world(clip_run, instruct)
    assert hello["keys"] == list(w.key_names) and hello["instruct"] and hello["chunk_frames"] == w.chunk_frames == 12
    assert error == {"type": "error", "message": "the prompt is empty (fix: write what should happen)"}
    (h0, f0), (h1, f1), (h2, f2) = chunks
    assert [h["chunk"] for h in (h0, h1, h2)] == [0, 1, 2]
    assert (h1["keys"], h1["keys_seq"], h1["instruction"]) == (["RIGHT"], 1, None)
    # KeyQ presses nothing; ArrowLeft is the toy game's LEFT
    assert (h2["keys"], h2["keys_seq"], h2["instruction"]) == (["LEFT"], 2, "Light: the lights go out.")
    # the same world in this process, from the engine: what the server sent, up to JPEG
    expected = [w.start(PROMPT, 3), w.next_chunk(("RIGHT",)), w.next_chunk(("LEFT",), "Light: the lights go out.")]
    for got, want in zip((f0, f1, f2), expected):
        assert got.shape == want.shape and np.abs(got.astype(int) - want).mean() < 6


def test_keys_steer_the_next_chunk_and_an_abandoned_chunk_changes_nothing(clip_run, instruct):
    from gamengen.errors import UserError
    from gamengen.engine.clip_play import ClipPlayConfig, ClipWorld

    w = world(clip_run, instruct)
    w.start(PROMPT, 0)
    calls = []

    def stop_at_second_step():
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # any exception abandons the chunk

    with pytest.raises(KeyboardInterrupt):
        w.next_chunk(("LEFT",), on_step=stop_at_second_step)
    plain = w.next_chunk()
    fresh = world(clip_run, instruct)
    fresh.start(PROMPT, 0)
    tail = fresh.tail
    assert np.array_equal(fresh.next_chunk(), plain)  # the abandoned chunk left no trace
    # A chunk decodes only its new frames, and they are the whole clip's: the 2D decoder is per frame.
    from gamengen.engine.clip import continue_clip

    c = fresh.config
    whole = continue_clip(fresh.model, tail, PROMPT, fresh.seed + 1, c.steps, c.guidance, bf16=fresh.bf16)
    assert np.array_equal(whole[c.context:], plain) and np.array_equal(whole[-c.context:], fresh.tail)
    fresh2 = world(clip_run, instruct)
    fresh2.start(PROMPT, 0)
    steered = fresh2.next_chunk(("RIGHT",))
    assert np.abs(steered.astype(int) - plain).max() > 0  # InstructNet's operation signal reaches the frames
    # a key alone comes with the instruction of holding it, as InstructNet trained and eval-control asks
    from gamengen.data.captions import key_request
    from gamengen.engine.clip import Steering

    asked = continue_clip(fresh2.model, tail, PROMPT, fresh2.seed + 1, c.steps, c.guidance,
                          steer=Steering(fresh2.instruct, ("RIGHT",), key_request("RIGHT"), guidance=c.control_guidance),
                          bf16=fresh2.bf16)
    assert np.array_equal(asked[c.context:], steered)
    # control guidance (the default, 4) pushes the keys' effect further than none (1): a third branch
    # with the controls off
    unguided = ClipWorld(w.model, w.instruct, ClipPlayConfig(steps=STEPS, control_guidance=1.0))
    unguided.start(PROMPT, 0)
    assert np.abs(unguided.next_chunk(("RIGHT",)).astype(int) - steered).max() > 0
    idle = ClipWorld(w.model, w.instruct, ClipPlayConfig(steps=STEPS))
    assert idle.config.control_guidance != 1.0
    idle.start(PROMPT, 0)
    assert np.array_equal(idle.next_chunk(), plain)  # no key, no instruction: the base's chunk, guided or not
    with pytest.raises(UserError, match="1 \\+ 4k"):
        ClipWorld(w.model, None, ClipPlayConfig(context=4))


def test_bad_messages_close_only_their_socket(clip_server):
    async def closed_by(message) -> int:
        async with websockets.connect(clip_server.ws, origin=clip_server.origin) as ws:
            await ws.recv()
            await ws.send(message)
            with pytest.raises(websockets.ConnectionClosed) as e:
                await asyncio.wait_for(ws.recv(), 60)
            return e.value.rcvd.code

    async def refused(url: str, origin: str) -> bool:
        try:
            async with websockets.connect(url, origin=origin) as ws:
                await ws.recv()
        except (websockets.InvalidStatus, websockets.ConnectionClosed):
            return True
        return False

    assert asyncio.run(closed_by(json.dumps({"type": "fly"}))) == 1007
    assert asyncio.run(closed_by(json.dumps({"type": "start", "prompt": "x" * 2001}))) == 1007
    assert asyncio.run(closed_by(json.dumps({"type": "played", "chunk": -1}))) == 1007
    assert asyncio.run(closed_by(json.dumps({"type": "keys", "seq": 1, "keys": "ArrowLeft"}))) == 1007
    assert asyncio.run(closed_by(b"\x00")) == 1003
    assert asyncio.run(closed_by("[" * 50)) == 1007
    assert asyncio.run(refused(clip_server.ws, "http://evil.example"))
    assert asyncio.run(refused(clip_server.ws.split("?")[0] + "?token=wrong", clip_server.origin))

    async def still_serves():
        async with websockets.connect(clip_server.ws, origin=clip_server.origin) as ws:
            return json.loads(await ws.recv())["type"]

    assert asyncio.run(still_serves()) == "hello"


def test_bf16_chunks_follow_the_fp32_world_and_are_used_where_the_cpu_has_bf16_units(clip_run, instruct):
    """Clip play runs its networks under bf16 autocast by default only where the CPU has bf16 units
    (elsewhere it is emulated, many times slower); the chunks it makes are fp32's, up to rounding."""
    from gamengen.engine.clip_play import ClipPlayConfig, ClipWorld
    from gamengen.precision import native_bf16

    w = world(clip_run, instruct)
    assert w.bf16 is (native_bf16() is True)
    chunks = {}
    for bf16 in (False, True):
        v = ClipWorld(w.model, w.instruct, ClipPlayConfig(steps=STEPS, bf16=bf16))
        assert v.bf16 is bf16
        chunks[bf16] = [v.start(PROMPT, 0), v.next_chunk(("LEFT",)), v.next_chunk(("RIGHT",), "Light: dim.")]
    for a, b in zip(chunks[False], chunks[True]):
        diff = np.abs(a.astype(int) - b)
        assert a.shape == b.shape and diff.mean() < 2 and diff.max() > 0, (diff.mean(), diff.max())


def test_clip_play_bad_input_is_one_line_exit_2(clip_run, tmp_path):
    model = clip_run / "run" / "model"
    for args, what in ((["--context", "4"], "--context 4"), (["--model", tmp_path / "nothing"], "nothing"),
                       (["--control-guidance", "-1"], "control guidance -1")):
        res = cli("clip", "play", "--model", model, "--no-open", "--port", "0", *args)
        assert res.returncode == 2 and what in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_bench_clip_play_measures_key_to_visible_through_the_server(clip_run, instruct):
    res = cli("bench", "clip-play", "--model", clip_run / "run" / "model", "--instruct", instruct / "model",
              "--steps", 2, "--presses", 3, "--control-guidance", 2, "--bf16", "--json", check=True)
    r = json.loads(res.stdout)
    assert r["control_guidance"] == 2 and r["precision"] == "bf16"
    assert len(r["samples_s"]) == 3 and all(s > 0 for s in r["samples_s"])
    assert r["key_to_visible_s"]["max"] >= r["key_to_visible_s"]["median"] > 0
    assert r["chunk_frames"] == 12 and r["euler_steps"] == 2


@needs_browser
def test_clip_play_in_chromium(clip_server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 900, "height": 980})
    page.goto(clip_server.url)
    page.wait_for_function("window.gamengen && window.gamengen.hello !== null", timeout=120_000)
    assert page.input_value("#prompt").startswith("Summary:")  # the example prompt to start from
    page.fill("#prompt", PROMPT)
    page.click("#start")
    page.wait_for_function("window.gamengen.chunk >= 1", timeout=120_000)
    page.keyboard.down("ArrowLeft")
    page.wait_for_function("window.gamengen.keyToVisible.length >= 1", timeout=120_000)
    page.keyboard.up("ArrowLeft")
    page.fill("#instruction", "Light: the lights go out.")
    page.click("#apply")
    page.wait_for_function("window.gamengen.instruction === 'Light: the lights go out.'", timeout=120_000)
    g = page.evaluate("window.gamengen")
    assert g["frames"] > 17 and g["errors"] == [] and g["closed"] is None
    hud = page.inner_text("#hud")
    assert re.search(r"chunk latency \d+ ms", hud) and re.search(r"key-to-visible \d+ ms", hud), hud
    pixels = page.evaluate("(() => { const c = document.getElementById('view'); "
                           "return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data); })()")
    assert np.asarray(pixels).reshape(-1, 4)[:, :3].std() > 0  # a picture, not a blank canvas
    save_screenshot(page, tmp_path, "clip_play.png")


def test_the_bundled_instructnet_steers_the_bundled_clip_model():
    """models/instructnet-doom loads beside models/clip-doom (its base by digest), reads the ViZDoom
    keymap's buttons, and a held key changes the next chunk; with no control the chunk is the base's."""
    from pathlib import Path

    from gamengen.cli.clip import EXAMPLE_PROMPT
    from gamengen.engine.clip_play import ClipPlayConfig, ClipWorld
    from gamengen.models.clip_model import ClipModel
    from gamengen.models.instruct_model import InstructModel
    from gamengen.play.keymap import Keymap

    models = Path(__file__).resolve().parents[1] / "models"
    base = ClipModel.from_pretrained(models / "clip-doom")
    net = InstructModel.from_pretrained(models / "instructnet-doom", base)
    keymap = Keymap.for_env(base.meta.env_ids[0])
    assert set(keymap.keys.values()) - {"USE"} <= set(net.meta.key_names)  # every mapped button steers
    chunks = {}
    for name, instruct, keys in (("base", None, ()), ("attached", net, ()), ("left", net, ("TURN_LEFT",))):
        w = ClipWorld(base, instruct, ClipPlayConfig(steps=2, start_steps=2))
        w.start(EXAMPLE_PROMPT, 0)
        chunks[name] = w.next_chunk(keys)
    assert np.array_equal(chunks["base"], chunks["attached"])  # attached and no control: the base unchanged
    assert np.abs(chunks["left"].astype(int) - chunks["base"]).mean() > 0.5


def test_new_keys_abandon_the_chunk_in_the_making_but_never_two_chunks_in_a_row():
    from types import SimpleNamespace

    from gamengen.play.clip_server import Abandoned, ClipPlayer, ClipSessions, Job, State, restarts_for_keys
    from gamengen.play.keymap import Keymap
    from gamengen.play.server import ServerConfig

    left, right = ("TURN_LEFT",), ("TURN_RIGHT",)
    assert restarts_for_keys(Job(left, 1, None), right) and not restarts_for_keys(Job(left, 1, None), left)
    assert not restarts_for_keys(Job((), 1, None, is_start=True), right) and not restarts_for_keys(None, right)

    # The wiring, without a model: a chunk abandoned for keys makes the next one a restart, which the
    # next key change leaves alone; once it is finished, key changes abandon chunks again.
    keymap = Keymap.for_env("vizdoom:freedoom1/E1M1")
    sessions = ClipSessions(ClipPlayer(lambda: None, keymap, "t", ""), ServerConfig())
    world = SimpleNamespace(key_names=("TURN_LEFT", "TURN_RIGHT"))
    codes = {k: [c for c, e in keymap.keys.items() if e == k][0] for k in world.key_names}
    loop = SimpleNamespace(run_in_executor=lambda executor, fn, *args: None)
    state = State(started=True, sent=0, played=0)

    class Done:
        def __init__(self, error=None):
            self.error = error

        def result(self):
            if self.error:
                raise self.error
            return []

    def press(key, seq, job):
        sessions.on_message({"type": "keys", "keys": [codes[key]], "seq": seq}, world, state, job)

    async def run():
        job, _ = sessions.next_job(world, state, loop)
        assert not job.is_restart
        press("TURN_LEFT", 1, job)
        assert job.stop.is_set()  # made under no key
        await sessions.finish(None, state, job, Done(Abandoned()))
        job, _ = sessions.next_job(world, state, loop)
        assert job.keys == left and job.is_restart
        press("TURN_RIGHT", 2, job)
        assert not job.stop.is_set()  # a restart is finished whatever the keys do
        sent = []

        async def send_bytes(data):
            sent.append(data)

        await sessions.finish(SimpleNamespace(send_bytes=send_bytes), state, job, Done())
        assert len(sent) == 1 and not state.abandoned
        state.played = state.sent  # the page shows it: the next chunk is due
        job, _ = sessions.next_job(world, state, loop)
        assert job.keys == right and not job.is_restart
        press("TURN_LEFT", 3, job)
        assert job.stop.is_set()

    asyncio.run(run())
    assert state.restarts == 1
