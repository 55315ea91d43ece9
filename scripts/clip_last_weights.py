"""A clip training run's last weights as a model folder, beside the moving average its model/ holds.

    .venv/bin/python scripts/clip_last_weights.py RUN OUT

RUN/model (`gamengen clip train`'s export: the EMA of the weights when --ema-decay > 0) is copied to OUT
with the MSDiT's weights replaced by those of RUN's newest checkpoint, the weights of the last step, so
the two can be scored by the same `gamengen clip eval` (docs/gamegen_x.md compares them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from gamengen.models.clip_model import ClipModel
from gamengen.train import checkpoint


def main(run: Path, out: Path) -> None:
    if out.exists():
        sys.exit(f"{out} exists; pass a new folder")
    model = ClipModel.from_pretrained(run / "model")
    state = checkpoint.load_latest(run / "checkpoints", print)
    if state is None:
        sys.exit(f"{run} has no whole checkpoint")
    model.net.load_state_dict(state["model"])
    card = (run / "model" / "README.md").read_text().replace(
        "Its weights are the exponential moving average of training's", "Its weights are the last step's, not the moving average")
    model.save_pretrained(out, card + f"\nThe MSDiT's weights are those of step {int(state['step'])} of this leg, the last.\n")
    print(f"{out}: the last weights of {run} (leg step {int(state['step'])})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
