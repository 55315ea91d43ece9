"""Captions of curated clips in the ten GEN and INS fields of GameGen-X §3.2 (data/captions.py).

A store clip gets data/captions.py's structured captions, written from what the recording logged.
A video clip has no log, and no captioner (the paper's GPT-4o) looks at it here, so its fields say
what is known (the file, the times, the frame rate, the measured brightness, the camera motion
and motion level from the optical flow) and say "unknown" for the rest rather than invent it.
"""

from __future__ import annotations

import numpy as np

from ..data.captions import GEN_FIELDS, INS_FIELDS, caption, caption_text, instruction_text

UNKNOWN = "Unknown: not captioned (no captioner looked at this clip)."
# Motion words from the motion score (px/frame at REF_WIDTH): the quartiles of real DOOM play at
# 17.5 fps were 1.6 and 2.7 (docs/curation.md).
MOTION_WORDS = ((1.5, "little"), (3.0, "moderate"), (float("inf"), "fast"))


def motion_word(score: float) -> str:
    return next(word for limit, word in MOTION_WORDS if score < limit)


def _light_word(luma: float) -> str:
    return "dark" if luma < 40 else "dim" if luma < 80 else "moderately lit" if luma < 140 else "bright"


def _camera_phrase(label: str) -> str:
    return {"static": "a still camera", "pan left": "the camera pans left", "pan right": "the camera pans right",
            "forward": "the camera moves forward", "backward": "the camera moves backward",
            "mixed": "the camera moves without one main direction"}[label]


def video_fields(name: str, start_s: float, seconds: float, native_fps: float, fps: float, frame_luma: np.ndarray,
                 camera: str, motion: float) -> dict[str, str]:
    """The ten fields for a clip of a video file; ``frame_luma`` (F,) is each frame's mean luma."""
    luma = float(np.mean(frame_luma))
    first, last = float(frame_luma[0]), float(frame_luma[-1])
    light = f"Brightness {first:.0f}/255 ({_light_word(first)}) at the start"
    light += f", {last:.0f}/255 ({_light_word(last)}) at the end." if abs(last - first) >= 3 else ", steady."
    end = start_s + seconds
    fields = {
        "Summary": f"A {seconds:.1f}-second clip of the video {name} ({start_s:.1f}-{end:.1f} s): {_camera_phrase(camera)}, "
                   f"{motion_word(motion)} motion. The game, the characters and the events are unknown.",
        "Game_Meta": f"Unknown game (video file {name}); {native_fps:g} frames per second, taken at {fps:g}.",
        "Character": UNKNOWN,
        "Frame_Desc": f"Mean brightness {luma:.0f}/255 ({_light_word(luma)}). What is in view is unknown.",
        "Atmosphere": UNKNOWN,
        "Env": UNKNOWN,
        "Trans": "Unknown: no in-game events were recorded.",
        "Light": light,
        "Act": "Unknown: the player's actions were not recorded.",
        "Misc": f"Keys: not recorded. Camera: {camera} (from optical flow), {motion_word(motion)} motion ({motion:.1f} px/frame).",
    }
    assert tuple(fields) == GEN_FIELDS + INS_FIELDS
    return fields


def store_fields(store, record, start: int, end: int) -> dict[str, str]:
    """data/captions.py's fields for steps start..end-1 of an episode."""
    return caption(store, record, start, end)


def caption_record(fields: dict[str, str]) -> dict:
    """The fields and the two texts for the text encoder, as clips.jsonl holds them."""
    return {"fields": fields, "caption": caption_text(fields), "instruction": instruction_text(fields)}
