"""An InstructNet folder, and the one class that reads and writes it (GameGen-X §3.4).

`gamengen clip train-instruct` writes one beside the clip model it was trained on; `clip continue
--instruct` and `clip play` read it with that clip model. InstructNet learns against one frozen base,
so the folder records the base's MSDiT digest and refuses to load beside any other. Only JSON and
safetensors are read back::

    instructnet/            the InstructNet (diffusers save_pretrained: config.json + safetensors)
    gamengen_instruct.json  {"format": "gamengen-instructnet", "version": 1, "meta": {...}}
    README.md               the card
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..atomic import write_bytes_atomic, write_folder_atomic, write_json_atomic
from ..digest import digest
from ..errors import UserError
from .clip_model import ClipModel
from .instructnet import InstructNet
from .loading import load_net

FORMAT, VERSION = "gamengen-instructnet", 1
META_FILE, CARD, NET_DIR = "gamengen_instruct.json", "README.md", "instructnet"
FIX = "pass the model/ folder that `gamengen clip train-instruct` writes"


def base_key(model: ClipModel) -> str:
    """Which frozen base an InstructNet was trained beside: the digest of its MSDiT's weights."""
    return digest(model.net.state_dict())


@dataclass
class InstructMeta:
    base: str  # base_key of the clip model it was trained beside
    base_path: str  # where that clip model was, for the reader
    key_names: list[str]  # the keys of the operation signal, in InstructNet's input order
    prompts: list[str]  # the video prompt kinds it was trained on (curate/prompts.py)
    train_steps: int = 0
    dataset: dict = field(default_factory=dict)
    training: dict = field(default_factory=dict)  # the stage-2 recipe's shares

    @classmethod
    def from_json(cls, d: dict) -> "InstructMeta":
        return cls(str(d["base"]), str(d["base_path"]), [str(k) for k in d["key_names"]], [str(p) for p in d["prompts"]],
                   int(d["train_steps"]), dict(d["dataset"]), dict(d["training"]))


@dataclass
class InstructModel:
    net: InstructNet
    meta: InstructMeta

    def save_pretrained(self, folder: str | Path, card: str) -> None:
        """Written whole into a temporary sibling and renamed into place (atomic.write_folder_atomic)."""

        def write(tmp: Path) -> None:
            self.net.save_pretrained(tmp / NET_DIR, safe_serialization=True)
            write_json_atomic(tmp / META_FILE, {"format": FORMAT, "version": VERSION, "meta": asdict(self.meta)})
            write_bytes_atomic(tmp / CARD, card.encode())

        write_folder_atomic(folder, write)

    @classmethod
    def from_pretrained(cls, folder: str | Path, base: ClipModel, device: str | torch.device = "cpu") -> "InstructModel":
        """The InstructNet in ``folder``, checked against the clip model ``base`` it is to steer."""
        folder = Path(folder)
        path = folder / META_FILE
        if not path.is_file():
            if (folder / "model" / META_FILE).is_file():
                raise UserError(f"{folder} is an InstructNet training run, not its model", f"pass {folder / 'model'}")
            raise UserError(f"{folder} is not an InstructNet folder ({META_FILE} missing)", FIX)
        try:
            d = json.loads(path.read_text())
            if d.get("format") != FORMAT or d.get("version") != VERSION:
                raise ValueError(f"format {d.get('format')} version {d.get('version')}")
            meta = InstructMeta.from_json(d["meta"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{path} is damaged ({type(e).__name__}: {str(e)[:100]})",
                            "re-export it with `gamengen clip train-instruct`") from None
        net = load_net(InstructNet, folder / NET_DIR, folder, "re-export it with `gamengen clip train-instruct`")
        if meta.base != base_key(base):
            raise UserError(f"the InstructNet in {folder} was trained beside another clip model ({meta.base_path})",
                            "pass that clip model, or train an InstructNet for this one with `gamengen clip train-instruct`")
        problem = net.fits(base.net)
        if problem:
            raise UserError(f"the InstructNet in {folder} does not fit the clip model: {problem}", FIX)
        return cls(net.to(device).eval().requires_grad_(False), meta)
