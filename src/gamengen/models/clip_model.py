"""A clip model folder, and the one class that reads and writes it (GameGen-X §3.3, §3.5).

`gamengen clip train` writes one; `gamengen clip generate` and `clip continue` read it, all through
``ClipModel``, so only this module knows the folder's file names and the keys of its JSON. It is
self-contained (the codec and the text encoder are copied in), and only JSON and safetensors are
read back (no pickles)::

    msdit/              the MSDiT (diffusers save_pretrained: config.json + safetensors)
    codec/              the video VAE over its 2D autoencoder (models/video_vae.py, ClipCodec)
    text/               the frozen T5 caption encoder (models/text_encoder.py, CaptionEncoder)
    gamengen_clip.json  {"format": "gamengen-clip-model", "version": 1, "meta": {...}, "sampler": {...}}
    README.md           the model card
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..atomic import write_bytes_atomic, write_folder_atomic, write_json_atomic
from ..errors import UserError
from .loading import load_net
from .msdit import MSDiT
from .text_encoder import CaptionEncoder
from .video_vae import ClipCodec

FORMAT, VERSION = "gamengen-clip-model", 1
META_FILE, CARD = "gamengen_clip.json", "README.md"
MSDIT_DIR, CODEC_DIR, TEXT_DIR = "msdit", "codec", "text"
FIX = "pass the model/ folder that `gamengen clip train` writes"
# Other gamengen folders someone may pass instead, by the file that marks each.
OTHER_KINDS = {"gamengen_wm.json": "a world model", "gamengen_video_vae.json": "a video VAE",
               "gamengen_text.json": "a text encoder", "gamengen_ae.json": "an autoencoder",
               "dataset.json": "a clip dataset", "store.json": "a trajectory store"}


@dataclass
class ClipSampler:
    """How the model is sampled: part of the model, not of its training (§3.5: Euler, 10-50 steps, CFG)."""

    steps: int = 20  # Euler steps from t = 1 to 0 (the paper samples with 10-50)
    guidance: float = 4.0  # CFG weight on the text; the paper gives none (OpenSora 1.2 uses 7); 1 = no CFG
    shift: float = 1.0  # SD3's timestep shift (diffusion/flow.flow_times); 1 = uniform steps
    # The flow time a continuation's context is shown at (diffusion/flow.euler_sample's context_t): for a
    # model trained with context noise (train/clip.py), GameNGen §3.2.1 picks the level at inference. 0: clean.
    context_noise: float = 0.0
    # A continuation's own CFG weight and shift (None: as text-to-clip). Ours: the paper samples both
    # tasks alike, but with clean context frames the Euler steps are better spent at high noise
    # (docs/gamegen_x.md, sixteenth round: shift 3 brings a continuation 0.6-1.4 dB nearer the game).
    continuation_guidance: float | None = None
    continuation_shift: float | None = None

    def check(self) -> "ClipSampler":
        cg, cs = self.continuation_guidance, self.continuation_shift
        if (not (isinstance(self.steps, int) and self.steps >= 1) or self.guidance < 0 or self.shift <= 0
                or not 0 <= self.context_noise < 1 or (cg is not None and cg < 0) or (cs is not None and cs <= 0)):
            raise ValueError(f"sampler steps {self.steps}, guidance {self.guidance}, shift {self.shift}, "
                             f"context noise {self.context_noise}, continuation guidance {cg}, shift {cs}")
        return self

    def for_task(self, continuing: bool) -> tuple[float, float]:
        """(CFG weight, shift) of text-to-clip, or of a continuation when ``continuing``."""
        if not continuing:
            return self.guidance, self.shift
        return (self.guidance if self.continuation_guidance is None else self.continuation_guidance,
                self.shift if self.continuation_shift is None else self.continuation_shift)


@dataclass
class ClipModelMeta:
    """What the model makes and what it was trained on."""

    frames: int  # F video frames per clip, 1 + 4k (the codec's grouping)
    fps: float
    height: int
    width: int
    env_ids: list[str] = field(default_factory=list)  # the games of the clips (stores' env ids), if known
    dataset: dict = field(default_factory=dict)  # the clip dataset: path, source, clip count
    train_steps: int = 0
    presets: dict = field(default_factory=dict)  # {"msdit", "text", "video_vae", "ae"}
    # How training drew its tasks (GameGen-X §3.5): text dropout, continuation share, timestep draw.
    training: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "ClipModelMeta":
        m = cls(int(d["frames"]), float(d["fps"]), int(d["height"]), int(d["width"]), [str(e) for e in d["env_ids"]],
                dict(d["dataset"]), int(d["train_steps"]), dict(d["presets"]), dict(d.get("training") or {}))
        if m.frames < 1 or (m.frames - 1) % 4 or m.fps <= 0 or m.height < 1 or m.width < 1:
            raise ValueError(f"{m.frames} frames at {m.fps} fps, {m.width}x{m.height}")
        return m


@dataclass
class ClipModel:
    net: MSDiT
    codec: ClipCodec
    text: CaptionEncoder
    meta: ClipModelMeta
    sampler: ClipSampler = field(default_factory=ClipSampler)
    _encoded: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        problem = _mismatch(self.net, self.codec, self.text, self.meta)
        if problem:
            raise UserError(f"the clip model's parts do not fit together: {problem}", "re-train it with "
                            "`gamengen clip train`")

    @property
    def latent_shape(self) -> tuple[int, int, int, int]:
        """(L, C, h, w) of one clip's video latents."""
        return self.codec.latent_shape(self.meta.frames)

    def encode_text(self, text: str) -> tuple[torch.Tensor, torch.Tensor]:
        """One caption through the frozen caption T5 -> hidden (1, L, D), mask (1, L); a UserError for a
        bad text. The last few are kept: clip play reads the same prompt and instruction every chunk,
        and the T5 is frozen once a clip model exists, so the answer cannot change."""
        if text not in self._encoded:
            if len(self._encoded) >= 8:
                self._encoded.pop(next(iter(self._encoded)))
            self._encoded[text] = self.text.encode([text])
        return self._encoded[text]

    def conditions(self, batch: int, frames: int | None = None) -> dict[str, torch.Tensor]:
        """The MSDiT's metadata inputs for ``batch`` clips of this model (of ``frames`` video frames, 1 for
        images; default the model's clip length): fps, num_frames, height, width (B,)."""
        m, device = self.meta, self.net.device
        return {k: torch.full((batch,), float(v), device=device)
                for k, v in (("fps", m.fps), ("num_frames", frames or m.frames), ("height", m.height), ("width", m.width))}

    def default_card(self) -> str:
        m, s = self.meta, self.sampler
        params = sum(p.numel() for p in self.net.parameters())
        games = ", ".join(f"`{e}`" for e in m.env_ids) or "unrecorded games"
        return (f"# gamengen clip model ({m.presets.get('msdit', '?')} preset)\n\n"
                f"GameGen-X's foundation model (§3.3): an MSDiT of {params:,} parameters that makes clips of "
                f"{m.frames} frames at {m.fps:g} fps, {m.width}x{m.height}, from a text prompt, or continues "
                f"given frames. Trained {m.train_steps} steps with rectified flow on {games}; samples with "
                f"{s.steps} Euler steps, CFG weight {s.guidance}, shift {s.shift} (continuations: CFG weight "
                f"{s.for_task(True)[0]}, shift {s.for_task(True)[1]}).\n\nFiles: `{MSDIT_DIR}/` "
                f"(the MSDiT), `{CODEC_DIR}/` (the video VAE and its 2D autoencoder), `{TEXT_DIR}/` (the "
                f"frozen T5 text encoder), `{META_FILE}` (what it makes, what it was trained on, the sampler).\n")

    def save_pretrained(self, folder: str | Path, card: str | None = None, half: bool = False) -> None:
        """The whole folder into a temporary sibling, then renamed into place: a crash leaves the old
        folder or the new one, never a mix. ``half`` stores the MSDiT's weights in float16 (half the
        bytes, for a bundled model); from_pretrained always loads them as float32."""
        self.sampler.check()

        def write(tmp: Path) -> None:
            net = copy.deepcopy(self.net).to(torch.float16) if half else self.net
            net.save_pretrained(tmp / MSDIT_DIR, safe_serialization=True)
            self.codec.save(tmp / CODEC_DIR)
            self.text.save(tmp / TEXT_DIR)
            write_json_atomic(tmp / META_FILE, {"format": FORMAT, "version": VERSION, "meta": asdict(self.meta),
                                                "sampler": asdict(self.sampler)})
            write_bytes_atomic(tmp / CARD, (card or self.default_card()).encode())

        write_folder_atomic(folder, write)

    @staticmethod
    def read_meta(folder: str | Path) -> tuple[ClipModelMeta, ClipSampler]:
        """The folder's meta and sampler settings, without loading any weights."""
        folder = Path(folder)
        if not folder.is_dir():
            raise UserError(f"no clip model folder at {folder}", FIX)
        path = folder / META_FILE
        if not path.is_file():
            if (folder / "model" / META_FILE).is_file():
                raise UserError(f"{folder} is a clip training run, not its model", f"pass {folder / 'model'}")
            what = next((kind for name, kind in OTHER_KINDS.items() if (folder / name).is_file()), None)
            raise UserError(f"{folder} is not a clip model ({f'it holds {what}' if what else f'{META_FILE} missing'})",
                            FIX)
        try:
            d = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            raise UserError(f"{path} is not valid JSON", "re-export the model with `gamengen clip train`") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise UserError(f"{folder} is not a clip model ({META_FILE} is not {FORMAT})", FIX)
        if d.get("version") != VERSION:
            raise UserError(f"{folder} is a clip model of version {d.get('version')}, this gamengen reads {VERSION}",
                            "use the gamengen that made it, or re-train it")
        try:
            return ClipModelMeta.from_json(d["meta"]), ClipSampler(**d["sampler"]).check()
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{path} is damaged ({type(e).__name__}: {str(e)[:80]})",
                            "re-export the model with `gamengen clip train`") from None

    @classmethod
    def from_pretrained(cls, folder: str | Path, device: str | torch.device = "cpu") -> "ClipModel":
        folder = Path(folder)
        meta, sampler = cls.read_meta(folder)
        codec = ClipCodec.load(folder / CODEC_DIR, device)
        text = CaptionEncoder.load(folder / TEXT_DIR, device)
        net = load_net(MSDiT, folder / MSDIT_DIR, folder, "re-export the model with `gamengen clip train`")
        return cls(net.to(device).eval().requires_grad_(False), codec, text, meta, sampler)


def _mismatch(net: MSDiT, codec: ClipCodec, text: CaptionEncoder, meta: ClipModelMeta) -> str | None:
    """What does not fit between the parts, or None."""
    c, channels, r = net.config, codec.vae.config.video_channels, codec.vae.temporal_compression
    if text.width != c.text_dim:
        return f"the text encoder is {text.width} wide, the MSDiT reads {c.text_dim}-wide text"
    if channels != c.latent_channels:
        return f"the codec makes {channels}-channel latents, the MSDiT takes {c.latent_channels}"
    if (codec.frame.height, codec.frame.width) != (meta.height, meta.width):
        return (f"the codec is for {codec.frame.width}x{codec.frame.height} frames, the model makes "
                f"{meta.width}x{meta.height}")
    if (meta.frames - 1) % r:
        return f"{meta.frames} frames per clip do not encode with the codec's {r}x grouping"
    return None
