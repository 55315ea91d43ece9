"""A training run's folder, the same for `train-ae`, `train`, `distill` and `agent`.

- **Settings.** The resolved settings are written to the folder when the run starts. Run the same
  command again and it resumes; run it with other settings and it is refused in one line, except
  for the settings that only say how far or how often (``may_change``: steps, checkpoint cadence,
  time budget, bf16 autocast).
- **Checkpoints** go through train/checkpoint.py (atomic, a sha256 manifest written last, the
  newest ``keep`` kept); ``resume`` loads the newest whole one, falling back past damaged ones.
- **Time budget.** ``Deadline`` stops one invocation after ``max_minutes`` at the step reached.

Tests kill a run between a checkpoint's files and its manifest through an environment variable
(``KILL_AT_SAVE``), so no test hook sits in a public signature.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Callable

from ..atomic import write_json_atomic
from ..errors import UserError
from . import checkpoint

KILL_AT_SAVE = "GAMENGEN_TEST_KILL_AT_SAVE"  # tests only: SIGKILL before checkpoint N's manifest
MAY_CHANGE = ("steps", "checkpoint_every", "sample_every", "keep_checkpoints", "max_minutes", "bf16")


class RunFolder:
    def __init__(self, root: str | os.PathLike, settings: dict, *, keep: int = 3, settings_file: str = "config.json",
                 may_change: tuple[str, ...] = MAY_CHANGE, upgrade: Callable[[dict], None] = lambda old: None):
        """``upgrade`` brings the settings of a run started by an older version up to date in place
        (a setting that moved elsewhere), so that run still resumes."""
        self.root, self.settings, self.keep = Path(root), settings, keep
        self.settings_path = self.root / settings_file
        self.may_change, self.upgrade = may_change, upgrade

    def recorded(self, key: str):
        """A setting as the run recorded it when it began or last resumed (None: a new run, or not recorded)."""
        try:
            return json.loads(self.settings_path.read_text()).get(key)
        except (OSError, ValueError, AttributeError):
            return None  # a new run; a damaged file is open()'s to report

    def open(self) -> "RunFolder":
        """Create the folder, or check that it was started with these settings; then record them."""
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"{self.root} is not a folder", "pick another --out")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create run folder {self.root}: {e.strerror}", "pick a writable --out folder") from None
        if self.settings_path.exists():
            try:
                old = json.loads(self.settings_path.read_text())
            except json.JSONDecodeError:
                raise UserError(f"{self.settings_path} is not valid JSON",
                                "restore it, or start a new run with another --out") from None
            self.upgrade(old)
            changed = sorted(k for k in self.settings if k not in self.may_change and old.get(k) != self.settings[k])
            if changed:
                raise UserError(f"run {self.root} was started with other settings ({', '.join(changed)})",
                                "re-run with the original settings to resume, or use another --out")
        write_json_atomic(self.settings_path, self.settings)
        return self

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def resume(self, warn: Callable[[str], None] = print) -> dict | None:
        """The newest whole checkpoint's state, or None for a fresh run."""
        return checkpoint.load_latest(self.checkpoints, warn)

    def resume_into(self, model, optimizer, warn: Callable[[str], None] = print) -> tuple[int, list[float], dict | None]:
        """Load the newest checkpoint's "model" and "optimizer" into these; -> (step, losses, the whole
        state for the caller's other entries), or (0, [], None) for a fresh run."""
        state = self.resume(warn)
        if state is None:
            return 0, [], None
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"]), list(state["losses"]), state

    def save(self, step: int, state: dict) -> Path:
        kill = os.environ.get(KILL_AT_SAVE) == str(step)
        return checkpoint.save(self.checkpoints, step, state, keep=self.keep,
                               before_manifest=(lambda: os.kill(os.getpid(), signal.SIGKILL)) if kill else (lambda: None))

    def write_losses(self, losses: list[float]) -> None:
        write_json_atomic(self.root / "losses.json", losses)


def descend(loss, optimizer, params, grad_clip: float) -> None:
    """One optimiser step on ``loss``: fresh gradients, clipped to ``grad_clip`` in total norm."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()


def run_steps(run: RunFolder, net, opt, done: int, losses: list[float], steps: int, step_loss: Callable[[int], object],
              report: Callable[[int, int, float], None], *, grad_clip: float, checkpoint_every: int,
              max_minutes: float | None, ema=None) -> int:
    """The loop of a run whose state is its model, optimizer, losses and, if given, ``ema`` (a diffusers
    EMAModel of ``net``, stepped after every descent, checkpointed as "ema"): from step ``done`` to ``steps``,
    descend ``step_loss(step)`` (a scalar tensor); checkpoint every ``checkpoint_every`` steps, at the
    last, and when ``max_minutes`` have passed (then stop). -> the steps done."""
    report(done, steps, losses[-1] if losses else float("nan"))
    deadline = Deadline(max_minutes)
    while done < steps:
        loss = step_loss(done)
        descend(loss, opt, net.parameters(), grad_clip)
        if ema is not None:
            ema.step(net.parameters())
        done += 1
        losses.append(loss.item())
        report(done, steps, losses[-1])
        late = deadline.passed()
        if done % checkpoint_every == 0 or done == steps or late:
            state = {"step": done, "model": net.state_dict(), "optimizer": opt.state_dict(), "losses": losses}
            run.save(done, state if ema is None else {**state, "ema": ema.state_dict()})
            run.write_losses(losses)
        if late:
            break
    return done


class ema_weights:
    """Temporarily swap the EMA weights into the network (for samples and the exported model)."""

    def __init__(self, ema, net):
        self.ema, self.net = ema, net

    def __enter__(self):
        self.ema.store(self.net.parameters())
        self.ema.copy_to(self.net.parameters())
        self.net.eval()

    def __exit__(self, *exc):
        self.ema.restore(self.net.parameters())


def end_step(run: RunFolder, deadline: "Deadline", done: int, last: int, every: int, state: Callable[[], dict],
             losses: list[float]) -> tuple[int, bool]:
    """After step ``done`` of a loop that keeps ``losses``: the time budget may make it the last;
    checkpoint every ``every`` steps and at the last. -> (the last step, whether to stop now)."""
    if deadline.passed():
        last = done
    if done % every == 0 or done == last:
        run.save(done, state())
        run.write_losses(losses)
    return last, done == last


class Deadline:
    """``max_minutes`` of this invocation (None: no limit). Under several processes all stop at the
    same step: the first clock past the deadline decides for all."""

    def __init__(self, minutes: float | None):
        self.end = None if minutes is None else time.monotonic() + 60 * minutes

    def passed(self, accelerator=None) -> bool:
        if self.end is None:
            return False
        hit = time.monotonic() >= self.end
        if accelerator is None or accelerator.num_processes == 1:
            return hit
        import torch

        flag = torch.tensor([float(hit)], device=accelerator.device)
        return bool(accelerator.reduce(flag, reduction="sum")[0] > 0)
