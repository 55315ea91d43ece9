"""The clip model's training inputs: video latents and caption features computed once, and batches.

GameGen-X trains its MSDiT against a frozen 3D-VAE and a frozen T5 (§3.3), so neither needs to run
per step: every clip is encoded once (its posterior mean, scaled) and every distinct caption once.
Both caches live in the run folder under a key of the weights and the data they came from, so a
changed codec, text encoder or dataset is never served stale features. Written atomically; read
back with np.load(allow_pickle=False) and safetensors only.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from ..atomic import write_bytes_atomic
from ..curate.dataset import ClipDataset
from ..curate.prompts import video_prompt
from ..digest import digest
from ..models.text_encoder import CaptionEncoder
from ..models.video_vae import ClipCodec

if TYPE_CHECKING:
    from .clip import SampleDraw


def codec_key(codec: ClipCodec) -> str:
    """Which latents a codec makes: its weights and scales (the video VAE's and its 2D AE's)."""
    return digest(codec.vae.state_dict(), codec.frame.ae.state_dict(), codec.scale, codec.frame.scale)


def text_key(encoder: CaptionEncoder) -> str:
    """Which features a text encoder gives: its weights and its tokenizer's rules and vocabulary (not its
    padding and truncation, which encoding itself sets)."""
    tok = {k: v for k, v in json.loads(encoder.tokenizer.backend_tokenizer.to_str()).items()
           if k not in ("padding", "truncation")}
    return digest(encoder.model.state_dict(), tok)


@torch.no_grad()
def cache_latents(ds: ClipDataset, codec: ClipCodec, folder: Path, stage: Callable[[str], None] = lambda m: None,
                  prompt: str | None = None) -> np.ndarray:
    """(N, L, C, h, w) float16 scaled video latents of every clip, read from or written to ``folder``;
    with ``prompt`` (curate/prompts.py's kinds), the latents of each clip's video prompt of that kind."""
    # A clip's frames are fixed by its source (file or episode sha256, frame indices) and the dataset's size
    # and rate: captions and keys can change without re-encoding.
    data_id = [ds.info, [ds.meta(i)["source"] for i in range(len(ds))]]
    key = digest(codec_key(codec), data_id, *([prompt] if prompt else []))
    path = folder / f"{prompt or 'latents'}-{key}.npy"
    if path.is_file():
        return np.load(path, allow_pickle=False)
    stage(f"encoding {len(ds)} clips' {f'{prompt} prompts' if prompt else 'frames'} into video latents")
    video = (lambda f: video_prompt(prompt, f)) if prompt else (lambda f: f)
    out = np.stack([codec.encode_clip(video(ds.frames(i))).cpu().numpy().astype(np.float16) for i in range(len(ds))])
    buf = io.BytesIO()
    np.save(buf, out, allow_pickle=False)
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buf.getvalue())
    return out


@dataclass
class TextCache:
    """The captions' T5 features, ragged: caption j's rows are hidden[offsets[index[j]] : offsets[index[j] + 1]]."""

    hidden: np.ndarray  # (T, D) float16, every distinct caption's real tokens one after another
    offsets: np.ndarray  # (U + 1,) int64, U distinct captions
    index: np.ndarray  # (N,) int64: clip -> its distinct caption

    def rows(self, clip: int) -> np.ndarray:
        u = int(self.index[clip])
        return self.hidden[self.offsets[u]:self.offsets[u + 1]]


def cache_text(captions: list[str], encoder: CaptionEncoder, folder: Path,
               stage: Callable[[str], None] = lambda m: None, batch: int = 32) -> TextCache:
    """Features of every caption (each encoded once, however many clips share it), cached in ``folder``."""
    from safetensors.numpy import load_file, save

    key = digest(text_key(encoder), captions)
    path = folder / f"text-{key}.safetensors"
    if path.is_file():
        d = load_file(path)
        return TextCache(d["hidden"], d["offsets"], d["index"])
    distinct = sorted(set(captions))
    stage(f"encoding {len(distinct)} distinct captions")
    where = {c: i for i, c in enumerate(distinct)}
    rows = []
    for lo in range(0, len(distinct), batch):
        hidden, mask = encoder.encode(distinct[lo:lo + batch])  # (b, L, D), (b, L)
        rows += [h[m].cpu().numpy().astype(np.float16) for h, m in zip(hidden, mask)]
    cache = TextCache(np.concatenate(rows), np.cumsum([0] + [len(r) for r in rows]).astype(np.int64),
                      np.array([where[c] for c in captions], dtype=np.int64))
    folder.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, save({"hidden": cache.hidden, "offsets": cache.offsets, "index": cache.index}))
    return cache


@dataclass
class Batch:
    z: torch.Tensor  # (B, L, C, h, w) clean video latents
    noise: torch.Tensor  # (B, L, C, h, w)
    t: torch.Tensor  # (B,) flow time of the generated frames
    context: torch.Tensor  # (B,) int, latent frames held clean
    hidden: torch.Tensor  # (B, Lt, D) caption features, zero-padded to the batch's longest
    text_mask: torch.Tensor  # (B, Lt) bool; all False for a dropped caption (MSDiT's null text)
    context_t: torch.Tensor | None = None  # (B,) flow time of the context frames; None: clean (t = 0)


def text_rows(text: TextCache, clips: list[int], drop: list[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The captions of ``clips`` as one batch: (B, Lt, D) float32 features zero-padded to the longest,
    and (B, Lt) bool mask, all False where ``drop`` (MSDiT's null text)."""
    rows = [text.rows(c) for c in clips]
    width = max(len(r) for r in rows)
    hidden = np.zeros((len(clips), width, text.hidden.shape[1]), np.float32)
    mask = np.zeros((len(clips), width), bool)
    for i, (r, d) in enumerate(zip(rows, drop)):
        hidden[i, :len(r)] = r
        mask[i, :len(r)] = not d
    return hidden, mask


def make_batch(draws: list["SampleDraw"], latents: np.ndarray, text: TextCache, device: torch.device) -> Batch:
    hidden, mask = text_rows(text, [d.clip for d in draws], [d.drop_text for d in draws])
    # A draw's noise says how many latent frames it takes: the clip's first n (its prefix, thanks to the
    # causal codec; n = 1 for an image step).
    z = torch.from_numpy(np.stack([latents[d.clip][:len(d.noise)] for d in draws]).astype(np.float32))
    return Batch(z.to(device), torch.stack([d.noise for d in draws]).to(device),
                 torch.tensor([d.t for d in draws], device=device),
                 torch.tensor([d.context for d in draws], device=device),
                 torch.from_numpy(hidden).to(device), torch.from_numpy(mask).to(device),
                 torch.tensor([d.context_t for d in draws], device=device) if any(d.context_t for d in draws)
                 else None)  # None: the clean-context path, exactly as before context noise existed
