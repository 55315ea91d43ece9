"""A world you play chunk by chunk: GameGen-X's interactive generation (§3.4, §3.5).

A text prompt makes the first clip (text-to-clip). Every next chunk continues the frames made so far:
the last ``context`` frames are held clean (§3.3's frame mask, x > 0) and the rest of a clip is
generated, steered by InstructNet with the keys held when the chunk starts and the instruction
caption last given (§3.4's operation and instruction fusion). Without an InstructNet, or with no key
and no instruction, the base model alone continues the prompt: the paper's base is unchanged when
no control is given, and skipping InstructNet is also cheaper.

Chunk i is sampled with seed ``seed + i``, so the same prompt, keys and instructions give the same
world. A chunk is committed only when it is finished: one abandoned midway (``on_step`` raised)
leaves the world as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..data.captions import key_request
from ..errors import UserError
from ..models.clip_model import ClipModel
from ..models.instruct_model import InstructModel
from ..precision import native_bf16
from .clip import CONTROL_GUIDANCE, Steering, check_context, check_control_guidance, continue_clip, generate


def load_clip_play_models(model_dir, instruct_dir=None) -> tuple[ClipModel, InstructModel | None]:
    """The clip model and, when a folder is given, the InstructNet trained beside it."""
    model = ClipModel.from_pretrained(model_dir)
    return model, None if instruct_dir is None else InstructModel.from_pretrained(instruct_dir, model)


@dataclass
class ClipPlayConfig:
    # Euler steps per continuation chunk. Fewer than the model's 20 because a chunk is waited for: at the
    # bundled model's continuation shift (3) 6 steps come within 0.5 dB of 20 against the game's frames
    # (docs/gamegen_x.md, sixteenth round), and 4 lose 0.6 dB more but bring a steered chunk (control
    # guidance's third branch) within 1.5 s of the key ("Control guidance in play"). None: the model's.
    steps: int | None = 4
    start_steps: int | None = None  # Euler steps of the first clip, from text alone (None: the model's)
    guidance: float | None = None  # CFG weight on the text of every chunk (None: the model's, a continuation's
    #                                for the chunks after the first; 1 runs one branch, half the work, but
    #                                the world then drifts from the game: sixteenth round)
    context: int = 5  # frames held clean per chunk, 1 + 4k: more keeps the scene, fewer makes more new frames
    # CFG weight on the keys and instruction against InstructNet with them off (engine/clip.Steering); 1 runs
    # no third branch. The bundled InstructNet steers at 4 and barely at 1, for half again the work of a
    # steered chunk (docs/gamegen_x.md, "Control guidance in play").
    control_guidance: float = CONTROL_GUIDANCE
    seed: int = 0
    # bf16 autocast for the networks; None: where the CPU has bf16 units (elsewhere it is emulated, many
    # times slower). On a 2-core AVX-512 EPYC a steered chunk takes 1.11 s instead of 1.33 s (median of
    # five bench runs), its frames within 48-51 dB PSNR of fp32's (docs/gamegen_x.md, "bf16 in play").
    bf16: bool | None = None


class ClipWorld:
    """One player's world: the prompt, the frames made so far and the next chunk's sampling."""

    def __init__(self, model: ClipModel, instruct: InstructModel | None = None, config: ClipPlayConfig | None = None):
        self.model, self.instruct, self.config = model, instruct, config or ClipPlayConfig()
        c = self.config
        check_context(model, c.context)
        check_control_guidance(c.control_guidance)
        self.bf16 = native_bf16() is True if c.bf16 is None else c.bf16
        self.prompt: str | None = None
        self.seed = c.seed
        self.chunk = 0  # chunks made since the last start
        self.tail: np.ndarray | None = None  # (context, H, W, 3) uint8: the last frames made

    @property
    def key_names(self) -> tuple[str, ...]:
        """The keys the operation signal knows (none without an InstructNet)."""
        return tuple(self.instruct.meta.key_names) if self.instruct is not None else ()

    @property
    def chunk_frames(self) -> int:
        """New frames per continuation chunk."""
        return self.model.meta.frames - self.config.context

    def start(self, prompt: str, seed: int | None = None, on_step: Callable[[], None] | None = None) -> np.ndarray:
        """A new world from text: uint8 (F, H, W, 3). A UserError for an empty or over-long prompt."""
        c = self.config
        seed = c.seed if seed is None else seed
        frames = generate(self.model, prompt, seed, c.start_steps, c.guidance, on_step=on_step, bf16=self.bf16)
        self.prompt, self.seed, self.chunk, self.tail = prompt, seed, 1, frames[-c.context:]
        return frames

    def next_chunk(self, keys: tuple[str, ...] = (), instruction: str | None = None,
                   on_step: Callable[[], None] | None = None) -> np.ndarray:
        """The next ``chunk_frames`` frames (N, H, W, 3) under ``keys`` (InstructNet key names, held
        through the chunk) and ``instruction``; both are ignored without an InstructNet."""
        if self.tail is None:
            raise UserError("the world has not started", "start it with a prompt")
        c = self.config
        steer = None
        if self.instruct is not None and (keys or instruction):
            if instruction is None:
                # Keys alone: InstructNet trained with keys only beside their clip's instruction caption
                # (§3.5's recipe), so they get the Act and Misc fields of holding them, as `clip
                # eval-control` gives them (docs/gamegen_x.md, "The instruction's fields").
                instruction = key_request("+".join(k for k in self.key_names if k in keys))  # unknown keys: Steering refuses them
            steer = Steering(self.instruct, tuple(keys), instruction, guidance=c.control_guidance)
        n = self.chunk_frames
        # Only what is shown and what the next chunk continues from is decoded (the context's own
        # reconstruction is not shown).
        clip = continue_clip(self.model, self.tail, self.prompt, self.seed + self.chunk, c.steps, c.guidance,
                             steer=steer, on_step=on_step, last=max(n, c.context), bf16=self.bf16)
        self.chunk, self.tail = self.chunk + 1, clip[-c.context:]
        return clip[-n:]
