"""`gamengen train`: the action-conditioned diffusion world model (paper §3.2, §4.2; docs/world_model.md).

The same code runs as 1 CPU process, several CPU processes (`accelerate launch --num_processes 2`,
gloo) or GPUs. Every random draw of step s, sample i of the *global* batch comes from a generator
seeded by (seed, s, i), and each process takes its slice of the global batch. So a resumed run
replays exactly, and 1 process or 2 processes at the same global batch see the same data and noise.

Run folder::

    <run>/config.json           the resolved TrainConfig (a resumed run must match it)
    <run>/checkpoints/step-N/   crash-safe checkpoints (train/checkpoint.py)
    <run>/losses.json           the loss of every step so far
    <run>/samples/step-N.png    context | truth | prediction grids
    <run>/tb/                   TensorBoard
    <run>/model/                the model folder (models/world_model.WorldModel, EMA weights)
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..atomic import write_png
from ..data.latents import DeviceWindows, LatentCache, LatentWindows, split
from ..data.store import Store
from ..diffusion.denoiser import Denoiser, DenoiserConfig, TrainingNoise
from ..errors import UserError
from ..models.world_model import SamplerConfig, WorldModel, WorldModelMeta
from . import checkpoint
from .run import Deadline, RunFolder, ema_weights

# Network sizes per preset. `cpu` is sized for real-time play on 2 cores (issue 7 measured it;
# docs/performance.md); `paper` is SD-1.4's U-Net (§4.2) at 320x256; `tiny` exists for tests.
UNET_PRESETS = {
    "tiny": {"block_out_channels": (32, 32), "layers_per_block": 1, "cross_attention_dim": 32,
             "attention_head_dim": 2, "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
             "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"), "norm_num_groups": 8},
    # Sized for the play budget (docs/performance.md, issue 7): two levels (16x20 and 8x10 latents) and
    # attention only in the middle block, where 80 positions see the whole frame and the action
    # tokens. Each cross-attention block costs about as much as the convolutions of a level at these
    # sizes, so this cut a U-Net call with both CFG branches from 46 ms (64-128-128, attention at two
    # levels) to about 10 ms; docs/performance.md has the measurements.
    "cpu": {"block_out_channels": (32, 64), "layers_per_block": 1, "cross_attention_dim": 64,
            "attention_head_dim": 4, "down_block_types": ("DownBlock2D", "DownBlock2D"),
            "up_block_types": ("UpBlock2D", "UpBlock2D"), "norm_num_groups": 8},
    # Issue 17's size lever: three levels (16x20, 8x10, 4x5) and 5x the cpu preset's parameters, still
    # attention only in the middle block. 0.67 GFLOP per call at context 16 (cpu: 0.19), so it plays
    # in real time on 2 cores through 1-step distillation or a few unguided steps.
    "cpu-m": {"block_out_channels": (64, 128, 128), "layers_per_block": 1, "cross_attention_dim": 64,
              "attention_head_dim": 8, "down_block_types": ("DownBlock2D",) * 3,
              "up_block_types": ("UpBlock2D",) * 3, "norm_num_groups": 8},
    # The size lever's next step: cpu-m at 1.5x the width (2.2x the parameters; 1.8x the time of
    # a training step on one core, docs/results.md).
    "cpu-l": {"block_out_channels": (96, 192, 192), "layers_per_block": 1, "cross_attention_dim": 64,
              "attention_head_dim": 8, "down_block_types": ("DownBlock2D",) * 3,
              "up_block_types": ("UpBlock2D",) * 3, "norm_num_groups": 8},
    "paper": {"block_out_channels": (320, 640, 1280, 1280), "layers_per_block": 2, "cross_attention_dim": 768,
              "attention_head_dim": 8,
              "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                   "DownBlock2D"),
              "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")},
}
TRAIN_PRESETS = {  # what a preset changes in TrainConfig
    "tiny": {"context": 4, "batch_size": 16, "learning_rate": 1e-2},
    "cpu": {"context": 64, "batch_size": 32, "learning_rate": 1e-2},
    "cpu-m": {"context": 16, "batch_size": 32, "learning_rate": 1e-2},
    "cpu-l": {"context": 16, "batch_size": 32, "learning_rate": 1e-2},
    "paper": {"context": 64, "batch_size": 128, "learning_rate": 2e-5},  # §4.2
}


@dataclass
class TrainConfig:
    preset: str = "cpu"
    steps: int = 20_000
    context: int = 64  # N (paper: 64)
    batch_size: int = 32  # global, over all processes
    learning_rate: float = 1e-2  # torch Adafactor: relative step, capped at 1/sqrt(step), times parameter RMS
    grad_clip: float = 1.0  # §4.2
    ema_decay: float = 0.999
    bf16: bool = False  # autocast; `gamengen bench train` measures both
    heldout: float = 0.1  # share of episodes never trained on (data/latents.is_heldout)
    # Train on a seeded subset of the training episodes of about this many frames (None = all):
    # encoding a big store into the latent cache costs minutes per 10k frames on 2 cores.
    max_frames: int | None = None
    checkpoint_every: int = 500
    sample_every: int = 1000
    keep_checkpoints: int = 3
    seed: int = 0
    # Stop this invocation after about this many minutes of training (None: run to ``steps``), with a
    # checkpoint and the model exported at the step reached: equal-time comparisons (issue 17).
    # Not part of the run's identity, like ``steps``: the same command resumes.
    max_minutes: float | None = None
    # Gather each batch's windows and draw its noise as whole tensors on the training device
    # (data/latents.DeviceWindows, TrainingNoise.draw_batch) instead of sample by sample: what a
    # GPU needs to be fed. Resumes exactly, but the draws then depend on the process count.
    batched_data: bool = False
    # A world model folder (`gamengen train`'s model/) whose U-Net weights a new run starts from,
    # with a fresh optimizer: a warm start, not a resume. It must have this preset's network, this
    # store's actions and this AE's encoder (the same latents), and stay in place while the run
    # resumes (its steps count in the exported model). A run of a size whose checkpoint is
    # too big to carry between machines continues from its exported model this way.
    init: str | None = None
    denoiser: DenoiserConfig = field(default_factory=DenoiserConfig)

    @classmethod
    def from_preset(cls, preset: str, **changes) -> "TrainConfig":
        if preset not in TRAIN_PRESETS:
            raise UserError(f"unknown preset '{preset}'", "use one of: " + ", ".join(TRAIN_PRESETS))
        return dataclasses.replace(cls(preset=preset, **TRAIN_PRESETS[preset]), **changes)

    def to_json(self) -> dict:
        return asdict(self)


def subset(records, max_frames: int | None, seed: int):
    """A seeded shuffle of the episodes, cut once ``max_frames`` are reached (None: all, in order)."""
    if max_frames is None:
        return records
    order = np.random.default_rng(seed).permutation(len(records))
    out, total = [], 0
    for i in order:
        if total >= max_frames:
            break
        out.append(records[i])
        total += records[i].length
    return sorted(out, key=lambda r: r.path)


def build_network(cfg: TrainConfig, codec, n_actions: int):
    from ..models.unet import ActionConditionedUNet

    C, h, w = codec.latent_shape()
    down = codec.padded[0] // h
    kw = UNET_PRESETS[cfg.preset]
    levels = len(kw["block_out_channels"]) - 1
    if h % 2**levels or w % 2**levels:
        raise UserError(f"latents of {h}x{w} do not halve {levels} times (AE downsamples by {down})",
                        "train the AE with a matching preset, or pick another --preset")
    return ActionConditionedUNet(latent_channels=C, latent_height=h, latent_width=w, context=cfg.context,
                                 n_actions=n_actions, noise_buckets=cfg.denoiser.noise_buckets, **kw)


def seed_of(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


def batched_draws(cfg: TrainConfig, step: int, rank: int, windows: DeviceWindows, per: int, latent_shape):
    """``draws_for`` with ``batched_data``: this process's share of the batch of ``step``, from
    generators seeded by (seed, step, rank), the noise drawn on the training device."""
    idx = torch.randint(0, len(windows.windows), (per,), generator=torch.Generator().manual_seed(
        seed_of(cfg.seed, step, rank, 0))).numpy()
    gen = torch.Generator(windows.device).manual_seed(seed_of(cfg.seed, step, rank, 1))
    return windows.batch(idx), TrainingNoise.draw_batch(gen, per, latent_shape, cfg.context, cfg.denoiser)


def draws_for(cfg: TrainConfig, step: int, windows: LatentWindows, lo: int, hi: int, latent_shape):
    """Samples lo..hi-1 of the global batch of ``step``: window indices and noise, from per-sample
    generators seeded by (seed, step, i)."""
    gens = [torch.Generator().manual_seed(seed_of(cfg.seed, step, i)) for i in range(lo, hi)]
    idx = [int(torch.randint(0, len(windows), (), generator=g)) for g in gens]
    return idx, TrainingNoise.draw(gens, latent_shape, cfg.context, cfg.denoiser)


def batch_of(windows: LatentWindows, idx: list[int], device) -> tuple[torch.Tensor, ...]:
    ctx, acts, tgt = zip(*(windows[i] for i in idx))
    return (torch.from_numpy(np.stack(ctx)).to(device), torch.from_numpy(np.stack(acts)).to(device),
            torch.from_numpy(np.stack(tgt)).to(device))


def _upgrade_old_settings(old: dict) -> None:
    # runs started before the sampler settings left DenoiserConfig (models/world_model.py) resume
    for moved in ("guidance", "inference_noise_level"):
        old.get("denoiser", {}).pop(moved, None)
    old.get("denoiser", {}).setdefault("timesteps", "uniform")  # runs from before the choice drew uniformly
    old.get("denoiser", {}).setdefault("unroll", 0.0)  # and had no unrolls
    old.get("denoiser", {}).setdefault("residual", False)  # and diffused the frame itself
    old.setdefault("init", None)  # and started from random weights


def sample_grid(denoiser: Denoiser, codec, windows: LatentWindows, n: int, sampler: SamplerConfig) -> np.ndarray:
    """Rows of: the last 3 context frames | truth | prediction (the exported model's sampler), as one image."""
    idx = np.linspace(0, len(windows) - 1, n).astype(int)
    ctx, acts, tgt = batch_of(windows, list(idx), next(denoiser.net.parameters()).device)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(tgt.shape, generator=gen).to(tgt.device)
    pred = denoiser.sample(ctx, acts, noise, sampler)
    rows = []
    for i in range(n):
        pics = [codec.decode(ctx[i, -k][None])[0] for k in (3, 2, 1)]
        pics += [codec.decode(tgt[i : i + 1])[0], codec.decode(pred[i : i + 1])[0]]
        rows.append(np.concatenate([np.pad(p, ((1, 1), (1, 1), (0, 0))) for p in pics], axis=1))
    return np.concatenate(rows, axis=0)


def train(data: str | os.PathLike, ae: str | os.PathLike, out: str | os.PathLike, cfg: TrainConfig,
          report: Callable[[int, int, float], None] = lambda step, total, loss: None,
          warn: Callable[[str], None] = print):
    from accelerate import Accelerator

    data, ae, out = Path(data), Path(ae), Path(out)
    accelerator = Accelerator(mixed_precision="bf16" if cfg.bf16 else "no", cpu=not torch.cuda.is_available())
    main = accelerator.is_main_process
    codec, store, train_recs = _open_inputs(data, ae, cfg)
    spec = store.spec
    if cfg.batch_size % accelerator.num_processes:
        raise UserError(f"batch size {cfg.batch_size} does not split over {accelerator.num_processes} processes",
                        "pick a --batch-size that is a multiple of the process count")
    init = _init_model(cfg, codec, list(spec.action_set.names))
    init_steps = init.meta.train_steps if init else 0
    run = RunFolder(out, {**cfg.to_json(), "data": str(data.resolve()), "ae": str(ae.resolve())},
                    keep=cfg.keep_checkpoints, upgrade=_upgrade_old_settings)
    if main:
        run.open()
    codec.ae.to(accelerator.device)  # encoding the cache and decoding samples
    cache = LatentCache(codec, ae / "latents")
    if main:
        cache.build(store, train_recs)
    accelerator.wait_for_everyone()
    windows = LatentWindows(store, cache, train_recs, cfg.context)
    batched = DeviceWindows(windows, accelerator.device) if cfg.batched_data else None
    net, opt, ema, start, losses = _build_or_resume(cfg, codec, len(spec.action_set),
                                                    init.net.state_dict() if init else None, run,
                                                    warn if main else (lambda m: None))
    del init  # its weights are in net now
    net, opt = accelerator.prepare(net, opt)
    ema.to(accelerator.device)
    plain = accelerator.unwrap_model(net)
    denoiser = Denoiser(plain, cfg.denoiser)
    rank = accelerator.process_index
    per = cfg.batch_size // accelerator.num_processes  # this process's share of the global batch
    latent_shape = codec.latent_shape()
    writer = None
    if main:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tb"))

    def save(step: int) -> None:
        if not main:
            return
        run.save(step, {"model": plain.state_dict(), "optimizer": opt.state_dict(), "ema": ema.state_dict(),
                        "step": step, "losses": losses, "rng": checkpoint.rng_state(), "config": cfg.to_json()})
        run.write_losses(losses)

    report(start, cfg.steps, losses[-1] if losses else float("nan"))
    deadline = Deadline(cfg.max_minutes)
    last = cfg.steps
    for step in range(start, cfg.steps):
        net.train()
        if batched is not None:
            (ctx, acts, tgt), draws = batched_draws(cfg, step, rank, batched, per, latent_shape)
        else:
            idx, draws = draws_for(cfg, step, windows, rank * per, (rank + 1) * per, latent_shape)
            ctx, acts, tgt = batch_of(windows, idx, accelerator.device)
        with accelerator.autocast():
            loss = denoiser.loss(tgt, ctx, acts, draws, net=net)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(net.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ema.step(plain.parameters())
        mean_loss = float(accelerator.reduce(loss.detach().float(), reduction="mean"))
        losses.append(mean_loss)
        if writer is not None:
            writer.add_scalar("train/loss", mean_loss, step + 1)
        report(step + 1, cfg.steps, mean_loss)
        done = step + 1
        if deadline.passed(accelerator):
            last = done
        if done % cfg.checkpoint_every == 0 or done == last:
            save(done)
        if main and cfg.sample_every and (done % cfg.sample_every == 0 or done == last):
            with ema_weights(ema, plain):
                grid = sample_grid(denoiser, codec, windows, 4, SamplerConfig())
                write_png(out / "samples" / f"step-{done:08d}.png", grid)
        if done == last:
            break
    accelerator.wait_for_everyone()
    if main:
        if writer is not None:
            writer.close()
        with ema_weights(ema, plain):
            export_model(plain, codec, out / "model", cfg, spec, len(losses), data, init_steps)
    accelerator.end_training()
    return losses


def _open_inputs(data: Path, ae: Path, cfg: TrainConfig):
    """The autoencoder, the store (checked against each other) and the training episodes."""
    from ..models.autoencoder import FrameCodec

    codec = FrameCodec.load(ae)
    store = Store.open(data)
    spec = store.spec
    if (spec.height, spec.width) != (codec.height, codec.width):
        raise UserError(f"store {data} has {spec.width}x{spec.height} frames, the AE in {ae} was made for "
                        f"{codec.width}x{codec.height}", "train an AE on this store with `gamengen train-ae`")
    if codec.meta.get("actions") not in (None, list(spec.action_set.names)):
        raise UserError(f"store {data} has actions {list(spec.action_set.names)}, the AE was trained on a game with "
                        f"{codec.meta['actions']}", "use an AE trained on this game's store")
    train_recs = subset(split(store.episodes(), cfg.heldout)[0], cfg.max_frames, cfg.seed)
    if not train_recs:
        raise UserError(f"store {data} has no training episodes", "record some with `gamengen record`")
    return codec, store, train_recs


def _build_or_resume(cfg: TrainConfig, codec, n_actions: int, init: dict | None, run: RunFolder, warn):
    """The network, its optimizer and EMA, fresh (from random weights, or ``init``'s) or from the
    run's newest checkpoint; -> (net, opt, ema, first step, losses so far)."""
    from diffusers.training_utils import EMAModel

    torch.manual_seed(cfg.seed)  # the initial weights, the same in every process and every rerun
    net = build_network(cfg, codec, n_actions)
    state = run.resume(warn)
    if state is None and init is not None:
        net.load_state_dict(init)
    opt = torch.optim.Adafactor(net.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    ema = EMAModel(net.parameters(), decay=cfg.ema_decay)  # from the initial weights
    if state is None:
        return net, opt, ema, 0, []
    net.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    ema.load_state_dict(state["ema"])
    checkpoint.set_rng_state(state["rng"])
    return net, opt, ema, int(state["step"]), list(state["losses"])


def _init_model(cfg: TrainConfig, codec, actions: list[str]) -> WorldModel | None:
    """The ``cfg.init`` model, checked against this run before anything is written (and on every
    resume, since its steps count in the export); a model of another game, AE or size is refused
    in one line."""
    if not cfg.init:
        return None
    folder = Path(cfg.init)
    other = WorldModel.from_pretrained(folder)
    fix = "pass --init a model trained with the same --preset, the store's game and the --ae, or leave --init out"
    if other.meta.actions != actions:
        raise UserError(f"the world model in {folder} has actions {other.meta.actions}, the store {actions}", fix)
    if other.codec.encoder_id() != codec.encoder_id():
        raise UserError(f"the world model in {folder} was trained on other latents (its AE's encoder is not "
                        "the --ae's)", fix)
    mine, theirs = build_network(cfg, codec, len(actions)).state_dict(), other.net.state_dict()
    if mine.keys() != theirs.keys() or any(mine[k].shape != theirs[k].shape for k in mine):
        raise UserError(f"the world model in {folder} is a {other.meta.preset} network with context "
                        f"{other.meta.context}, not this run's {cfg.preset} with context {cfg.context}", fix)
    return other


def export_model(net, codec, out: Path, cfg: TrainConfig, spec, steps: int, data: Path, init_steps: int = 0) -> None:
    """A self-contained model folder (models/world_model.WorldModel) with the default sampler;
    ``train_steps`` counts the ``init_steps`` of a ``cfg.init`` model too."""
    note = f"\nTrained on `{data}`.\n"
    if cfg.init:
        note += (f"Started from the weights of `{cfg.init}` ({init_steps} steps), then trained {steps} steps "
                 "with a fresh optimizer.\n")
    steps += init_steps
    meta = WorldModelMeta(env_id=spec.env_id, action_set=spec.action_set.to_json(), height=spec.height,
                          width=spec.width, fps=spec.fps, frame_skip=spec.frame_skip, context=cfg.context,
                          heldout=cfg.heldout, preset=cfg.preset, train_steps=steps, denoiser=cfg.denoiser)
    model = WorldModel(net, codec, meta, SamplerConfig())
    model.save_pretrained(out, model.default_card() + note)
