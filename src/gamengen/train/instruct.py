"""`gamengen clip train-instruct`: GameGen-X's stage 2, InstructNet beside the frozen clip model (§3.4, §3.5).

§3.5's recipe: the foundation model is frozen and the task is 100% continuation (the first x of L
latent frames held clean, x uniform in 1..L-1); 20% of the samples have no control, the other 80%
are 30% instruction + keys, 30% instruction only, 30% instruction + video prompt, 10% all three, the
prompt's kind drawn uniformly. §3.4: light Gaussian noise on the context latents, against the error
that builds up when a model continues its own output. The base still reads the clip's GEN caption,
dropped 25% of the time as in stage 1, so CFG on it works with InstructNet attached.

Inputs come from the clip datasets (curate/dataset.py): the clip's latents and video-prompt latents
(encoded once by the base's codec, cached in the run), its GEN and instruction captions (encoded once
by the base's text encoder) and its keys per frame. A clip without keys (a video file) draws
instruction only where its draw asked for keys. Without --prompts there are no video prompts: those
draws fall back the same way (instruction + video prompt -> instruction; all three -> instruction + keys).

Every draw of step s, sample i comes from a generator seeded by (seed, s, i), so a run resumes
exactly (train/run.py)::

    <run>/config.json, checkpoints/, losses.json   as for `gamengen clip train`
    <run>/cache/                                   latents, prompt latents, caption features
    <run>/model/                                   the InstructNet (models/instruct_model.py)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..curate.dataset import ClipDataset
from ..curate.prompts import KINDS
from ..data.captions import fired_events
from ..diffusion.flow import flow_loss, frame_mask, sample_t
from ..envs.vizdoom_env import DOOM_EVENTS
from ..errors import UserError
from ..models.clip_model import ClipModel
from ..models.instruct_model import InstructMeta, InstructModel, base_key
from ..models.instructnet import ControlInputs, InstructNet, controlled, latent_keys
from .clip import open_datasets
from .clip_data import TextCache, cache_latents, cache_text, text_rows
from .run import MAY_CHANGE, RunFolder, run_steps
from .world_model import seed_of

MODES = ("none", "keys", "instruction", "prompt", "all")  # what a sample is given besides the GEN caption


@dataclass
class InstructTrainConfig:
    steps: int = 2000
    batch_size: int = 8
    learning_rate: float = 5e-4  # §3.5's fixed Adam rate of stage 1; the paper gives none for stage 2
    grad_clip: float = 1.0
    layers: int | None = None  # InstructNet's layer pairs; None: half the base's (the paper: 28 blocks beside 28 layers)
    # §3.5: 20% without control; of the rest 30% instruction + keys, 30% instruction only, 30% instruction +
    # video prompt, 10% all three.
    no_control: float = 0.2
    recipe: dict = field(default_factory=lambda: {"keys": 0.3, "instruction": 0.3, "prompt": 0.3, "all": 0.1})
    prompts: list[str] = field(default_factory=list)  # video prompt kinds (curate/prompts.py KINDS); [] = none
    text_dropout: float = 0.25  # the GEN caption, as in stage 1
    context_noise: float = 0.05  # std of §3.4's light Gaussian noise on the context latents (ours: the paper gives none)
    # False: the paper's "w/o instruct captions" ablation (§4.3): InstructNet never reads the instruction,
    # the draws stay the same (keys and prompts where the recipe gives them).
    instructions: bool = True
    # Levers against an InstructNet that ignores its controls (docs/gamegen_x.md, "Why no control"), ours:
    key_modulation: bool = False  # the keys also shift the adaLN modulation of InstructNet's blocks
    # The instruction's pooled features also give an affine of each layer's latent, as the keys do
    # (models/instructnet.py). An --init without it gains it at zero, so the run starts from its behaviour.
    instruction_modulation: bool = False
    expert_lr_scale: float = 1.0  # the fusion experts learn at this multiple of the learning rate
    key_change_share: float = 0.0  # this share of draws from clips whose keys change inside them (key_changes)
    # This share of draws from clips where an in-game event fires, their context ending before its effect
    # shows (event_bounds): the instruction's Trans and Light fields then say what the frames to generate
    # do. Under the plain draw an event's effect falls in the generated part of a few per cent of samples.
    event_share: float = 0.0
    # The mean of the logit-normal t draw (ours; "uniform" ignores it): > 0 spends more of the batch near t = 1,
    # where the generated frames' layout, and so the motion a key asks for, is still undecided. SD3 (Esser et
    # al. 2024) shifts t toward noise in the same spirit for larger images.
    timestep_mean: float = 0.0
    timesteps: str = "logit_normal"
    # The weight of the frames' mean error in the loss (diffusion/flow.flow_loss's mean_weight; ours): a
    # tint or light change moves mostly the latent's channel means, which the plain MSE weighs as one
    # spatial frequency among h * w.
    mean_loss: float = 0.0
    # An InstructNet folder trained beside the same clip model: a new run starts from its weights with a fresh
    # optimizer, and draws the batches its run would have drawn next (the steps count on from its own).
    init: str | None = None
    seed: int = 0
    checkpoint_every: int = 250
    keep_checkpoints: int = 2
    max_minutes: float | None = None
    bf16: bool = False

    def __post_init__(self) -> None:
        if (self.steps < 0 or self.batch_size < 1 or self.checkpoint_every < 1 or self.learning_rate <= 0
                or self.expert_lr_scale <= 0):
            raise UserError("steps must be >= 0, batch size and checkpoint cadence >= 1, the learning rate and its "
                            "expert scale > 0",
                            "fix the training settings")
        if self.layers is not None and self.layers < 1:
            raise UserError(f"--layers must be at least 1, got {self.layers}", "e.g. --layers 3")
        if not (0 <= self.no_control <= 1 and 0 <= self.text_dropout <= 1 and 0 <= self.key_change_share <= 1
                and 0 <= self.event_share <= 1 and self.context_noise >= 0 and self.mean_loss >= 0):
            raise UserError("the no-control share, text dropout, key-change and event shares must be in [0, 1], the "
                            "context noise and mean loss weight >= 0",
                            "fix the training settings")
        if set(self.recipe) != set(MODES[1:]) or min(self.recipe.values()) < 0 or not sum(self.recipe.values()) > 0:
            raise UserError(f"the control recipe needs shares >= 0 for {', '.join(MODES[1:])}", "fix the recipe")
        unknown = sorted(set(self.prompts) - set(KINDS))
        if unknown:
            raise UserError(f"unknown video prompt kind {unknown[0]!r}", "use one of: " + ", ".join(KINDS))


def parse_recipe(entries: list[str]) -> dict:
    """["prompt=0.8", "all=0.2"] -> a recipe (InstructTrainConfig.recipe); the modes left out get 0."""
    recipe = dict.fromkeys(MODES[1:], 0.0)
    for e in entries:
        mode, sep, share = e.partition("=")
        try:
            ok = sep and mode in recipe and float(share) >= 0
        except ValueError:
            ok = False
        if not ok:
            raise UserError(f"bad --recipe {e!r}", f"write MODE=SHARE with MODE one of {', '.join(MODES[1:])} and "
                                                   "SHARE >= 0, e.g. --recipe prompt=1")
        recipe[mode] = float(share)
    return recipe


@dataclass
class InstructDraw:
    clip: int
    context: int  # latent frames held clean, 1..L-1
    drop_text: bool  # the GEN caption dropped (the base's null text)
    t: float
    noise: torch.Tensor  # (L, C, h, w)
    context_noise: torch.Tensor  # (L, C, h, w), scaled; used on the context frames only
    mode: str  # one of MODES, after the fall-backs for a clip without keys and a run without prompts
    prompt: int  # index into cfg.prompts (when mode uses a prompt)
    instruction: bool  # the instruction caption is given (every mode but "none", unless ablated)


def draw_sample(cfg: InstructTrainConfig, step: int, i: int, n_clips: int, latent_shape: tuple[int, ...],
                has_keys: np.ndarray, changing: np.ndarray | None = None,
                bounds: np.ndarray | None = None) -> InstructDraw:
    """Sample i of step ``step`` from a generator seeded by (seed, step, i); a fixed order of draws.
    ``changing``: the clips whose keys change inside them (key_changes), for cfg.key_change_share;
    ``bounds``: per clip the most context frames before its event (event_bounds), for cfg.event_share."""
    g = torch.Generator().manual_seed(seed_of(cfg.seed, step, i))
    clip = int(torch.randint(n_clips, (), generator=g))
    L = latent_shape[0]
    x = int(torch.randint(1, max(L, 2), (), generator=g))
    u_text, u_control, u_mode, u_prompt = torch.rand(4, generator=g).tolist()
    t = float(sample_t(1, g, cfg.timesteps, mean=cfg.timestep_mean)[0])
    noise = torch.randn(latent_shape, generator=g)
    context_noise = cfg.context_noise * torch.randn(latent_shape, generator=g)
    if cfg.key_change_share > 0 and changing is not None and len(changing):  # one more draw, after the others
        u_change, u_pick = torch.rand(2, generator=g).tolist()
        if u_change < cfg.key_change_share:
            clip = int(changing[min(int(u_pick * len(changing)), len(changing) - 1)])
    eventful = np.flatnonzero(bounds) if cfg.event_share > 0 and bounds is not None else ()
    if len(eventful):  # likewise one more draw, so a run without it draws as before
        u_event, u_pick = torch.rand(2, generator=g).tolist()
        if u_event < cfg.event_share:
            clip = int(eventful[min(int(u_pick * len(eventful)), len(eventful) - 1)])
            x = min(x, int(bounds[clip]))
    mode = "none"
    if u_control >= cfg.no_control:
        shares = np.array([cfg.recipe[m] for m in MODES[1:]], np.float64)
        mode = MODES[1:][min(int(np.searchsorted(np.cumsum(shares / shares.sum()), u_mode, side="right")), 3)]
    if not cfg.prompts:
        mode = {"prompt": "instruction", "all": "keys"}.get(mode, mode)
    if not has_keys[clip]:
        mode = {"keys": "instruction", "all": "prompt"}.get(mode, mode)
        if mode == "prompt" and not cfg.prompts:
            mode = "instruction"
    prompt = min(int(u_prompt * len(cfg.prompts)), len(cfg.prompts) - 1) if cfg.prompts else 0
    return InstructDraw(clip, x, u_text < cfg.text_dropout, t, noise, context_noise, mode, prompt,
                        mode != "none" and cfg.instructions)


@dataclass
class InstructData:
    """Everything a batch is made from, in memory."""

    latents: np.ndarray  # (N, L, C, h, w) float16
    prompts: list[np.ndarray]  # per kind of cfg.prompts, (N, L, C, h, w) float16
    keys: np.ndarray  # (N, F, K) float32 held shares per video frame, in key_names order
    has_keys: np.ndarray  # (N,) bool
    captions: TextCache  # GEN
    instructions: TextCache  # INS


def key_changes(keys: np.ndarray, compression: int, threshold: float = 0.5) -> np.ndarray:
    """The clips whose keys change inside them: (N, F, K) held shares -> indices of the clips where some
    key's share moves by more than ``threshold`` between two consecutive latent frames (from latent frame
    1: frame 0 has no keys). About half the clips of a random policy that holds each action 4 steps and
    keeps it half the time have none (48% on Freedoom E1M1 and defend_the_center do): there the
    context's own motion says what the keys say."""
    lk = latent_keys(torch.from_numpy(keys), compression)[:, 1:]  # (N, L - 1, K)
    return np.flatnonzero((lk[:, 1:] - lk[:, :-1]).abs().amax((1, 2)).numpy() > threshold)


def event_bounds(trans: list[str], fps: float, clip_frames: int, compression: int) -> np.ndarray:
    """Per clip (its INS Trans field), the most latent context frames that leave the effect of its last
    event (data/captions.fired_events) to the frames generated; 0: no event shows in the clip. An event
    fired at step t shows from video frame t + 1, which lies in latent frame ceil((t + 1) / r) (frame 0
    is latent frame 0, then r frames each); context x holds video frames 0 .. r (x - 1)."""
    L = (clip_frames - 1) // compression + 1
    out = np.zeros(len(trans), np.int64)
    for n, text in enumerate(trans):
        fired = fired_events(text, DOOM_EVENTS)
        if fired:
            shows = round(fired[-1][1] * fps) + 1
            out[n] = min(-(-shows // compression), L - 1)
    return out


def key_table(sets: list[ClipDataset]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Every clip's keys in one vocabulary (the datasets' key names, first seen first):
    (names, (N, F, K) float32, (N,) bool has keys). ViZDoom stores share button names, so a scenario's
    TURN_LEFT is a map's TURN_LEFT."""
    names: list[str] = []
    for ds in sets:
        for i in range(len(ds)):
            k = ds.keys(i)
            if k is not None:
                names += [n for n in k[0] if n not in names]
    if not names:
        raise UserError("no clip records keys (the clips come from video files, or were curated before keys were kept)",
                        "curate trajectory stores with this gamengen (`gamengen curate --from STORE`)")
    F = sets[0].clip_frames
    rows, has = [], []
    for ds in sets:
        for i in range(len(ds)):
            k, row = ds.keys(i), np.zeros((F, len(names)), np.float32)
            if k is not None:
                row[:, [names.index(n) for n in k[0]]] = k[1]
            rows.append(row)
            has.append(k is not None)
    return names, np.stack(rows), np.array(has)


def batch_inputs(draws: list[InstructDraw], data: InstructData, compression: int, device: torch.device):
    """-> (z (B, L, C, h, w) with noised context frames, noise, t (B,), context (B,), GEN text and mask,
    ControlInputs)."""
    clips = [d.clip for d in draws]
    z = torch.from_numpy(data.latents[clips].astype(np.float32))
    B, L = z.shape[:2]
    mask = frame_mask(B, L, torch.tensor([d.context for d in draws]))  # (B, L): 0 on context frames
    # §3.4: light noise on the context frames only; the generated frames' targets stay the clean latents.
    z = z + (1 - mask)[..., None, None, None] * torch.stack([d.context_noise for d in draws])
    text, text_mask = text_rows(data.captions, clips, [d.drop_text for d in draws])
    modes = [d.mode for d in draws]
    has_keys = torch.tensor([m in ("keys", "all") for m in modes])
    has_instruction = torch.tensor([d.instruction for d in draws])
    has_prompt = torch.tensor([m in ("prompt", "all") for m in modes])
    ins, ins_mask = text_rows(data.instructions, clips, [not h for h in has_instruction.tolist()])
    keys = latent_keys(torch.from_numpy(data.keys[clips]), compression)  # (B, L, K)
    prompt = torch.zeros_like(z)
    for b, d in enumerate(draws):
        if has_prompt[b]:
            prompt[b] = torch.from_numpy(data.prompts[d.prompt][d.clip].astype(np.float32))
    controls = ControlInputs(keys, has_keys, torch.from_numpy(ins), torch.from_numpy(ins_mask), has_instruction,
                             prompt, has_prompt)
    to = lambda v: v.to(device)  # noqa: E731
    return (to(z), to(torch.stack([d.noise for d in draws])), to(torch.tensor([d.t for d in draws])),
            to(mask), to(torch.from_numpy(text)), to(torch.from_numpy(text_mask)),
            ControlInputs(**{k: to(v) for k, v in controls.as_kwargs().items()}))


def clip_controls(sets: list[ClipDataset]) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """Every clip's controls: key names, keys (N, F, K), has keys (N,) and instruction captions; a UserError
    when the clips cannot train an InstructNet."""
    names, keys, has_keys = key_table(sets)
    instructions = [ds.meta(i)["captions"].get("instruction") or "" for ds in sets for i in range(len(ds))]
    if not all(instructions):
        raise UserError("some clips have no instruction caption", "re-run `gamengen curate` with this gamengen")
    return names, keys, has_keys, instructions


def instruct_data(sets: list[ClipDataset], captions: list[str], controls, base: ClipModel, cache: Path, prompts,
                  stage: Callable[[str], None] = lambda m: None) -> InstructData:
    """Everything batches are made from; latents and caption features are encoded once by the base and
    kept in ``cache``. ``controls``: clip_controls(sets)."""
    _, keys, has_keys, instructions = controls
    return InstructData(np.concatenate([cache_latents(d, base.codec, cache, stage) for d in sets]),
                        [np.concatenate([cache_latents(d, base.codec, cache, stage, prompt=k) for d in sets])
                         for k in prompts],
                        keys, has_keys, cache_text(captions, base.text, cache, stage),
                        cache_text(instructions, base.text, cache, stage))


def datasets_event_bounds(sets: list[ClipDataset], compression: int) -> np.ndarray:
    """event_bounds of every clip, in dataset order; a UserError when no clip has an event."""
    bounds = np.concatenate([event_bounds([ds.meta(i)["captions"]["fields"].get("Trans", "") for i in range(len(ds))],
                                          ds.fps, ds.clip_frames, compression) for ds in sets])
    if not bounds.any():
        raise UserError("--event-share draws clips with in-game events, and no clip here has one",
                        "record with `gamengen record --events` and curate again, or leave --event-share out")
    return bounds


def _check_datasets(sets: list[ClipDataset], base: ClipModel, clips: list[Path]) -> None:
    m, ds = base.meta, sets[0]
    if (ds.clip_frames, ds.height, ds.width) != (m.frames, m.height, m.width) or abs(ds.fps - m.fps) > 1e-6:
        raise UserError(f"the clips in {clips[0]} are {ds.clip_frames} frames of {ds.width}x{ds.height} at {ds.fps:g} fps, "
                        f"the clip model makes {m.frames} of {m.width}x{m.height} at {m.fps:g}",
                        "curate the clips like the clip model's own")


def _init_net(cfg: InstructTrainConfig, base: ClipModel, names: list[str]) -> InstructModel | None:
    """The ``cfg.init`` InstructNet, checked against this run: the same clip model (InstructModel checks its
    digest), keys, layers and key modulation, and video prompt kinds among those it trained on (every kind
    goes through the one prompt embedding, so a run may go on with fewer)."""
    if not cfg.init:
        return None
    init = InstructModel.from_pretrained(cfg.init, base)
    layers = cfg.layers or InstructNet.default_layers(base.net)
    ours = (names, layers, cfg.key_modulation)
    theirs = (init.meta.key_names, init.net.config.num_layers, init.net.config.key_modulation)
    for what, a, b in zip(("keys", "layer pairs", "key modulation"), ours, theirs):
        if a != b:
            raise UserError(f"the InstructNet in {cfg.init} has {what} {b}, this run {a}",
                            "pass the same --layers and --key-modulation as its run, on clips with the same keys, "
                            "or leave --init out")
    if init.net.config.instruction_modulation and not cfg.instruction_modulation:
        raise UserError(f"the InstructNet in {cfg.init} has instruction modulation, this run not",
                        "pass --instruction-modulation, or leave --init out")
    if not set(cfg.prompts) <= set(init.meta.prompts):
        raise UserError(f"the InstructNet in {cfg.init} never trained on the video prompt kinds "
                        f"{sorted(set(cfg.prompts) - set(init.meta.prompts))}",
                        f"pass --prompt-kind among {init.meta.prompts or 'none'}, or leave --init out")
    return init


def _upgrade(old: dict) -> None:
    """Settings of runs begun before a setting existed: its default then."""
    for k, v in (("instructions", True), ("key_modulation", False), ("instruction_modulation", False),
                 ("expert_lr_scale", 1.0), ("key_change_share", 0.0), ("event_share", 0.0), ("timestep_mean", 0.0),
                 ("mean_loss", 0.0), ("init", None)):
        old.setdefault(k, v)


def train_instruct(clips: list[str | Path], model: str | Path, out: str | Path, cfg: InstructTrainConfig,
                   report: Callable[[int, int, float], None] = lambda s, n, loss: None,
                   warn: Callable[[str], None] = print, *, stage: Callable[[str], None] = lambda m: None) -> InstructModel:
    """Train (or resume) an InstructNet beside the frozen clip model in ``model`` on the clip datasets
    ``clips``; the run folder is ``out``, the InstructNet ``out/model``."""
    clips, out = [Path(c) for c in clips], Path(out)
    base = ClipModel.from_pretrained(model)
    sets, captions = open_datasets(clips)
    _check_datasets(sets, base, clips)
    controls = clip_controls(sets)
    names = controls[0]
    init = _init_net(cfg, base, names)  # before anything is written
    bounds = datasets_event_bounds(sets, base.codec.vae.temporal_compression) if cfg.event_share > 0 else None
    data_paths = [str(c.resolve()) for c in clips]
    settings = {**dataclasses.asdict(cfg), "data": data_paths, "model": str(Path(model).resolve()), "base": base_key(base)}
    run = RunFolder(out, settings, keep=cfg.keep_checkpoints, may_change=MAY_CHANGE + ("init_steps",), upgrade=_upgrade)
    # The steps --init had when the run began, as the run recorded them: a resumed run's weights are its
    # own checkpoint's, and its --init folder may since hold a longer-trained InstructNet (a bundled one
    # is replaced in place), whose steps would be counted twice. Runs begun before this was recorded
    # take the folder's.
    recorded = run.recorded("init_steps")
    init_steps = int(recorded) if recorded is not None else init.meta.train_steps if init else 0
    settings["init_steps"] = init_steps
    run.open()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base.net.to(device)
    data = instruct_data(sets, captions, controls, base, out / "cache", cfg.prompts, stage)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        net = InstructNet.from_base(base.net, names, cfg.layers, cfg.key_modulation, cfg.instruction_modulation)
    if init is not None:  # a resumed run then loads its own checkpoint over it
        missing, unexpected = net.load_state_dict(init.net.state_dict(), strict=False)
        # Only the instruction modulation an --init lacks may stay as built (zero: the init's behaviour).
        assert not unexpected and all(".instruction_affine." in k for k in missing), (missing, unexpected)
        del init
    net.to(device).train()
    groups: list = [{"params": list(net.parameters())}]
    if cfg.expert_lr_scale != 1:  # a second group only then: runs begun with one group still resume
        experts = {id(p) for p in net.expert_parameters()}
        groups = [{"params": [p for p in net.parameters() if id(p) not in experts]},
                  {"params": net.expert_parameters(), "lr": cfg.learning_rate * cfg.expert_lr_scale}]
    opt = torch.optim.Adam(groups, lr=cfg.learning_rate)
    done, losses, _ = run.resume_into(net, opt, warn)
    shape = tuple(data.latents.shape[1:])
    r = base.codec.vae.temporal_compression
    cond = base.conditions(cfg.batch_size)
    velocity = controlled(base.net, net)
    changing = key_changes(data.keys, r) if cfg.key_change_share > 0 else None  # only the share draws them

    def step_loss(step: int) -> torch.Tensor:
        draws = [draw_sample(cfg, init_steps + step, i, len(data.latents), shape, data.has_keys, changing, bounds)
                 for i in range(cfg.batch_size)]
        z, noise, t, mask, text, text_mask, controls = batch_inputs(draws, data, r, device)
        kwargs = {"encoder_hidden_states": text, "encoder_attention_mask": text_mask, **cond, **controls.as_kwargs()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            return flow_loss(lambda x, tt: velocity(x, tt, **kwargs), z, noise, t, mask, mean_weight=cfg.mean_loss)

    done = run_steps(run, net, opt, done, losses, cfg.steps, step_loss, report, grad_clip=cfg.grad_clip,
                     checkpoint_every=cfg.checkpoint_every, max_minutes=cfg.max_minutes)
    net.eval().requires_grad_(False)
    dataset = {"paths": data_paths, "clips": len(data.latents), "with_keys": int(data.has_keys.sum())}
    meta = InstructMeta(base_key(base), str(Path(model)), names, list(cfg.prompts), init_steps + done, dataset,
                        {"no_control": cfg.no_control, "recipe": cfg.recipe, "text_dropout": cfg.text_dropout,
                         "context_noise": cfg.context_noise, "instructions": cfg.instructions, "learning_rate": cfg.learning_rate,
                         "key_modulation": cfg.key_modulation, "instruction_modulation": cfg.instruction_modulation,
                         "expert_lr_scale": cfg.expert_lr_scale,
                         "key_change_share": cfg.key_change_share, "event_share": cfg.event_share,
                         "timestep_mean": cfg.timestep_mean, "mean_loss": cfg.mean_loss,
                         "batch_size": cfg.batch_size, "layers": net.config.num_layers})
    result = InstructModel(net, meta)
    params = sum(p.numel() for p in net.parameters())
    card = (f"# gamengen InstructNet\n\nGameGen-X's control branch (§3.4): {net.config.num_layers} layer pairs, "
            f"{params:,} parameters, trained {init_steps + done} steps beside the frozen clip model `{model}` (the two go "
            f"together: this InstructNet refuses any other). It reads the keys {', '.join(names)} per frame, "
            f"an instruction caption and {'video prompts (' + ', '.join(cfg.prompts) + ')' if cfg.prompts else 'no video prompts'}.\n"
            f"\nTrained on {len(data.latents)} clips of " + ", ".join(f"`{c}`" for c in clips) + ".\n")
    result.save_pretrained(out / "model", card)
    return result
