"""Interactive clip play in the browser (GameGen-X §3.4, §3.5; docs/gamegen_x.md, "Clip play").

A text prompt starts a world (text-to-clip); each next chunk continues it, steered by InstructNet
with the keys held and the instruction given (engine/clip_play.py). The next chunk is generated while
the current one plays: the server makes chunk n + 1 as soon as the page starts showing chunk n, so
at most one chunk waits unseen. When the keys change while a chunk is being made under other keys,
that chunk is abandoned and begun again under the new keys, so a key shows one chunk-time after it is
pressed; but a chunk that is itself a restart is never abandoned, so a player who keeps changing keys
still gets every other chunk at worst, and the keys they changed to act on the chunk after it.

Protocol, one WebSocket per player (``/ws?token=...``), with play's admission (token, loopback Host,
no foreign Origin, a session limit, an idle timeout, a message size and nesting limit):

- server -> client, text: ``{"type": "hello", ...}`` once (fps, clip and chunk frames, keymap, the
  InstructNet's keys or none, an example prompt), ``{"type": "error", "message": ...}`` for a prompt
  or instruction the text encoder refuses (the socket stays open: fix it and send again).
- client -> server, text JSON: ``{"type": "start", "prompt": str, "seed": n}``,
  ``{"type": "keys", "seq": n, "keys": ["KeyW", ...]}`` whenever the held keys change,
  ``{"type": "instruction", "text": str}`` ("" clears it), ``{"type": "played", "chunk": n}`` when the
  page starts showing chunk n.
- server -> client, binary, one per chunk: play's frame packing (``server.pack_frame``) with one
  JPEG per frame as its views, and a header with the chunk number, the keys and ``keys_seq`` it was
  made under, its instruction, and the ms it took (``generate``, ``encode``) and its restarts.

The page plays the frames at the model's fps; the time from a key change to the first frame of the
first chunk made under it is the key-to-visible time its HUD shows (`gamengen bench clip-play`
measures the same through this server).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from ..engine.clip_play import ClipWorld
from ..errors import UserError
from .compute import compute_thread
from .keymap import Keymap
from .server import (INVALID, BadMessage, ServerConfig, admit, encode_jpeg, key_codes, pack_frame, page_app,
                     parse_json, read_message, whole)

MAX_TEXT = 2000  # characters of a prompt or an instruction (the text encoder's token limit is checked too)
MAX_SEED = 2**31


class Abandoned(Exception):
    """A chunk stopped before its last Euler step: the keys changed, a new world started, or the player left."""


@dataclass
class ClipPlayer:
    """What the server plays: a new world per session, the keymap, and what the page shows."""

    make_world: Callable[[], ClipWorld]
    keymap: Keymap
    title: str
    example: str  # a prompt the page starts with
    info: dict = field(default_factory=dict)
    fps: float = 17.5


def parse_clip_message(text: str) -> dict:
    """Validate one client message; raise BadMessage with the close code to use."""
    msg = parse_json(text)
    kind = msg["type"]
    if kind in ("start", "instruction"):
        name = "prompt" if kind == "start" else "text"
        value = msg.get(name)
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            raise BadMessage(INVALID, f"'{name}' must be a string of at most {MAX_TEXT} characters")
        out = {"type": kind, name: value}
        if kind == "start":
            out["seed"] = whole(msg, "seed", MAX_SEED)
        return out
    if kind == "keys":
        return {"type": kind, "keys": key_codes(msg), "seq": whole(msg, "seq", 2**53)}
    if kind == "played":
        return {"type": kind, "chunk": whole(msg, "chunk", 2**53)}
    raise BadMessage(INVALID, f"unknown message type '{kind[:20]}'")


@dataclass
class Job:
    """A chunk in the making; ``step`` is the world's ``on_step``: it stops the chunk at its next Euler
    step once ``stop`` is set."""

    keys: tuple[str, ...]
    keys_seq: int
    instruction: str | None
    is_start: bool = False  # a world's first clip: text-to-clip, not steered, never begun again for keys
    is_restart: bool = False  # begun because the one before it was abandoned: finished whatever the keys do
    started: float = field(default_factory=time.perf_counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def begin(self) -> None:
        """On the compute thread: the time spent queued behind other sessions is not this chunk's."""
        if self.stop.is_set():  # the player changed their mind while it was queued
            raise Abandoned()
        self.started = time.perf_counter()

    def step(self) -> None:
        if self.stop.is_set():
            raise Abandoned()


@dataclass
class State:
    """One session's player state, as the messages leave it."""

    keys: tuple[str, ...] = ()
    keys_seq: int = 0
    instruction: str | None = None
    start: dict | None = None  # a start asked for and not yet begun
    started: bool = False  # a world exists
    sent: int = -1  # the last chunk sent
    played: int = -1  # the last chunk the page started showing
    restarts: int = 0
    abandoned: bool = False  # the last chunk ended unfinished


def restarts_for_keys(job: Job | None, keys: tuple[str, ...]) -> bool:
    """Whether new held ``keys`` abandon the chunk in the making (module doc): a continuation made under
    other keys that is not itself a restart."""
    return job is not None and not job.is_start and not job.is_restart and job.keys != keys


class ClipSessions:
    """The clip-play sessions of one server: admission as play's, one world per session, and one
    compute thread that makes every session's chunks in turn."""

    def __init__(self, player: ClipPlayer, config: ServerConfig):
        self.player, self.config = player, config
        self.compute = compute_thread()  # the thread the command loaded the models on (play/compute.py)
        self.open = 0
        self.check: Callable[[str | None, str | None], str | None] = lambda token, host: None

    def close(self) -> None:
        pass  # the compute thread is the process's; a closed session's chunk stops at its next step

    async def connect(self, ws: WebSocket):
        if not await admit(ws, self.check, self.open, self.config.max_sessions):
            return
        self.open += 1
        loop = asyncio.get_running_loop()
        try:
            world = await loop.run_in_executor(self.compute, self.player.make_world)
            p = self.player
            await ws.send_text(json.dumps({
                "type": "hello", "title": p.title, "fps": p.fps, "frames": world.model.meta.frames,
                "chunk_frames": world.chunk_frames, "keymap": p.keymap.to_json(), "keys": list(world.key_names),
                "instruct": world.instruct is not None, "example": p.example, "info": p.info}))
            await self.serve(ws, world, loop)
        except WebSocketDisconnect:
            pass
        finally:
            self.open -= 1

    def held(self, world: ClipWorld, codes: list[str]) -> tuple[str, ...]:
        """Held key codes -> the InstructNet keys they press, in its order."""
        elements = self.player.keymap.elements(codes)
        return tuple(k for k in world.key_names if k in elements)

    async def serve(self, ws, world: ClipWorld, loop):
        state, job, future = State(), None, None
        receiving = asyncio.ensure_future(read_message(ws, self.config, parse_clip_message))
        try:
            while True:
                if future is None:
                    job, future = self.next_job(world, state, loop)
                waiting = {receiving} | ({future} if future is not None else set())
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if receiving in done:
                    m = receiving.result()  # WebSocketDisconnect propagates
                    if m is None:
                        return
                    self.on_message(m, world, state, job)
                    receiving = asyncio.ensure_future(read_message(ws, self.config, parse_clip_message))
                if future is not None and future.done():
                    await self.finish(ws, state, job, future)
                    job, future = None, None
        finally:
            receiving.cancel()
            if job is not None:
                job.stop.set()  # the player left: the compute thread moves on to other sessions
                future.add_done_callback(lambda f: f.cancelled() or f.exception())  # Abandoned, seen

    def on_message(self, m: dict, world: ClipWorld, state: State, job: Job | None) -> None:
        kind = m["type"]
        if kind == "start":
            state.start = {"prompt": m["prompt"], "seed": m["seed"]}
            if job is not None:
                job.stop.set()
        elif kind == "keys":
            keys = self.held(world, m["keys"])
            if keys != state.keys:
                state.keys = keys
                if restarts_for_keys(job, keys) and state.start is None:
                    job.stop.set()
            state.keys_seq = max(state.keys_seq, m["seq"])
        elif kind == "instruction":
            state.instruction = m["text"].strip() or None
        elif kind == "played":
            state.played = max(state.played, min(m["chunk"], state.sent))

    def next_job(self, world: ClipWorld, state: State, loop):
        """Begin the next chunk if one is due: a new world, or the chunk after the one playing."""
        if state.start is not None:
            job = Job((), state.keys_seq, None, is_start=True)
            start, state.start = state.start, None
            state.started, state.sent, state.played, state.abandoned = False, -1, -1, False
            return job, loop.run_in_executor(self.compute, self.run_start, world, start, job)
        if state.started and state.sent - state.played < 1:
            job = Job(state.keys, state.keys_seq, state.instruction, is_restart=state.abandoned)
            return job, loop.run_in_executor(self.compute, self.run_chunk, world, job)
        return None, None

    @staticmethod
    def run_start(world: ClipWorld, start: dict, job: Job):
        job.begin()
        return world.start(start["prompt"], start["seed"], on_step=job.step)

    @staticmethod
    def run_chunk(world: ClipWorld, job: Job):
        job.begin()
        return world.next_chunk(job.keys, job.instruction, on_step=job.step)

    async def finish(self, ws, state: State, job: Job, future) -> None:
        """Send a finished chunk, or note why there is none."""
        try:
            frames = future.result()
        except Abandoned:
            state.restarts, state.abandoned = state.restarts + 1, True
            return
        except UserError as e:  # a prompt or an instruction the text encoder refuses
            if job.instruction is not None and state.started:
                state.instruction = None  # not tried again until the player sends another
            else:
                state.started = False
            await ws.send_text(json.dumps({"type": "error", "message": str(e)}))
            return
        state.abandoned = False
        generate_ms = (time.perf_counter() - job.started) * 1e3
        t0 = time.perf_counter()
        images = [encode_jpeg(f, self.config.jpeg_quality) for f in frames]
        state.started, state.sent = True, state.sent + 1
        header = {"chunk": state.sent, "keys": list(job.keys), "keys_seq": job.keys_seq,
                  "instruction": job.instruction, "restarts": state.restarts,
                  "ms": {"generate": round(generate_ms, 1), "encode": round((time.perf_counter() - t0) * 1e3, 1)},
                  "views": [{"name": f"f{i}", "mime": "image/jpeg", "size": len(b)} for i, b in enumerate(images)]}
        await ws.send_bytes(pack_frame(header, images))


def create_clip_app(player: ClipPlayer, config: ServerConfig, port: int) -> FastAPI:
    """The clip player's FastAPI app: the page and the play WebSocket."""
    return page_app(ClipSessions(player, config), config, port, "clip.html", player.title)
