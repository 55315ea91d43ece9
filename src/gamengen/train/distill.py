"""`gamengen distill`: a 1-step student of a trained world model (paper §3.3 and App. A.4).

The paper plays with 4 DDIM steps and reports that a distilled single-step model reaches 50 FPS
at some cost in quality. Its distillation follows distribution-matching methods (Yin et al. 2024),
which need a second, "fake" score network. At CPU scale we use the simplest form that fits the
sampler: the student starts as a copy of the teacher and learns to reproduce, in one DDIM step from
the same noise and context, the frame latent that the teacher's 4 guided steps make (regression on
the teacher's deterministic noise-to-latent map, as in Luhman & Luhman 2021). CFG is folded into the
student, so it runs one branch instead of two: one U-Net call per frame instead of eight.

Contexts come from the training episodes' windows (never held-out ones), clean, as the engine gives
them at play time. Every draw of step s, sample i comes from a generator seeded by (seed, s, i), so
a resumed run replays exactly, as in `gamengen train`.

Run folder::

    <run>/config.json          the resolved DistillConfig (a resumed run must match it)
    <run>/checkpoints/step-N/  crash-safe checkpoints (train/checkpoint.py)
    <run>/losses.json          the loss of every step so far
    <run>/model/               the student: the teacher's model folder with the student's U-Net
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import torch

from ..data.latents import LatentCache, LatentWindows, split
from ..data.store import Store
from ..errors import UserError
from ..models.world_model import WorldModel
from .run import Deadline, RunFolder, descend, end_step
from .world_model import TrainConfig, batch_of, draws_for, subset


@dataclass
class DistillConfig:
    steps: int = 2000
    batch_size: int = 16
    teacher_steps: int = 4  # the teacher's sampler: DDIM 4 steps + CFG (paper §3.3)
    learning_rate: float = 3e-3  # torch Adafactor (relative step), as in `gamengen train`
    grad_clip: float = 1.0
    max_frames: int | None = None  # a seeded subset of the training episodes, as in `gamengen train`
    checkpoint_every: int = 100
    keep_checkpoints: int = 3
    seed: int = 0
    max_minutes: float | None = None  # stop this invocation after about this long (as `gamengen train`)
    # bf16 autocast of the teacher's and the student's forward passes (the student's weights, its
    # optimizer and the loss stay fp32), as `train --bf16`; may change when a run resumes.
    bf16: bool = False


def distill(teacher_dir: str | Path, data: str | Path, out: str | Path, cfg: DistillConfig,
            report: Callable[[int, int, float], None] = lambda step, total, loss: None,
            warn: Callable[[str], None] = print, latents: str | Path | None = None) -> list[float]:
    """``latents``: a latent-cache root to reuse (e.g. the AE run's ``latents/``); entries are keyed
    by the encoder's weights, so another AE's cache is never read by mistake."""
    from ..diffusion.denoiser import Denoiser
    from ..diffusion.sampling import solve

    teacher_dir, out = Path(teacher_dir), Path(out)
    if WorldModel.read_meta(teacher_dir)[0].distilled_from is not None:
        raise UserError(f"{teacher_dir} is already a 1-step model", "distill the model it was distilled from")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, store, tcfg, windows, run = open_model_run(teacher_dir, data, out, cfg, "teacher", latents, device)
    meta, sampler = model.meta, model.sampler
    codec, teacher = model.codec, model.net.requires_grad_(False)
    teacher.to(device)
    guided = Denoiser(teacher, meta.denoiser)
    teacher_sampler = replace(sampler, steps=cfg.teacher_steps)
    one_step = guided.schedule("ddim", 1)  # the student plays in one DDIM step, from the same noise

    student = copy.deepcopy(teacher).train().requires_grad_(True)
    student_denoiser = Denoiser(student, meta.denoiser)  # the teacher's parameterisation, unguided
    opt = torch.optim.Adafactor(student.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
    start, losses, _ = run.resume_into(student, opt, warn)
    shape = codec.latent_shape()
    B = cfg.batch_size
    bucket = torch.zeros(B, dtype=torch.long, device=device)  # clean contexts, as at play (noise level 0)
    report(start, cfg.steps, losses[-1] if losses else float("nan"))
    deadline, last = Deadline(cfg.max_minutes), cfg.steps
    for step in range(start, cfg.steps):
        idx, draws = draws_for(tcfg, step, windows, 0, B, shape)
        ctx, acts, _ = batch_of(windows, idx, device)
        noise = draws.noise.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            target = guided.sample(ctx, acts, noise, teacher_sampler)
            pred = solve(student_denoiser.guided_by_bucket(ctx, acts, bucket, 1.0), noise, one_step,
                         guided.alphas_cumprod)
        loss = torch.nn.functional.mse_loss(pred.float(), target.float())
        descend(loss, opt, student.parameters(), cfg.grad_clip)
        losses.append(float(loss.detach()))
        report(step + 1, cfg.steps, losses[-1])
        last, stop = end_step(run, deadline, step + 1, last, cfg.checkpoint_every, lambda: {
            "model": student.state_dict(), "step": step + 1, "optimizer": opt.state_dict(), "losses": losses}, losses)
        if stop:
            break
    _export(student.eval(), model, teacher_dir, out / "model", cfg, len(losses))
    return losses


def open_model_run(model_dir: Path, data: str | Path, out: Path, cfg, role: str, latents: str | Path | None,
                   device: torch.device):
    """What a run on top of a model folder (`distill`, `tune-decoder`) opens first: the model; its
    store, checked against it; the model's window split of the training episodes (``cfg.max_frames``
    of them) with draws seeded by ``cfg.seed``; the run folder, whose settings are ``cfg`` with the
    model's (under ``role``) and the store's paths; and the latent cache (``latents``, or the run's),
    encoded with the AE already on ``device``. -> (model, store, the TrainConfig of the draws, windows, run folder)"""
    data = Path(data)
    meta, _ = WorldModel.read_meta(model_dir)
    store = Store.open(data)
    meta.check_store(store.spec, data)
    model = WorldModel.from_pretrained(model_dir)
    model.codec.ae.to(device)
    tcfg = TrainConfig(context=meta.context, heldout=meta.heldout, seed=cfg.seed, denoiser=meta.denoiser)
    recs = subset(split(store.episodes(), tcfg.heldout)[0], cfg.max_frames, cfg.seed)
    if not recs:
        raise UserError(f"store {data} has no training episodes", "record some with `gamengen record`")
    run = RunFolder(out, {**asdict(cfg), role: str(model_dir.resolve()), "data": str(data.resolve())},
                    keep=cfg.keep_checkpoints).open()
    cache = LatentCache(model.codec, Path(latents) if latents else out / "latents")
    cache.build(store, recs)
    return model, store, tcfg, LatentWindows(store, cache, recs, tcfg.context), run


def _export(student, teacher: WorldModel, teacher_dir: Path, out: Path, cfg: DistillConfig, steps: int) -> None:
    """The teacher's model (AE, starts) with the student's U-Net, sampled in 1 step without CFG (the
    guidance is folded in), and where it came from."""
    student_model = replace(
        teacher, net=student, sampler=replace(teacher.sampler, steps=1, guidance=1.0),
        meta=replace(teacher.meta, distilled_from=str(teacher_dir), distill_steps=steps))
    student_model.save_pretrained(out, (
        f"# gamengen world model, 1-step student of `{teacher_dir}`\n\n"
        f"Distilled for {steps} steps of batch {cfg.batch_size} (`gamengen distill`) to reproduce in one DDIM step "
        f"the teacher's {cfg.teacher_steps} DDIM steps with CFG {teacher.sampler.guidance}; it plays without "
        "CFG. The AE and the start contexts are the teacher's.\n"))
