"""The browser player: FastAPI + WebSocket (docs/player.md).

Protocol, one WebSocket per player (``/ws?token=...``):

- server -> client, text: ``{"type": "hello", ...}`` once (views, keymap, starts, fps), and
  ``{"type": "recording", "url": ...}`` when a recording stops: the mp4's URL, or ``"url": null``
  and ``"note": "nothing recorded"`` when it holds no frames.
- client -> server, text JSON, at most ``max_message`` bytes:
  ``{"type": "step", "seq": n, "keys": ["KeyW", ...]}``, ``{"type": "reset", "start": i}``,
  ``{"type": "record", "on": true|false}``.
- server -> client, binary, one per step or reset: ``b"GNF1"``, a uint32 header length, a JSON
  header (seq, step, ms per stage, ended, diverged, and per view its MIME type and byte size), then
  the images.

The client asks for the next frame only when the last one has arrived, so one frame is in flight
per client and the newest input always wins; it samples the keys once per request, and the time
from sending a request to drawing its frame is the input-to-frame latency the HUD shows.

Safe defaults: loopback only, a per-launch token on every request but ``/favicon.ico`` (an empty
204), Host and Origin checked (so a web page elsewhere cannot drive the server: DNS rebinding,
cross-site WebSockets), a session limit, an idle timeout, a message size limit and a nesting limit.
A bad message closes that socket with a close code; the server lives on.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
import re
import secrets
import shutil
import socket
import struct
import tempfile
import time
from dataclasses import dataclass, field
from html import escape as html_escape
from pathlib import Path
from typing import Callable

import numpy as np
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from PIL import Image

from ..errors import UserError
from .compute import compute_thread
from .games import PlayableGame
from .keymap import MAX_KEYS, ActionResolver

STATIC = Path(__file__).with_name("static")
MAGIC = b"GNF1"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# WebSocket close codes (RFC 6455 §7.4.1, and 4000+ for our own)
POLICY, UNSUPPORTED, INVALID, TOO_BIG, TRY_LATER, GOING_AWAY = 1008, 1003, 1007, 1009, 1013, 1001
MAX_RECORDED_FRAMES = 35 * 600  # ten minutes of DOOM time per recording
# Valid messages nest 2 deep ({"keys": [...]}); json.loads recurses once per level and a 4 KB
# message of "[[[[..." would run it out of stack (RecursionError), so deeper text is refused unparsed.
MAX_NESTING = 4
ESCAPE, STRING, NOT_BRACKET = re.compile(r"\\.", re.S), re.compile(r'"[^"]*"'), re.compile(r"[^\[\]{}]")
FAVICON = "/favicon.ico"  # browsers fetch it without the page's token


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"  # loopback unless the user passes --host
    port: int = 8000  # 0 picks a free port
    max_sessions: int = 8
    idle_timeout: float = 300.0  # seconds without a message before a socket is closed
    max_message: int = 4096  # bytes per client message
    jpeg_quality: int = 90
    fps: float | None = None  # frame pacing cap the page applies; None: the game's own rate (Player.fps)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))

    def __post_init__(self):
        if self.max_sessions < 1:
            raise UserError("--max-sessions must be at least 1", "pass --max-sessions 1 or more")
        if not 1 <= self.jpeg_quality <= 100:
            raise UserError("--jpeg-quality must be in 1..100", "pass e.g. --jpeg-quality 90")


@dataclass
class Player:
    """The server's view of what it serves: how to make a game session and what the page needs."""

    make_game: Callable[[], PlayableGame]  # a new game per session
    resolver: ActionResolver
    n_starts: int
    title: str
    info: dict = field(default_factory=dict)  # shown on the page (model, steps, ...)
    fps: float = 35.0  # the game's steps per second (DOOM: 35 tics / frame skip), the page's pacing


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def pack_frame(header: dict, images: list[bytes]) -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(head)), head, *images])


def unpack_frame(data: bytes) -> tuple[dict, list[bytes]]:
    """The inverse of pack_frame (for tests, `bench play` and other Python clients)."""
    if data[:4] != MAGIC:
        raise ValueError("not a gamengen frame")
    (n,) = struct.unpack("<I", data[4:8])
    header = json.loads(data[8:8 + n])
    images, at = [], 8 + n
    for v in header["views"]:
        images.append(data[at:at + v["size"]])
        at += v["size"]
    return header, images


class BadMessage(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def nesting(text: str) -> int:
    """How deep brackets nest in a JSON text, not counting those inside strings; linear, no parsing."""
    brackets = NOT_BRACKET.sub("", STRING.sub("", ESCAPE.sub("", text)))
    return max(itertools.accumulate((1 if c in "[{" else -1 for c in brackets), initial=0))


def parse_json(text: str) -> dict:
    """A client message's JSON object with a string 'type', parsed without deep recursion."""
    if nesting(text) > MAX_NESTING:
        raise BadMessage(INVALID, "JSON nested too deep")
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):  # any text that does not parse is the client's error, never ours
        raise BadMessage(INVALID, "not JSON") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise BadMessage(INVALID, "expected an object with a 'type'")
    return msg


def key_codes(msg: dict) -> list[str]:
    """The message's 'keys': a short list of short key codes."""
    keys = msg.get("keys", [])
    if not isinstance(keys, list) or len(keys) > MAX_KEYS or not all(isinstance(k, str) and len(k) <= 32 for k in keys):
        raise BadMessage(INVALID, "'keys' must be a short list of key codes")
    return keys


def whole(msg: dict, name: str, below: int) -> int:
    """The message's integer ``name`` (default 0), in 0..below-1."""
    n = msg.get(name, 0)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < below:
        raise BadMessage(INVALID, f"'{name}' must be an integer in 0..{below - 1}")
    return n


def parse_message(text: str, n_starts: int) -> dict:
    """Validate one client message; raise BadMessage with the close code to use."""
    msg = parse_json(text)
    kind = msg["type"]
    if kind == "step":
        return {"type": kind, "keys": key_codes(msg), "seq": whole(msg, "seq", 2**53)}
    if kind == "reset":
        return {"type": kind, "start": whole(msg, "start", n_starts)}
    if kind == "record":
        if not isinstance(msg.get("on"), bool):
            raise BadMessage(INVALID, "'on' must be true or false")
        return {"type": kind, "on": msg["on"]}
    raise BadMessage(INVALID, f"unknown message type '{kind[:20]}'")


async def admit(ws: WebSocket, check: Callable[[str | None, str | None], str | None], open_now: int,
                max_sessions: int) -> bool:
    """Accept a WebSocket that has the token, a loopback Host and no foreign Origin (a page elsewhere
    must not drive the server: cross-site WebSockets are not bound by the same-origin policy), while
    fewer than ``max_sessions`` are open; otherwise close it with the reason and return False."""
    host = ws.headers.get("host")
    why = check(ws.query_params.get("token"), host)
    origin = ws.headers.get("origin")
    if why is None and origin is not None and origin not in (f"http://{host}", f"https://{host}"):
        why = f"cross-origin request from {origin!r}"
    if why:
        await ws.close(code=POLICY, reason=why[:120])  # before accept: the handshake gets a 403
        return False
    await ws.accept()
    if open_now >= max_sessions:
        await ws.close(code=TRY_LATER, reason=f"server full ({max_sessions} sessions)")
        return False
    return True


async def read_message(ws: WebSocket, config: ServerConfig, parse: Callable[[str], dict]) -> dict | None:
    """The next message as ``parse`` validates it, or None once the socket is closed: after
    ``config.idle_timeout`` seconds of silence, or for a bad message (binary, over ``max_message``
    bytes, or one ``parse`` refuses with BadMessage), with its close code."""
    try:
        msg = await asyncio.wait_for(ws.receive(), timeout=config.idle_timeout)
    except asyncio.TimeoutError:
        await ws.close(code=GOING_AWAY, reason="idle timeout")
        return None
    if msg["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(msg.get("code", 1000))
    try:
        if msg.get("bytes") is not None:
            raise BadMessage(UNSUPPORTED, "binary messages are not accepted")
        text = msg.get("text") or ""
        if len(text.encode()) > config.max_message:
            raise BadMessage(TOO_BIG, f"message over {config.max_message} bytes")
        return parse(text)
    except BadMessage as e:
        await ws.close(code=e.code, reason=e.reason[:120])
        return None


def allowed_hosts(config: ServerConfig, port: int) -> set[str] | None:
    """Host headers we answer; None = any (the user bound a non-loopback address on purpose)."""
    if config.host in ("0.0.0.0", "::"):
        return None
    names = set(LOOPBACK) if config.host in LOOPBACK else {config.host}
    return {f"{n}:{port}" for n in names} | {f"[{n}]:{port}" for n in names if ":" in n}


def guard(app: FastAPI, config: ServerConfig, port: int) -> Callable[[str | None, str | None], str | None]:
    """Refuse every HTTP request without the token or with a foreign Host header (403); returns the
    check, for WebSockets, which the middleware does not see."""
    hosts = allowed_hosts(config, port)

    def check(token: str | None, host: str | None) -> str | None:
        if hosts is not None and host not in hosts:
            return f"unexpected Host header {host!r}"
        if token is None or not secrets.compare_digest(token.encode(), config.token.encode()):
            return "missing or wrong token (use the URL the server printed)"
        return None

    @app.middleware("http")
    async def middleware(request: Request, call_next):
        if request.url.path == FAVICON:  # "no icon" reveals nothing, and a 403 here litters the console
            return Response(status_code=204)
        why = check(request.query_params.get("token"), request.headers.get("host"))
        if why:
            return PlainTextResponse(f"403 forbidden: {why}\n", status_code=403)
        response = await call_next(request)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    return check


def page_app(sessions, config: ServerConfig, port: int, page: str, title: str) -> FastAPI:
    """A FastAPI app behind ``guard`` that serves the static ``page`` at / and ``sessions.connect``
    at /ws, and closes ``sessions`` when it stops."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        sessions.close()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    sessions.check = guard(app, config, port)

    @app.get("/")
    async def index():
        html = (STATIC / page).read_text().replace("{{COMMON_JS}}", (STATIC / "common.js").read_text())
        html = html.replace("{{COMMON_CSS}}", (STATIC / "common.css").read_text())
        return HTMLResponse(html.replace("{{TITLE}}", html_escape(title)))  # a model's folder name is not markup

    app.websocket("/ws")(sessions.connect)
    return app


def create_app(player: Player, config: ServerConfig, port: int):
    """The player's FastAPI app: the page, finished recordings and the play WebSocket."""
    sessions = Sessions(player, config)
    app = page_app(sessions, config, port, "index.html", player.title)

    @app.get("/recording/{name}")
    async def recording(name: str):
        path = sessions.recordings / name
        if not name.endswith(".mp4") or path.parent != sessions.recordings or not path.is_file():
            return PlainTextResponse("no such recording\n", status_code=404)
        return FileResponse(path, media_type="video/mp4", filename="gamengen-session.mp4")

    return app


class Sessions:
    """The play sessions of one server: admission (token, Host, Origin, the session limit), one
    game per session stepped on a single compute thread, and its recordings."""

    def __init__(self, player: Player, config: ServerConfig):
        self.player, self.config = player, config
        self.fps = config.fps or player.fps
        self.compute = compute_thread()  # one model step at a time, on the thread the command loaded the model on
        self.recordings = Path(tempfile.mkdtemp(prefix="gamengen-recordings-"))
        self.open = 0
        self.check: Callable[[str | None, str | None], str | None] = lambda token, host: None

    def close(self) -> None:
        shutil.rmtree(self.recordings, ignore_errors=True)

    async def connect(self, ws: WebSocket):
        if not await admit(ws, self.check, self.open, self.config.max_sessions):
            return
        self.open += 1
        loop = asyncio.get_running_loop()
        game = None
        player = self.player
        try:
            game = await loop.run_in_executor(self.compute, player.make_game)
            await ws.send_text(json.dumps({
                "type": "hello", "title": player.title, "views": list(game.views), "starts": player.n_starts,
                "fps": self.fps, "keymap": player.resolver.keymap.to_json(),
                "actions": list(player.resolver.names), "info": player.info}))
            await self.serve(ws, game, loop)
        except WebSocketDisconnect:
            pass
        finally:
            self.open -= 1
            if game is not None:
                await loop.run_in_executor(self.compute, game.close)

    async def save_recording(self, recorded: list[list[bytes]], loop) -> dict:
        """The 'recording' message for a stopped recording; an empty one writes no file (no empty mp4)."""
        if not recorded:
            return {"type": "recording", "url": None, "note": "nothing recorded"}
        name = f"{secrets.token_urlsafe(12)}.mp4"
        await loop.run_in_executor(None, write_recording, self.recordings / name, recorded, self.fps)
        return {"type": "recording", "url": f"recording/{name}?token={self.config.token}"}

    async def receive(self, ws, started: bool) -> dict | None:
        """The next valid message, or None once the session is closed (idle, or a bad message)."""
        def parse(text: str) -> dict:
            m = parse_message(text, self.player.n_starts)
            if m["type"] == "step" and not started:
                raise BadMessage(INVALID, "send a reset before the first step")
            return m

        return await read_message(ws, self.config, parse)

    async def serve(self, ws, game: PlayableGame, loop):
        step, started, recorded, recording_on = 0, False, [], False
        while True:
            m = await self.receive(ws, started)
            if m is None:
                return
            if m["type"] == "record":
                if m["on"]:
                    recorded, recording_on = [], True
                elif recording_on:
                    recording_on = False
                    await ws.send_text(json.dumps(await self.save_recording(recorded, loop)))
                    recorded = []
                continue
            t0 = time.perf_counter()
            if m["type"] == "reset":
                frames = await loop.run_in_executor(self.compute, game.reset, m["start"])
                step, started, seq = 0, True, 0
            else:
                action = self.player.resolver.action(m["keys"])
                frames = await loop.run_in_executor(self.compute, game.step, action)
                step, seq = step + 1, m["seq"]
            t1 = time.perf_counter()
            images = [encode_jpeg(frames[v], self.config.jpeg_quality) for v in game.views]
            ms = {k: round(v, 2) for k, v in game.timings.items()}
            ms.update(step=round((t1 - t0) * 1e3, 2), encode=round((time.perf_counter() - t1) * 1e3, 2))
            header = {"seq": seq, "step": step, "ms": ms, "ended": bool(game.ended), "diverged": bool(game.diverged),
                      "views": [{"name": v, "mime": "image/jpeg", "size": len(b)} for v, b in zip(game.views, images)]}
            await ws.send_bytes(pack_frame(header, images))
            if recording_on and len(recorded) < MAX_RECORDED_FRAMES:
                recorded.append(images)


def write_recording(path: Path, recorded: list[list[bytes]], fps: float) -> None:
    """The session as mp4: the views side by side, decoded from the JPEGs that were sent."""
    from ..data.video import write_video

    def frames():
        for images in recorded:
            yield np.concatenate([np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in images], axis=1)

    write_video(path, frames(), fps)


def bind(config: ServerConfig) -> socket.socket:
    """Bind and listen before starting, so port 0 resolves and the printed URL works at once."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
        sock.listen(128)  # connections made before uvicorn starts wait in the backlog
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {config.host}:{config.port} ({e.strerror})",
                        "pass another --port (0 picks a free one)") from None
    return sock


def url_of(config: ServerConfig, port: int) -> str:
    host = "127.0.0.1" if config.host in ("0.0.0.0", "::") else config.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/?token={config.token}"


def serve_app(make_app: Callable[[int], FastAPI], config: ServerConfig,
              on_ready: Callable[[str], None] = print) -> None:
    """Bind, print the URL (with its token), serve until Ctrl-C."""
    import uvicorn

    sock = bind(config)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_app(port), log_level="warning", ws_max_size=config.max_message,
                                           ws_ping_interval=20, ws_ping_timeout=20, lifespan="on"))
    on_ready(url_of(config, port))
    server.run(sockets=[sock])
