"""ViZDoom adapter: Freedoom maps (shipped in the vizdoom wheel) and ViZDoom's built-in scenarios.

Ids: ``vizdoom:freedoom1/E1M1`` (default), ``vizdoom:freedoom2/MAP01``, ``vizdoom:scenario/basic``.
"""

from __future__ import annotations

import os
import re
import struct

from ..errors import UserError
from .base import NO_EVENT, ActionSet, EnvConfig, GameEvent, Step, event_schedule

# A compact DOOM action set of named button combinations, close to a human's keyboard play.
DOOM_BUTTONS = ("MOVE_FORWARD", "MOVE_BACKWARD", "TURN_LEFT", "TURN_RIGHT", "MOVE_LEFT", "MOVE_RIGHT", "ATTACK", "USE")
DOOM_ACTIONS = {
    "NOOP": (),
    "FORWARD": ("MOVE_FORWARD",),
    "BACKWARD": ("MOVE_BACKWARD",),
    "TURN_LEFT": ("TURN_LEFT",),
    "TURN_RIGHT": ("TURN_RIGHT",),
    "STRAFE_LEFT": ("MOVE_LEFT",),
    "STRAFE_RIGHT": ("MOVE_RIGHT",),
    "ATTACK": ("ATTACK",),
    "USE": ("USE",),
    "FORWARD+TURN_LEFT": ("MOVE_FORWARD", "TURN_LEFT"),
    "FORWARD+TURN_RIGHT": ("MOVE_FORWARD", "TURN_RIGHT"),
    "FORWARD+ATTACK": ("MOVE_FORWARD", "ATTACK"),
}
# What the shaped reward of paper App. A.3 (issue 3) and the evaluation's difficulty split need.
DOOM_VARIABLES = (
    "HEALTH", "ARMOR", "SELECTED_WEAPON", "SELECTED_WEAPON_AMMO", "AMMO2", "AMMO3", "AMMO5", "AMMO6",
    "KILLCOUNT", "ITEMCOUNT", "SECRETCOUNT", "HITCOUNT", "HITS_TAKEN", "DAMAGECOUNT", "DAMAGE_TAKEN",
    "DEAD", "POSITION_X", "POSITION_Y", "POSITION_Z", "ANGLE",
)
RESOLUTIONS = {  # ViZDoom renders only at fixed sizes; (height, width) -> its name
    (120, 160): "RES_160X120", (240, 320): "RES_320X240", (480, 640): "RES_640X480",
    (200, 320): "RES_320X200", (256, 320): "RES_320X256", (600, 800): "RES_800X600",
}
EPISODE_TIMEOUT_TICS = 35 * 60 * 10  # 10 minutes of game time; the recorder cuts episodes far earlier


def _ev(name: str, commands: str, kind: str, text: str, effect: str, lasts_s: float | None = None) -> GameEvent:
    return GameEvent(name, tuple(c.strip() for c in commands.split(";")), kind, text, effect, lasts_s)


# The in-game events `--events` fires (GameGen-X §3.2: the local recordings change in-game events
# every 5-10 s). Each is a ZDoom console command sent with DoomGame.send_game_command; each was
# checked headless on Freedoom E1M1 (tests/test_captions.py repeats the check): its `effect`
# shows in the data on the next frames. Summons appear 36-78 map units in front of the player
# (both radii plus 8: measured from the labels' positions).
# Lighting: ZDoom has no console command for sector light, so "light" events are what the engine
# allows from the console: powerups that recolour the view, and r_visibility (the renderer's light
# fall-off with distance), which outlives new_episode and is therefore reset at every reset().
# The order is the store format (events arrays index it): append only.
DOOM_EVENTS = (
    _ev("summon_zombieman", "summon Zombieman", "monster", "a zombieman is summoned in front of the player",
        "label:Zombieman"),
    _ev("summon_shotgun_guy", "summon ShotgunGuy", "monster", "a shotgun guy is summoned in front of the player",
        "label:ShotgunGuy"),
    _ev("summon_imp", "summon DoomImp", "monster", "an imp is summoned in front of the player", "label:DoomImp"),
    _ev("summon_demon", "summon Demon", "monster", "a demon is summoned in front of the player", "label:Demon"),
    _ev("summon_lost_soul", "summon LostSoul", "monster", "a lost soul is summoned in front of the player",
        "label:LostSoul"),
    _ev("summon_cacodemon", "summon Cacodemon", "monster", "a cacodemon is summoned in front of the player",
        "label:Cacodemon"),
    _ev("summon_barrel", "summon ExplosiveBarrel", "object", "an explosive barrel appears in front of the player",
        "label:ExplosiveBarrel"),
    _ev("give_armor", "give BlueArmor", "item", "the player is given blue armor", "var:ARMOR>"),
    _ev("give_soulsphere", "give Soulsphere", "item", "the player is given a soulsphere (+100 health)", "var:HEALTH>"),
    _ev("give_backpack", "give Backpack", "item", "the player is given a backpack of ammunition", "var:AMMO2>"),
    _ev("weapon_fist", "use Fist", "weapon", "the player switches to the fist", "var:SELECTED_WEAPON=1"),
    _ev("weapon_shotgun", "give Shotgun; use Shotgun", "weapon", "the player is given and switches to a shotgun",
        "var:SELECTED_WEAPON=3"),
    _ev("weapon_chaingun", "give Chaingun; use Chaingun", "weapon", "the player is given and switches to a chaingun",
        "var:SELECTED_WEAPON=4"),
    _ev("weapon_rocket_launcher", "give RocketLauncher; use RocketLauncher", "weapon",
        "the player is given and switches to a rocket launcher", "var:SELECTED_WEAPON=5"),
    _ev("weapon_plasma_rifle", "give PlasmaRifle; use PlasmaRifle", "weapon",
        "the player is given and switches to a plasma rifle", "var:SELECTED_WEAPON=6"),
    _ev("light_amp", "give Infrared", "light", "light-amplification goggles light the whole scene", "light>", 120.0),
    _ev("invulnerability", "give InvulnerabilitySphere", "light",
        "an invulnerability sphere turns the view to inverted grey", "tint:grey", 30.0),
    _ev("radiation_suit", "give Radsuit", "light", "a radiation suit tints the view green", "tint:green", 60.0),
    _ev("berserk", "give Berserk", "light", "a berserk pack tints the view red and raises the fists", "tint:red", 20.0),
    _ev("lights_dim", "r_visibility 2", "light", "the lighting dims: distant areas fall into darkness", "light<"),
    _ev("lights_bright", "r_visibility 32", "light", "the lighting brightens: distant areas are lit", "light>"),
)


def event_vocabulary(kinds: tuple[str, ...] = ()) -> tuple[GameEvent, ...]:
    """The events a recording fires: DOOM_EVENTS, or those of them named in ``kinds``, in DOOM_EVENTS'
    order (a store keeps its own vocabulary, so its events arrays index this)."""
    names = [e.name for e in DOOM_EVENTS]
    unknown = [k for k in kinds if k not in names]
    if unknown:
        raise UserError(f"unknown event kind {unknown[0]!r}", "use some of: " + ", ".join(names))
    return tuple(e for e in DOOM_EVENTS if not kinds or e.name in kinds)


DEFAULT_VISIBILITY = "r_visibility 8"  # ZDoom's default light fall-off, restored at every reset()
# What EnvConfig.event_clear_s sends: the light and tint events' powerups taken (checked headless: each
# take returns the view to its untinted colour in the next frames), the light fall-off restored.
CLEAR_COMMANDS = ("take PowerLightAmp", "take PowerInvulnerable", "take PowerIronFeet", "take PowerStrength",
                  DEFAULT_VISIBILITY)
PLAYER_LABEL = "DoomPlayer"  # the player's own body shows up in the labels now and then


def map_title(wad_path: str, map_name: str) -> str | None:
    """The level's name as the IWAD's DEHACKED lump spells it ("Outer Prison" for Freedoom E1M1),
    or None when the WAD has none. Reads the WAD directory only; the game need not run."""
    key = f"HUSTR_{map_name}" if re.fullmatch(r"E\dM\d", map_name) else (
        f"HUSTR_{int(map_name[3:])}" if re.fullmatch(r"MAP\d\d", map_name) else None)
    if key is None:
        return None
    try:
        with open(wad_path, "rb") as f:
            _, n, offset = struct.unpack("<4sii", f.read(12))
            f.seek(offset)
            directory = f.read(16 * n)
            for i in range(n):
                pos, size, name = struct.unpack_from("<ii8s", directory, 16 * i)
                if name.rstrip(b"\0") == b"DEHACKED":
                    f.seek(pos)
                    text = f.read(size).decode("latin-1")
                    m = re.search(rf"^\s*{key}\s*=\s*(?:{map_name}\s*:\s*)?(.+?)\s*$", text, re.MULTILINE)
                    return m.group(1) if m else None
    except (OSError, struct.error):
        return None
    return None


class VizdoomEnv:
    def __init__(self, target: str, config: EnvConfig):
        import vizdoom as vzd

        self._vzd = vzd
        self.env_id = f"vizdoom:{target}"
        self.config = config
        events: tuple[GameEvent, ...] = (NO_EVENT, *event_vocabulary(config.event_kinds)) if config.events else ()
        game = vzd.DoomGame()
        kind, _, name = target.partition("/")
        pkg = os.path.dirname(vzd.__file__)
        self.title: str | None = None
        if kind in ("freedoom1", "freedoom2") and name:
            game.set_doom_game_path(os.path.join(pkg, f"{kind}.wad"))
            game.set_doom_map(name.upper())
            self.title = map_title(os.path.join(pkg, f"{kind}.wad"), name.upper())
            game.set_episode_timeout(EPISODE_TIMEOUT_TICS)
            game.set_episode_start_time(1)
            game.set_render_hud(True)  # the status bar (health, ammo) is part of the picture, as in the paper
            buttons = DOOM_BUTTONS
            actions = DOOM_ACTIONS
            variables = DOOM_VARIABLES
        elif kind == "scenario" and name:
            cfg = os.path.join(vzd.scenarios_path, f"{name}.cfg")
            if not os.path.exists(cfg):
                names = sorted(f[:-4] for f in os.listdir(vzd.scenarios_path) if f.endswith(".cfg"))
                raise UserError(f"unknown ViZDoom scenario '{name}'", "use one of: " + ", ".join(names))
            game.load_config(cfg)
            buttons = tuple(b.name for b in game.get_available_buttons())
            if any(b.endswith("_DELTA") for b in buttons):
                raise UserError(f"scenario '{name}' uses analog (delta) buttons", "pick a scenario with binary buttons")
            # NOOP plus one action per button of the scenario
            actions = {"NOOP": (), **{b: (b,) for b in buttons}}
            # the scenario's own variables, then every one a Freedoom map reports: ViZDoom keeps them on
            # any map, so the agent's shaped reward (paper App. A.3) works on scenarios too
            variables = tuple(v.name for v in game.get_available_game_variables())
            variables += tuple(v for v in DOOM_VARIABLES if v not in variables)
        else:
            raise UserError(
                f"unknown ViZDoom target '{target}'",
                "use vizdoom:freedoom1/E1M1, vizdoom:freedoom2/MAP01 or vizdoom:scenario/<name>",
            )
        res = RESOLUTIONS.get((config.height, config.width))
        if res is None:
            raise UserError(
                f"ViZDoom cannot render {config.width}x{config.height}",
                "use one of " + ", ".join(f"{w}x{h}" for h, w in RESOLUTIONS),
            )
        game.set_screen_resolution(getattr(vzd.ScreenResolution, res))
        game.set_screen_format(vzd.ScreenFormat.RGB24)
        game.set_window_visible(False)
        game.set_sound_enabled(False)
        game.set_audio_buffer_enabled(False)
        game.set_mode(vzd.Mode.PLAYER)
        game.set_automap_buffer_enabled(config.automap)
        game.set_labels_buffer_enabled(config.labels)
        if config.events:
            # summon/give are cheats, which ZDoom refuses on skills that disable them (the
            # deadly_corridor scenario plays on Nightmare) unless sv_cheats is on
            game.add_game_args("+sv_cheats 1")
        if config.automap:
            game.set_automap_mode(vzd.AutomapMode.OBJECTS)
            game.set_automap_rotate(False)
        game.set_available_buttons([getattr(vzd.Button, b) for b in buttons])
        game.set_available_game_variables([getattr(vzd.GameVariable, v) for v in variables])
        game.init()
        self._game = game
        self.action_set = ActionSet(
            tuple(actions), tuple(buttons), tuple(tuple(int(b in combo) for b in buttons) for combo in actions.values())
        )
        self._combos = [list(c) for c in self.action_set.combos]
        self.variable_names = variables
        self.image_names = ("automap",) if config.automap else ()
        self.fps = 35.0 / config.frame_skip  # DOOM runs at 35 tics per second
        self.game_version = f"vizdoom {vzd.__version__}"
        self.has_labels = config.labels
        self.events = events
        self._schedule = None
        self._next_event = (-1, 0)
        self._clear_at = -1  # the step at which lasting effects end before the next event (event_clear_s)
        self._t = 0

    def _observe(self, reward=0.0) -> Step:
        game = self._game
        if game.is_episode_finished():
            # ViZDoom gives no picture after the final action
            dead = game.is_player_dead()
            timeout = game.is_episode_timeout_reached()
            # DEAD tells a death from a map exit, which the shaped reward (App. A.3) needs
            return Step(None, reward, terminated=dead or not timeout, truncated=timeout and not dead,
                        variables={"DEAD": float(dead)})
        state = game.get_state()
        variables = dict(zip(self.variable_names, map(float, state.game_variables)))
        images = {"automap": state.automap_buffer} if self.config.automap else {}
        labels = {}
        if self.config.labels:
            for label in state.labels:
                if label.object_name != PLAYER_LABEL:
                    labels[label.object_name] = labels.get(label.object_name, 0) + 1
        return Step(state.screen_buffer, reward, False, False, variables, images, labels)

    def reset(self, seed: int) -> Step:
        # ViZDoom is deterministic given the seed and the actions, so an episode replays exactly;
        # with events on, the schedule is drawn from the same seed, so it replays too.
        if self.events:
            # r_visibility is a renderer setting that survives new_episode; sent now, it applies
            # from the episode's first frame (checked), so no episode inherits its predecessor's
            self._game.send_game_command(DEFAULT_VISIBILITY)
            self._schedule = event_schedule(seed, self.fps, self.config.event_period_s, len(self.events) - 1)
            self._next_event = next(self._schedule)
            self._clear_at = self._clearing(0)
        self._t = 0
        self._game.set_seed(int(seed) % (2**31))
        self._game.new_episode()
        return self._observe()

    def _clearing(self, last_event: int) -> int:
        """The step before the next event at which event_clear_s ends lasting effects (-1: never);
        after the last event's step, so an event always shows for a while."""
        if self.config.event_clear_s is None:
            return -1
        return max(last_event + 1, self._next_event[0] - round(self.config.event_clear_s * self.fps))

    def step(self, action: int) -> Step:
        event = 0
        if self._t == self._clear_at:
            for command in CLEAR_COMMANDS:
                self._game.send_game_command(command)
        if self._t == self._next_event[0]:
            event = self._next_event[1]
            self.fire_event(event)
            self._next_event = next(self._schedule)
            self._clear_at = self._clearing(self._t)
        reward = self._game.make_action(self._combos[action], self.config.frame_skip)
        self._t += 1
        step = self._observe(reward)
        step.event = event
        return step

    def fire_event(self, k: int) -> None:
        """Send event k's console commands; ZDoom runs them in the next tic, so the next frame can
        show the effect. The schedule calls this; tests call it to check each event's effect."""
        for command in self.events[k].commands:
            self._game.send_game_command(command)

    def close(self) -> None:
        self._game.close()
