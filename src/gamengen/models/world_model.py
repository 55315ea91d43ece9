"""A world model folder, and the one class that reads and writes it (paper §3.2, §3.3).

`gamengen train` and `gamengen distill` write one, `gamengen starts` adds start contexts to it, and
play, eval and bench read it; all of them go through `WorldModel`, so only this module knows the
folder's file names and the keys of its JSON. The layout follows diffusers' ``save_pretrained``
convention, and only JSON and safetensors are ever read (no pickles)::

    config.json, diffusion_pytorch_model.safetensors   the U-Net (ActionConditionedUNet)
    ae/                                               the autoencoder (FrameCodec)
    gamengen_wm.json                                  format, version, "meta" and "sampler"
    starts.json, starts.safetensors                   start contexts (optional, `gamengen starts`)
    README.md                                         the model card

Format 1 (before 2026-11-30) kept the sampling settings inside the training-time denoiser settings
and had no format or version; `gamengen model upgrade DIR` converts such a folder in place.
docs/world_model.md describes every field.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ..atomic import write_bytes_atomic, write_folder_atomic, write_json_atomic
from ..diffusion.denoiser import DenoiserConfig
from ..diffusion.sampling import SOLVERS
from ..errors import UserError

FORMAT, VERSION = "gamengen-world-model", 2
META_FILE = "gamengen_wm.json"
STARTS_JSON, STARTS_TENSORS = "starts.json", "starts.safetensors"
AE_DIR, CARD = "ae", "README.md"


@dataclass
class SamplerConfig:
    """How a model is sampled at play time: part of the model, not of its training."""

    solver: str = "ddim"  # or "euler" over Karras noise levels (diffusion/sampling.py)
    steps: int = 4  # paper §3.3: 4 DDIM steps are as good as 20 or more; 1 for a distilled model
    guidance: float = 1.5  # classifier-free guidance weight on the history (paper §3.3); 1 = none
    context_noise_level: float = 0.0  # the noise level of the context that the network is told (§3.2.1)

    @classmethod
    def from_json(cls, d: dict) -> "SamplerConfig":
        s = cls(str(d["solver"]), int(d["steps"]), float(d["guidance"]), float(d["context_noise_level"]))
        if s.solver not in SOLVERS or s.steps < 1:
            raise ValueError(f"sampler {s.solver} with {s.steps} steps")
        return s


@dataclass
class WorldModelMeta:
    """What a model was trained on and how: the game, its frames and actions, the context."""

    env_id: str
    action_set: dict  # envs.ActionSet.to_json(): names, and the buttons each action presses
    height: int
    width: int
    fps: float
    frame_skip: int  # game tics per recorded frame; format 1 did not record it, so upgraded folders say 1
    context: int  # N past frames and actions (paper: 64)
    heldout: float  # share of episodes never trained on (data/latents.split)
    preset: str
    train_steps: int
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)
    distilled_from: str | None = None  # the teacher's folder, for a `gamengen distill` student
    distill_steps: int | None = None
    tuned_from: str | None = None  # the folder a `gamengen tune-decoder` run fine-tuned on pixels
    tune_steps: int | None = None

    @property
    def actions(self) -> list[str]:
        return list(self.action_set["names"])

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "WorldModelMeta":
        d = dict(d)
        d["denoiser"] = DenoiserConfig(**d["denoiser"])
        return cls(**d)

    def check_store(self, spec, where) -> None:
        """A store (its StoreSpec) of another game than the model's (resolution or action set) gets one line."""
        if (spec.height, spec.width) != (self.height, self.width) or list(spec.action_set.names) != self.actions:
            raise UserError(f"store {where} ({spec.env_id}, {spec.width}x{spec.height}) does not hold this model's "
                            f"game", f"use a store of {self.env_id} at {self.width}x{self.height}")


@dataclass
class Start:
    """A start context (paper §3.3): the last k <= N frames of real play up to frame t, from a held-out
    episode. It keeps every action before frame t and the episode's env seed: the real game is
    deterministic given both, so ghost mode can replay it to the same frame."""

    frames: np.ndarray  # (k, H, W, 3) uint8: frames t-k+1..t
    prefix: np.ndarray  # (t,) int64: every action from the episode start to frame t
    episode: str
    env_seed: int | None

    @property
    def actions(self) -> np.ndarray:
        """The k-1 actions between the start's frames."""
        return self.prefix[len(self.prefix) - (len(self.frames) - 1):]


@dataclass
class WorldModel:
    net: object  # ActionConditionedUNet
    codec: object  # FrameCodec
    meta: WorldModelMeta
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    starts: list[Start] = field(default_factory=list)

    @staticmethod
    def read_meta(folder: str | Path) -> tuple[WorldModelMeta, SamplerConfig]:
        """The folder's meta and sampler settings, without loading any weights."""
        folder = Path(folder)
        d = _read_json(folder)
        if d.get("format") != FORMAT:
            raise UserError(f"{folder / META_FILE} is not a gamengen world model description",
                            "pass the model/ folder that `gamengen train` writes")
        if d.get("version") != VERSION:
            raise UserError(f"{folder} is a world model of format {d.get('version')}, this gamengen reads format "
                            f"{VERSION}", "use the gamengen that made it, or re-export the model")
        try:
            return WorldModelMeta.from_json(d["meta"]), SamplerConfig.from_json(d["sampler"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{folder / META_FILE} is damaged ({type(e).__name__}: {str(e)[:80]})",
                            "re-export the model with `gamengen train`") from None

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "WorldModel":
        from .autoencoder import FrameCodec
        from .unet import ActionConditionedUNet

        folder = Path(folder)
        meta, sampler = cls.read_meta(folder)
        codec = FrameCodec.load(folder / AE_DIR)
        try:
            net = ActionConditionedUNet.from_pretrained(folder, use_safetensors=True).eval()
        except (OSError, ValueError, RuntimeError) as e:
            raise UserError(f"the world model in {folder} does not load ({str(e)[:120]})",
                            "re-export it with `gamengen train`") from None
        starts = cls.load_starts(folder) if (folder / STARTS_JSON).exists() else []
        return cls(net, codec, meta, sampler, starts)

    def save_pretrained(self, folder: str | Path, card: str | None = None) -> None:
        """Write the whole folder into a temporary sibling, then swap it into place: a crash leaves
        the old folder or the new one, never a mix (a model trained on top of another loses the
        old one's start contexts, which belong to the old weights)."""
        folder = Path(folder)

        def write(tmp: Path) -> None:
            self.net.save_pretrained(tmp, safe_serialization=True)
            self.codec.save(tmp / AE_DIR, card=f"Autoencoder of the world model in {folder.name}/ (see ../README.md).\n")
            _write_meta(tmp, self.meta, self.sampler)
            if self.starts:
                _write_starts(tmp, self.meta.env_id, self.starts)
            write_bytes_atomic(tmp / CARD, (card or self.default_card()).encode())

        write_folder_atomic(folder, write)

    def default_card(self) -> str:
        m, s = self.meta, self.sampler
        how = (f"the 1-step student of `{m.distilled_from}` ({m.distill_steps} distillation steps)"
               if m.distilled_from else f"trained {m.train_steps} steps")
        if m.tuned_from:
            how += f", then fine-tuned on pixels from `{m.tuned_from}` ({m.tune_steps} `tune-decoder` steps)"
        return (f"# gamengen world model ({m.preset} preset)\n\n"
                f"Action-conditioned latent diffusion (GameNGen) for `{m.env_id}` at {m.width}x{m.height}, "
                f"context {m.context}, {how}; it plays with {s.steps} {s.solver.upper()} steps, CFG weight "
                f"{s.guidance}.\n\nFiles: `diffusion_pytorch_model.safetensors` + `config.json` (the U-Net), "
                f"`{AE_DIR}/` (the autoencoder), `{META_FILE}` (the game, the action set, the sampler settings); "
                f"`gamengen starts` adds start contexts (`{STARTS_JSON}`, `{STARTS_TENSORS}`).\n")

    @classmethod
    def save_starts(cls, folder: str | Path, starts: list[Start]) -> None:
        """Put start contexts into an existing model folder (replacing any it had)."""
        meta, _ = cls.read_meta(folder)
        _write_starts(Path(folder), meta.env_id, starts)

    @staticmethod
    def load_starts(folder: str | Path) -> list[Start]:
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(folder)
        fix = f"make them with `gamengen starts --model {folder} --data STORE`"
        if not (folder / STARTS_JSON).exists():
            raise UserError(f"{folder} has no start contexts ({STARTS_JSON} missing)", fix)
        try:
            info = json.loads((folder / STARTS_JSON).read_text())
            tensors = load_file(folder / STARTS_TENSORS)
            starts = [Start(tensors[f"frames_{i}"], tensors[f"prefix_{i}"], s["episode"], s["env_seed"])
                      for i, s in enumerate(info["starts"])]
        except (OSError, ValueError, KeyError, TypeError, SafetensorError) as e:
            raise UserError(f"the start contexts in {folder} are damaged ({type(e).__name__}: {str(e)[:80]})",
                            fix) from None
        if not starts or any(len(s.frames) < 1 or len(s.prefix) < len(s.frames) - 1 for s in starts):
            raise UserError(f"the start contexts in {folder} are empty or inconsistent", fix)
        return starts


def upgrade(folder: str | Path, out: str | Path | None = None) -> Path:
    """Convert a format-1 folder to this format, in place (``out`` None) or into a new folder ``out``.
    Every other file is copied byte for byte, so the weights are unchanged."""
    folder = Path(folder)
    d = _read_json(folder, upgrading=True)
    if "format" in d:
        what = f"already format {d.get('version')}" if d.get("format") == FORMAT else "not a gamengen world model"
        raise UserError(f"{folder} is {what}", "nothing to upgrade; only format-1 folders convert")
    try:
        meta, sampler = _from_format_1(d)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{folder / META_FILE} is damaged ({type(e).__name__}: {str(e)[:80]})",
                        "re-export the model with `gamengen train`") from None
    target = folder if out is None else Path(out)
    if out is not None and target.exists():
        raise UserError(f"{target} exists", "pass a new --out, or leave --out off to convert in place")

    def write(tmp: Path) -> None:
        shutil.copytree(folder, tmp, ignore=shutil.ignore_patterns(".*.tmp-*"))  # no stale temporary files
        _write_meta(tmp, meta, sampler)

    write_folder_atomic(target, write)
    return target


def _from_format_1(d: dict) -> tuple[WorldModelMeta, SamplerConfig]:
    """Format 1's flat keys; the defaults are those its readers assumed for keys older folders lack."""
    den = dict(d["denoiser"])
    sampler = SamplerConfig(steps=int(d.get("sampling_steps", 4)), guidance=float(den.pop("guidance", 1.5)),
                            context_noise_level=float(den.pop("inference_noise_level", 0.0)))
    action_set = d.get("action_set") or {"names": list(d["actions"]), "buttons": [], "combos": []}
    meta = WorldModelMeta(env_id=d["env_id"], action_set=action_set, height=int(d["height"]), width=int(d["width"]),
                          fps=float(d.get("fps", 35.0)), frame_skip=1, context=int(d["context"]),
                          heldout=float(d.get("heldout", 0.1)), preset=d["preset"], train_steps=int(d["train_steps"]),
                          denoiser=DenoiserConfig(**den), distilled_from=d.get("distilled_from"),
                          distill_steps=d.get("distill_steps"))
    return meta, sampler


def _read_json(folder: Path, upgrading: bool = False) -> dict:
    """The folder's gamengen_wm.json, or one line saying what the folder is instead."""
    if not folder.is_dir():
        raise UserError(f"no model folder at {folder}", "pass the model/ folder that `gamengen train` writes, "
                        "e.g. models/freedoom-e1m1")
    path = folder / META_FILE
    if not path.is_file():
        raise UserError(f"no world model in {folder}: {_looks_like(folder)}", _fix_for(folder))
    try:
        d = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path} is not valid JSON", "re-export the model with `gamengen train`") from None
    if not isinstance(d, dict):
        raise UserError(f"{path} is not a gamengen world model description", "re-export the model with `gamengen train`")
    if "format" not in d and "denoiser" in d and not upgrading:
        raise UserError(f"{folder} is a world model folder of format 1, this gamengen reads format {VERSION}",
                        f"convert it with `gamengen model upgrade {folder}`, which keeps the weights")
    return d


def _looks_like(folder: Path) -> str:
    if (folder / "gamengen_ae.json").is_file():
        return "it holds an autoencoder (gamengen_ae.json)"
    if (folder / "model_index.json").is_file():
        return "it holds a diffusers pipeline (model_index.json)"
    if (folder / "model" / META_FILE).is_file():
        return "it is a training run folder"
    try:
        name = json.loads((folder / "config.json").read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):
        name = None
    if name:
        return f"it holds a diffusers {name} ({META_FILE} missing)"
    return f"{META_FILE} is missing"


def _fix_for(folder: Path) -> str:
    if (folder / "model" / META_FILE).is_file():
        return f"pass {folder / 'model'}"
    if (folder / "gamengen_ae.json").is_file():
        return "pass the world model folder that holds this autoencoder as ae/"
    return "pass the model/ folder that `gamengen train` writes, e.g. models/freedoom-e1m1"


def _write_meta(folder: Path, meta: WorldModelMeta, sampler: SamplerConfig) -> None:
    write_json_atomic(folder / META_FILE, {"format": FORMAT, "version": VERSION, "meta": meta.to_json(),
                                           "sampler": asdict(sampler)})


def _write_starts(folder: Path, env_id: str, starts: list[Start]) -> None:
    from safetensors.numpy import save

    tensors = {}
    for i, s in enumerate(starts):
        tensors[f"frames_{i}"] = np.ascontiguousarray(s.frames, np.uint8)
        tensors[f"prefix_{i}"] = np.ascontiguousarray(s.prefix, np.int64)
    # the tensors first: the JSON that lists them is what makes the starts exist
    write_bytes_atomic(folder / STARTS_TENSORS, save(tensors))
    write_json_atomic(folder / STARTS_JSON, {"env_id": env_id, "starts": [
        {"episode": s.episode, "env_seed": s.env_seed, "t": len(s.prefix)} for s in starts]})
