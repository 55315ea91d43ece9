"""Keymaps are data, one JSON file per game kind (keymaps/*.json), so a new game needs no code.

A keymap sends browser key codes (``KeyboardEvent.code``) to *elements*: the game's buttons where it
has them (ViZDoom), otherwise words of its action names (``UP``, ``FIRE``). ``while_held`` rewrites
elements while a modifier is down (DOOM's Alt turns turning into strafing).

Each frame the held keys become a set of elements, and that set becomes the one discrete action of
the model's action set that presses the most of them and nothing else: the model was trained on
those actions only, so an unknown chord falls back to its closest trained action.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ..envs.base import ActionSet
from ..errors import UserError

KEYMAPS = Path(__file__).with_name("keymaps")
KIND_KEYMAP = {"vizdoom": "vizdoom", "toy": "toy", "atari": "atari", "gym": "atari"}
MAX_KEYS = 16  # more held keys than this in one message is not a keyboard


@dataclass
class Keymap:
    keys: dict[str, str]
    while_held: dict[str, dict[str, str]]
    help: str = ""

    @classmethod
    def load(cls, path: str | Path) -> "Keymap":
        try:
            d = json.loads(Path(path).read_text())
            km = cls({str(k): str(v) for k, v in d["keys"].items()},
                     {str(m): {str(a): str(b) for a, b in r.items()} for m, r in d.get("while_held", {}).items()},
                     str(d.get("help", "")))
        except (OSError, ValueError, KeyError, AttributeError, TypeError) as e:
            raise UserError(f"keymap {path} is not valid ({type(e).__name__}: {str(e)[:80]})",
                            'write {"keys": {"KeyW": "MOVE_FORWARD", ...}} (see src/gamengen/play/keymaps/)') from None
        return km

    @classmethod
    def for_env(cls, env_id: str) -> "Keymap":
        kind = env_id.partition(":")[0]
        if kind not in KIND_KEYMAP:
            raise UserError(f"no keymap for '{env_id}'", "pass --keymap FILE.json (see src/gamengen/play/keymaps/)")
        return cls.load(KEYMAPS / f"{KIND_KEYMAP[kind]}.json")

    @classmethod
    def for_clips(cls, env_ids: list[str], path: Path | None = None) -> "Keymap":
        """The keymap clip play steers a clip model with: ``path`` when given, else the keymap of the
        first game its clips were recorded from; none for clips curated from video files."""
        if path is not None:
            return cls.load(path)
        if env_ids:
            return cls.for_env(env_ids[0])
        return cls({}, {}, "this model's clips came from videos: no keys")

    def elements(self, codes: list[str]) -> frozenset[str]:
        """Held key codes -> the elements they press, modifiers applied."""
        held = set(codes)
        out = set()
        for code in held:
            e = self.keys.get(code)
            if e is None:
                continue
            for mod, rewrite in self.while_held.items():
                if mod in held:
                    e = rewrite.get(e, e)
            out.add(e)
        return frozenset(out)

    def to_json(self) -> dict:
        return {"keys": self.keys, "while_held": self.while_held, "help": self.help}


class ActionResolver:
    """Held key codes -> one action index of an ActionSet."""

    def __init__(self, keymap: Keymap, action_set: ActionSet):
        self.keymap = keymap
        elements = set(keymap.keys.values()) | {v for r in keymap.while_held.values() for v in r.values()}
        if action_set.buttons:
            self.sets = [frozenset(b for b, on in zip(action_set.buttons, combo) if on) for combo in action_set.combos]
        else:  # words of the names: "UPRIGHTFIRE" -> {UP, RIGHT, FIRE}
            words = re.compile("|".join(sorted(map(re.escape, elements), key=len, reverse=True)) or "$^")
            self.sets = [frozenset(words.findall(name)) for name in action_set.names]
        self.names = action_set.names

    def action(self, codes: list[str]) -> int:
        pressed = self.keymap.elements(codes)
        # Most held elements covered, never an element that is not held, then the smallest chord.
        best = max(range(len(self.sets)),
                   key=lambda i: (not (self.sets[i] - pressed), len(self.sets[i] & pressed), -len(self.sets[i]), -i))
        return best
