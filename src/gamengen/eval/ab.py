"""`gamengen eval ab`: a blind A/B test of real clips against the model's (paper §5.1, human raters).

For each pair, a held-out episode is cut at a random frame: the real clip is what followed, the
model clip is the model's autoregressive play from the same context with the same actions. Half
the pairs last 1.6 s and half 3.2 s, as in the paper (raters picked the real one 58% and 60% of
the time). The page shows the two side by side in a random order and asks which is real; each
answer is appended to ``answers.jsonl``, and the summary is the share of answers that picked the
real clip, per length, with a 95% Wilson interval. 50% means the raters could not tell.

The key (which side is real) stays on the server, in ``ab.json``; clip files have random names.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request  # module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from ..atomic import append_line_durable, write_json_atomic
from ..errors import UserError

KEY, ANSWERS = "ab.json", "answers.jsonl"


@dataclass
class ABConfig:
    pairs: int = 12
    short_s: float = 1.6
    long_s: float = 3.2
    ddim_steps: int | None = None  # None: the model's
    scale: int = 3  # the clips are upscaled (nearest) to be watchable; both sides alike
    seed: int = 0


def make_pairs(model_dir, data, out, cfg: ABConfig, report=lambda n: None) -> dict:
    """Write the clips and the key into ``out``; an existing key is kept (raters can go on)."""
    from ..data.video import write_video
    from ..engine.world import EngineConfig, NeuralWorld
    from .heldout import context_at, heldout_episodes

    out = Path(out)
    if (out / KEY).exists():
        return json.loads((out / KEY).read_text())
    world = NeuralWorld(model_dir, EngineConfig(steps=cfg.ddim_steps))
    fps = world.meta.fps
    lengths = [max(2, round(s * fps)) for s in (cfg.short_s, cfg.long_s)]
    store, held = heldout_episodes(world.meta, data, min_length=max(lengths) + 2)
    rng = np.random.default_rng(cfg.seed)
    up = lambda f: np.kron(f, np.ones((cfg.scale, cfg.scale, 1), np.uint8))  # noqa: E731
    pairs = []
    for i in range(cfg.pairs):
        T = lengths[i % 2]
        rec = held[int(rng.integers(len(held)))]
        t0 = int(rng.integers(1, rec.length - T))
        frames, past = context_at(store, rec, t0, world.context)
        g = store.open_episode(rec)
        real = np.asarray(g["frames"][t0 + 1:t0 + T + 1])
        world.reset(frames, past, seed=cfg.seed * 1009 + i)
        fake = np.stack([world.step(int(a)) for a in np.asarray(g["actions"][t0:t0 + T], np.int64)])
        real_side = "a" if rng.random() < 0.5 else "b"
        names = {side: f"{secrets.token_urlsafe(9)}.mp4" for side in "ab"}
        for side, clip in ((real_side, real), ("b" if real_side == "a" else "a", fake)):
            write_video(out / "clips" / names[side], (up(f) for f in clip), fps)
        pairs.append({"pair": i, "seconds": round(T / fps, 2), "frames": T, "real": real_side, "clips": names,
                      "episode": rec.path, "t0": t0})
        report(1)
    key = {"model": str(model_dir), "data": str(data), "config": asdict(cfg), "fps": fps, "pairs": pairs}
    write_json_atomic(out / KEY, key)
    return key


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def read_answers(out) -> list[dict]:
    """Every whole line of answers.jsonl (a torn last line from a crash is skipped)."""
    path = Path(out) / ANSWERS
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def summarize(out) -> dict:
    answers = read_answers(out)
    res = {"answers": len(answers), "raters": len({a["rater"] for a in answers}), "by_length": {}}
    for s in sorted({a["seconds"] for a in answers}):
        sel = [a for a in answers if a["seconds"] == s]
        k = sum(a["correct"] for a in sel)
        res["by_length"][f"{s:g}s"] = {"n": len(sel), "picked_real": k / len(sel), "ci95": wilson(k, len(sel))}
    k = sum(a["correct"] for a in answers)
    res["picked_real"] = k / len(answers) if answers else None
    res["ci95"] = wilson(k, len(answers))
    return res


def create_ab_app(out, config, port: int):
    """The rating page, the clips, ``POST /answer`` and ``GET /summary``, behind the player's guard."""
    from ..play.server import STATIC, guard

    out = Path(out)
    key = json.loads((out / KEY).read_text())
    files = {name for p in key["pairs"] for name in p["clips"].values()}
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    guard(app, config, port)

    @app.get("/")
    async def page():
        return HTMLResponse((STATIC / "ab.html").read_text())

    @app.get("/pairs")
    async def pairs():  # what the page needs, without the key
        return [{"pair": p["pair"], "seconds": p["seconds"], "a": p["clips"]["a"], "b": p["clips"]["b"]}
                for p in key["pairs"]]

    @app.get("/clips/{name}")
    async def clip(name: str):
        if name not in files:
            return JSONResponse({"error": "no such clip"}, status_code=404)
        return FileResponse(out / "clips" / name, media_type="video/mp4")

    @app.post("/answer")
    async def answer(request: Request):
        origin, host = request.headers.get("origin"), request.headers.get("host")
        if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
            return JSONResponse({"error": "cross-origin"}, status_code=403)
        body = await request.body()
        try:
            msg = json.loads(body[:1024])
            p = key["pairs"][int(msg["pair"])]
            choice, rater = str(msg["choice"]), str(msg["rater"])[:64]
            if choice not in ("a", "b") or int(msg["pair"]) < 0:
                raise ValueError
        except (ValueError, KeyError, IndexError, TypeError):
            return JSONResponse({"error": "send {pair, choice: a|b, rater}"}, status_code=400)
        append_line_durable(out / ANSWERS, json.dumps({
            "pair": p["pair"], "seconds": p["seconds"], "choice": choice, "correct": choice == p["real"],
            "rater": rater, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        return {"ok": True}

    @app.get("/summary")
    async def summary():
        return summarize(out)

    return app


def check_out(out) -> None:
    if not (Path(out) / KEY).exists():
        raise UserError(f"no A/B test in {out} ({KEY} missing)", "make one with `gamengen eval ab --model M --data D "
                        f"--out {out}`")
