"""Loading a diffusers model folder that someone else may have made: safetensors only, class checked."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import UserError


def load_net(cls, folder: Path, where: Path, fix: str):
    """``cls.from_pretrained(folder)`` in float32, from safetensors; a folder of another class or one
    that does not load is one UserError naming ``cls`` and ``where`` (the model folder holding it)."""
    from safetensors import SafetensorError

    try:
        kind = json.loads((folder / "config.json").read_text()).get("_class_name")
        if kind != cls.__name__:
            raise ValueError(f"{folder.name}/config.json describes {kind}, not {cls.__name__}")
        return cls.from_pretrained(folder, use_safetensors=True, torch_dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, AttributeError, SafetensorError) as e:
        raise UserError(f"the {cls.__name__} in {where} is damaged ({type(e).__name__}: {str(e)[:100]})", fix) from None
