"""`gamengen train-ae`: the latent autoencoder, then the decoder fine-tune (paper §3.2.2).

Stage 1 trains encoder and decoder together on store frames (pixel MSE + a tiny KL). Stage 2 freezes
the encoder and trains the decoder alone on pixel MSE, as the paper does to sharpen small details
such as the HUD; it cannot change the latents, so the world model's autoregression is unaffected.

Both stages checkpoint into ``<out>/checkpoints`` (train/checkpoint.py: atomic, sha256 manifest,
RNG states), so a killed run resumes where it stopped and ends with the same weights.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..data.latents import split
from ..data.store import Store
from ..errors import UserError
from ..models.autoencoder import AE_PRESETS, FrameCodec, build_autoencoder
from . import checkpoint
from .run import RunFolder, descend


@dataclass
class AETrainConfig:
    preset: str = "cpu"  # picks the AE size and, through the U-Net preset, the padding
    steps: int = 3000  # stage 1: encoder + decoder
    decoder_steps: int = 1000  # stage 2: decoder alone, encoder frozen
    batch_size: int = 32
    # Train on random crops of this many pixels a side (0 = whole frames). Crops make a step cheaper
    # (64x64 is a fifth of a 160x128 frame), but at equal CPU time whole frames reconstruct better
    # (+0.5 dB on moving frames, +3 dB on the status bar, whose rows a crop rarely holds whole;
    # docs/results.md, "Autoencoder levers"). The latent scale is measured on whole frames either way.
    crop: int = 0
    learning_rate: float = 1e-3
    heldout: float = 0.1
    seed: int = 0
    pretrained: str | None = None  # a local diffusers VAE folder instead of stage 1
    # An autoencoder folder of this preset (`gamengen train-ae`) whose weights stage 1 starts from
    # instead of random ones: a codec for new games (or your own game) from one that already draws
    # walls and a status bar, at a fraction of the steps.
    init: str | None = None
    checkpoint_every: int = 250  # steps (either stage)
    keep_checkpoints: int = 2
    # Stop after about this many minutes of this invocation (None: run both stages to their step
    # counts): stage 1 ends by 3/4 of it, the decoder fine-tune by the end. For equal-time
    # comparisons (issue 17); not part of the run's identity, so the same command resumes.
    max_minutes: float | None = None
    # bf16 autocast of the forward passes (weights, optimizer and the loss stay fp32). On CPUs with
    # bf16 units it is 1.5x faster per step at cpu-16ch (docs/performance.md); elsewhere slower.
    # Only how fast, not what is learned, so it may change when a run resumes.
    bf16: bool = False

    def __post_init__(self):
        if self.preset not in AE_PRESETS:
            raise UserError(f"unknown preset '{self.preset}'", "use one of: " + ", ".join(AE_PRESETS))
        if self.keep_checkpoints < 1:
            raise UserError(f"--keep-checkpoints is {self.keep_checkpoints}", "keep at least 1 to be able to resume")


class FrameSampler:
    """Random training frames, a whole chunk-aligned run at a time (reads stay chunk-sized). With
    several stores (several games), each batch draws its store first, uniformly, so every game weighs
    the same whatever its frame count; one store draws exactly as before."""

    def __init__(self, stores: list[Store], records: list[list], seed: int):
        self.stores, self.records = stores, records
        self.rng = np.random.default_rng(seed)
        self.groups = {}

    def batch(self, n: int) -> np.ndarray:
        out = []
        while len(out) < n:
            k = int(self.rng.integers(len(self.stores))) if len(self.stores) > 1 else 0
            recs = self.records[k]
            r = recs[int(self.rng.integers(len(recs)))]
            g = self.groups.setdefault((k, r.path), self.stores[k].open_episode(r))
            t = int(self.rng.integers(r.length))
            out.extend(g["frames"][t : min(r.length, t + 8)])
        return np.stack(out[:n])


def open_stores(paths: list[Path], heldout: float) -> tuple[list[Store], list[list]]:
    """The stores at ``paths`` and each one's training episodes; stores whose frames differ in size,
    or one without training episodes, are refused in one line."""
    stores = [Store.open(p) for p in paths]
    sizes = {(s.spec.width, s.spec.height) for s in stores}
    if len(sizes) > 1:
        raise UserError("the --data stores hold frames of different sizes (" +
                        ", ".join(f"{p}: {s.spec.width}x{s.spec.height}" for p, s in zip(paths, stores)) + ")",
                        "train one autoencoder per frame size")
    records = [split(s.episodes(), heldout)[0] for s in stores]
    for p, recs in zip(paths, records):
        if not recs:
            raise UserError(f"store {p} has no training episodes", "record some with `gamengen record`")
    return stores, records


def train_autoencoder(data: str | Path | list, out: str | Path, cfg: AETrainConfig,
                      report: Callable[[str, int, int, float], None] = lambda stage, done, total, loss: None,
                      warn: Callable[[str], None] = print) -> FrameCodec:
    paths = [Path(p) for p in (data if isinstance(data, (list, tuple)) else [data])]
    stores, train_recs = open_stores(paths, cfg.heldout)
    spec = stores[0].spec
    games = list(dict.fromkeys(s.spec.env_id for s in stores))
    action_sets = {tuple(s.spec.action_set.names) for s in stores}
    torch.manual_seed(cfg.seed)
    ae_cfg = dataclasses.replace(AE_PRESETS[cfg.preset], pretrained=cfg.pretrained)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    # One game: its env id and keys (`train` checks them). Several: their env ids, and keys only
    # where every store has the same.
    meta = {"preset": cfg.preset, **({"env_id": games[0]} if len(games) == 1 else {"env_ids": games}),
            **({"actions": list(spec.action_set.names)} if len(action_sets) == 1 else {})}
    codec = FrameCodec(build_autoencoder(ae_cfg).to(device), spec.height, spec.width,
                       pad_multiple=ae_cfg.pad_multiple, meta=meta)
    frames = FrameSampler(stores, train_recs, cfg.seed)
    H, W = codec.height, codec.width
    rng = np.random.default_rng(cfg.seed)  # the crops'

    if cfg.init:
        _start_from(codec.ae, Path(cfg.init), cfg.preset)
    ae = codec.ae.train()
    # The folder is the autoencoder's own (diffusers' config.json goes there), so the run's settings
    # go to run.json. The step counts are part of the run: they place the stage boundary.
    run_folder = RunFolder(out, dataclasses.asdict(cfg), keep=cfg.keep_checkpoints, settings_file="run.json",
                           may_change=("checkpoint_every", "keep_checkpoints", "max_minutes", "bf16")).open()
    # Steps are counted over both stages: 0..steps-1 is stage 1, then the decoder fine-tune.
    first = 0 if cfg.pretrained else cfg.steps
    total = first + cfg.decoder_steps
    state = run_folder.resume(warn)
    done = 0
    ran = {"autoencoder": 0, "decoder fine-tune": 0}  # steps each stage ran, for the card
    if state is not None:
        ae.load_state_dict(state["model"])
        checkpoint.set_rng_state(state["rng"])
        frames.rng.bit_generator.state, rng.bit_generator.state = state["frames_rng"], state["crop_rng"]
        done = state["step"]
        ran.update(state.get("ran", {}))
    start = time.monotonic()

    def run(stage: str, offset: int, steps: int, params, loss_fn, minutes: float | None) -> None:
        """Steps offset+1 .. offset+steps of the run; those already done are skipped. ``minutes``:
        end the stage early once this long has passed since the invocation started."""
        nonlocal done
        opt = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
        if state is not None and offset < state["step"] < offset + steps:  # resuming inside this stage
            opt.load_state_dict(state["optimizer"])
        for s in range(max(0, done - offset), steps):
            x = random_crops(codec.to_pixels(frames.batch(cfg.batch_size)), cfg.crop, H, W, ae_cfg.downsample, rng)
            x = x.to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
                loss = loss_fn(x)
            descend(loss, opt, params, 1.0)
            done = offset + s + 1
            ran[stage] = s + 1
            report(stage, done, total, loss.item())
            late = minutes is not None and time.monotonic() - start >= 60 * minutes
            if done % cfg.checkpoint_every == 0 or s + 1 == steps or late:
                state_now = {"step": done, "model": ae.state_dict(), "optimizer": opt.state_dict(),
                             "rng": checkpoint.rng_state(), "frames_rng": frames.rng.bit_generator.state,
                             "crop_rng": rng.bit_generator.state, "ran": dict(ran)}
                run_folder.save(done, state_now)
            if late:
                break

    mse = lambda a, b: torch.nn.functional.mse_loss(a[:, :, :H, :W].float(), b[:, :, :H, :W])  # noqa: E731

    def full(x):
        post = ae.encode(x).latent_dist
        return mse(ae.decode(post.sample()).sample, x) + ae_cfg.kl_weight * post.kl().mean()

    def decoder_only(x):
        with torch.no_grad():
            z = ae.encode(x).latent_dist.mode()
        return mse(ae.decode(z).sample, x)

    budget = cfg.max_minutes
    if not cfg.pretrained:
        run("autoencoder", 0, cfg.steps, list(ae.parameters()), full, budget and 0.75 * budget)
    decoder_params = list(ae.decoder.parameters()) + list(ae.post_quant_conv.parameters())
    run("decoder fine-tune", first, cfg.decoder_steps, decoder_params, decoder_only, budget)
    ae.eval()
    _scale_and_save(codec, frames, cfg, paths, Path(out), ran)
    return codec


def _start_from(ae: torch.nn.Module, folder: Path, preset: str) -> None:
    """Copy the weights of the AE in ``folder`` into ``ae``; another architecture is refused in one line."""
    other = FrameCodec.load(folder).ae.state_dict()
    mine = ae.state_dict()
    if other.keys() != mine.keys() or any(other[k].shape != mine[k].shape for k in mine):
        raise UserError(f"the autoencoder in {folder} is not of the {preset} preset's shape",
                        "pass --preset with the preset it was trained with, or another --init")
    ae.load_state_dict(other)


def random_crops(x: torch.Tensor, size: int, H: int, W: int, grid: int, rng: np.random.Generator) -> torch.Tensor:
    """Random ``size``-pixel crops of pixels (B, 3, H', W'), placed on the latent grid (0: whole)."""
    if not size or size >= min(H, W):
        return x
    ys = rng.integers(0, (H - size) // grid + 1, len(x)) * grid
    xs = rng.integers(0, (W - size) // grid + 1, len(x)) * grid
    return torch.stack([x[i, :, y:y + size, x0:x0 + size] for i, (y, x0) in enumerate(zip(ys, xs))])


def _saved_scale(out: Path, codec: FrameCodec) -> float | None:
    """The latent scale of the autoencoder already saved in ``out`` when its encoder weights are
    ``codec``'s (a decoder-only continuation); None otherwise."""
    if not (out / "gamengen_ae.json").exists():
        return None
    try:
        saved = FrameCodec.load(out)
    except UserError:
        return None
    mine, theirs = codec.encoder_weights(), saved.encoder_weights()
    same = mine.keys() == theirs.keys() and all(
        theirs[k].shape == v.shape and torch.equal(theirs[k].cpu(), v.cpu()) for k, v in mine.items())
    return saved.scale if same else None


def _scale_and_save(codec: FrameCodec, frames: FrameSampler, cfg: AETrainConfig, paths: list[Path], out: Path, ran: dict) -> None:
    """Unit-variance latents, as SD's 0.18215 scale gives its VAE, so the diffusion schedule fits
    them; then the folder and its card. A run resumed for more decoder fine-tune keeps the scale its
    folder already has: the encoder is unchanged, so the latents, their cache and every world model
    trained on them stay exactly valid (a re-measured scale would differ by the frames drawn)."""
    kept = _saved_scale(out, codec)
    if kept is not None:
        codec.scale = kept
    else:
        with torch.no_grad():
            z = torch.cat([codec.encode(frames.batch(64)) for _ in range(4)])  # scale is still 1 here
        codec.scale = float(1.0 / z.std().clamp_min(1e-6))
    H, W = codec.height, codec.width
    codec.save(out, card=(f"# gamengen autoencoder ({cfg.preset} preset)\n\nTrained by `gamengen train-ae` "
                          f"on {', '.join(f'`{p}`' for p in paths)}: {ran['autoencoder']} autoencoder steps"
                          + (f" from the weights of `{cfg.init}`" if cfg.init else "") + ", then "
                          f"{ran['decoder fine-tune']} decoder-only steps (encoder frozen, pixel MSE; paper §3.2.2), "
                          f"batch {cfg.batch_size}" + (f" of {cfg.crop}x{cfg.crop} crops" if cfg.crop else "") +
                          f". Frames {W}x{H} padded to {codec.padded[1]}x{codec.padded[0]}; "
                          f"latents {codec.latent_shape()}.\n"))
