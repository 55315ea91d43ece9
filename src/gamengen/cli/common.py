"""What every command module shares: the Typer apps, progress bars, consoles, common options."""

from __future__ import annotations

import os
import sys

# OpenMP threads that spin while waiting make torch 10-30x slower whenever another process shares
# the cores (measured: a tiny U-Net step took 6.2 s instead of 0.4 s next to a PPO run on 2 cores).
# So the long jobs (training, recording, evaluation) wait passively; the commands a person waits on
# take OpenMP's own policy back (``interactive_threads``). Set before torch loads; a user's own
# setting wins.
_USER_WAIT_POLICY = "OMP_WAIT_POLICY" in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..envs import EnvConfig
from ..errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Learn a game from recorded play and play the learned game in real time.")
data_app = typer.Typer(no_args_is_help=True, help="Inspect, check, preview and export trajectory stores.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed figures measured on this machine.")
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
console = Console(stderr=True)
stdout = Console()


def interactive_threads() -> None:
    """First thing in a command a person waits on (play, clip play, generate, continue, bench):
    OpenMP's default wait policy, unless the user set one. Its workers spin a moment after each
    kernel, so a network of many small kernels does not pay a wake-up per kernel, as it does with
    PASSIVE: a clip-play chunk took 1.70 s instead of 1.04 s on 2 cores (docs/performance.md, "One
    compute thread"). It acts only before torch loads; commands import torch lazily, so it does."""
    if not _USER_WAIT_POLICY and "torch" not in sys.modules:
        os.environ.pop("OMP_WAIT_POLICY", None)


def warn_slow_bf16(bf16: bool) -> None:
    """One warning line when --bf16 is asked for on a CPU without bf16 units: autocast then emulates
    bf16 in a reference matrix product, an order of magnitude slower than fp32 (an InstructNet step took
    50 s instead of 4.5 s on a 2-core AVX2 EPYC). Said, not refused: the numbers stay right."""
    if not bf16:
        return
    import torch

    from ..precision import native_bf16

    if torch.cuda.is_available() or native_bf16() is not False:  # unknown: say nothing rather than guess
        return
    typer.echo(f"warning: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no bf16 units, so --bf16 runs "
               "many times slower than fp32; leave --bf16 out here", err=True)


@contextmanager
def progress_bar(what: str, total: int, done: int = 0):
    """A rich progress bar with rate and ETA; yields ``advance(n)``. Without a terminal (a job under
    nohup, a log file) it prints a plain line about once a minute instead, so long runs can be followed."""
    if not console.is_terminal:
        yield _log_progress(what, total, done)
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"),
               TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False) as p:
        task = p.add_task(what, total=total, completed=done)
        yield lambda n: p.advance(task, n)


def step_reporter(advance):
    """A training loop's ``report(step, total, loss)`` that moves the bar to ``step`` (a resumed run
    reports its first step as it starts)."""
    last = [0]

    def report(step, total, loss):
        advance(step - last[0])
        last[0] = step

    return report


def _log_progress(what: str, total: int, done: int, every_s: float = 60.0):
    import time

    # The rate is over the last interval, so set-up time (a latent cache build) does not skew the ETA.
    # A command's first report is where it starts (a resumed run's step), not work done since.
    state = {"done": done, "mark": None, "last": time.monotonic()}

    def advance(n: int) -> None:
        state["done"] += n
        now = time.monotonic()
        if state["mark"] is None:
            state["mark"], state["last"] = state["done"], now
        if now - state["last"] < every_s and state["done"] < total:
            return
        rate = (state["done"] - state["mark"]) / max(now - state["last"], 1e-9)
        state["last"], state["mark"] = now, state["done"]
        eta = f"ETA {(total - state['done']) / rate / 60:.0f} min" if rate > 0 else "ETA unknown"
        print(f"{time.strftime('%H:%M:%S')} {what}: {state['done']}/{total}, {rate:.3g}/s, {eta}",
              file=sys.stderr, flush=True)

    return advance


def parse_resolution(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
        return h, w
    except ValueError:
        raise UserError(f"bad resolution '{text}'", "write WIDTHxHEIGHT, e.g. 160x120 (paper preset: 320x240)") from None


RUNTIME_HELP = "onnx: the fast path (ONNX Runtime, the default); torch: the eager fp32 reference."


# Shared by clip continue, clip play, clip eval-control and bench clip-play (engine/clip.Steering.guidance);
# its default is engine/clip.CONTROL_GUIDANCE, written out so that the CLI loads without torch (a test
# holds them equal).
CONTROL_GUIDANCE = typer.Option(4.0, help="CFG weight on InstructNet's controls against the same InstructNet "
                                          "with them off (1: none, one branch less; ours, not the paper's).")
ENV_HELP = "Game: vizdoom:freedoom1/E1M1, vizdoom:scenario/basic, atari:Breakout, gym:<id> or toy:cursor."


MODEL_ENV = "GAMENGEN_MODEL"
# The bundled model closest to issue 17's targets (docs/results.md): the 1-step student of the
# defend_the_center world model; the paper's Freedoom E1M1 model is models/freedoom-e1m1.
BUNDLED_MODEL_DIR = Path("models") / "defend-the-center-1step"


def bundled_model_candidates() -> list[Path]:
    """Where a checkout keeps the bundled model: BUNDLED_MODEL_DIR in the current directory, then
    next to the source tree (src/gamengen/cli/ -> the checkout; only an editable install has one)."""
    here = Path(__file__).resolve().parents
    return [Path.cwd() / BUNDLED_MODEL_DIR] + ([here[3] / BUNDLED_MODEL_DIR] if len(here) > 3 else [])


def find_bundled_model() -> Path:
    """The model `play` and `bench` use without --model: $GAMENGEN_MODEL if set, else the bundled
    model of a checkout. Raises UserError (one line, exit 2) when there is none."""
    if os.environ.get(MODEL_ENV):
        path = Path(os.environ[MODEL_ENV]).expanduser()
        if not path.is_dir():
            raise UserError(f"{MODEL_ENV}={path} is not a folder", f"point {MODEL_ENV} at a model folder, or pass --model DIR")
        return path
    for path in bundled_model_candidates():
        if path.is_dir():
            return path
    raise UserError(f"no model given, and no bundled model here ({BUNDLED_MODEL_DIR} is not in {Path.cwd()})",
                    f"pass --model DIR, set {MODEL_ENV}=DIR, or run from a gamengen checkout")


class _BundledModel:
    """`--model`'s default: click calls a callable default only when the option is not given, so
    the bundled model is looked for then, and not finding it fails that command alone."""

    def __call__(self) -> Path:
        return find_bundled_model()

    def __str__(self) -> str:  # how --help shows the default
        return f"${MODEL_ENV}, else ./{BUNDLED_MODEL_DIR.as_posix()}"

    __repr__ = __str__


BUNDLED_MODEL = _BundledModel()


def run_server(make_app, config, open_browser: bool) -> None:
    """Serve ``make_app(port)`` (play's ``create_app`` or clip play's) until Ctrl-C, printing its URL."""
    from ..play.server import serve_app

    def ready(url: str) -> None:
        typer.echo(f"gamengen player: {url}")
        if config.host not in ("127.0.0.1", "localhost", "::1"):
            typer.echo(f"warning: listening on {config.host}, not only this machine; anyone with the URL can play",
                       err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    serve_app(make_app, config, ready)


def record_config(env, policy, steps, episodes, seed, workers, resolution, frame_skip, automap, max_episode_steps,
                  labels: bool = False, events: bool = False, event_kinds: str | None = None,
                  event_period: str | None = None, event_clear: float | None = None):
    """``event_kinds``: comma-separated event names (turns events on), or None for every kind;
    ``event_period``: "SHORTEST,LONGEST" seconds between events, or None for the paper's 5-10 s;
    ``event_clear``: seconds before each event at which lasting effects end (EnvConfig.event_clear_s)."""
    from ..record.recorder import RecordConfig

    h, w = parse_resolution(resolution)
    kinds = tuple(k.strip() for k in (event_kinds or "").split(",") if k.strip())
    if event_kinds is not None and not kinds:
        raise UserError("--event-kinds names no event", "e.g. --event-kinds invulnerability,radiation_suit")
    period = {}
    if event_period is not None:
        if not (events or kinds):
            raise UserError("--event-period is given with events off", "add --events (or --event-kinds)")
        try:
            period = {"event_period_s": tuple(float(v) for v in event_period.split(","))}
        except ValueError:
            raise UserError(f"bad --event-period {event_period!r}", "write SHORTEST,LONGEST seconds, e.g. 5,10") from None
    return RecordConfig(env_id=env, policy=policy, steps=steps, episodes=episodes, seed=seed, workers=workers,
                        max_episode_steps=max_episode_steps,
                        env=EnvConfig(height=h, width=w, frame_skip=frame_skip, automap=automap, labels=labels,
                                      events=events or bool(kinds), event_kinds=kinds, event_clear_s=event_clear,
                                      **period))
