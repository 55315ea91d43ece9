"""`gamengen play --window`: the same game in a local pygame window, for people who prefer one.

It drives the same Player as the browser page (same game sessions, same keymap data, same
key-code names), so nothing about the game differs; only the front-end does. pygame is optional
(`pip install pygame`).
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import UserError


def browser_code(name: str) -> str:
    """pygame's key name -> the browser's KeyboardEvent.code, which keymaps are written in."""
    special = {"up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
               "space": "Space", ",": "Comma", ".": "Period", "left ctrl": "ControlLeft",
               "right ctrl": "ControlRight", "left alt": "AltLeft", "right alt": "AltRight",
               "left shift": "ShiftLeft", "right shift": "ShiftRight", "return": "Enter"}
    if name in special:
        return special[name]
    if len(name) == 1 and name.isalpha():
        return f"Key{name.upper()}"
    if len(name) == 1 and name.isdigit():
        return f"Digit{name}"
    return name


def run_window(player, fps: float = 35.0, scale: int = 4, max_frames: int | None = None, events=None) -> int:
    """Play until the window closes (or ``max_frames``); returns the frames shown.
    Keys: the game's keymap; F2 resets, F3 pauses. ``events`` (tests) are posted before each frame."""
    try:
        import pygame
    except ImportError:
        raise UserError("the window needs pygame", "pip install pygame, or use the browser player") from None
    game = player.make_game()
    frames = game.reset(0)
    pygame.init()
    h, w = next(iter(frames.values())).shape[:2]
    screen = pygame.display.set_mode((w * scale * len(frames), h * scale))
    clock, held, shown, paused, t_last = pygame.time.Clock(), set(), 0, False, time.perf_counter()
    try:
        while max_frames is None or shown < max_frames:
            for ev in (events(shown) if events else []):
                pygame.event.post(ev)
            for ev in pygame.event.get():
                if ev.type == pygame.QUIT:
                    return shown
                if ev.type in (pygame.KEYDOWN, pygame.KEYUP):
                    code = browser_code(pygame.key.name(ev.key))
                    if ev.type == pygame.KEYUP:
                        held.discard(code)
                    elif code == "F2":
                        frames = game.reset(0)
                    elif code == "F3":
                        paused = not paused
                    else:
                        held.add(code)
            if not paused:
                frames = game.step(player.resolver.action(sorted(held)))
            row = np.concatenate(list(frames.values()), axis=1)
            surface = pygame.surfarray.make_surface(row.swapaxes(0, 1))
            screen.blit(pygame.transform.scale(surface, screen.get_size()), (0, 0))
            pygame.display.flip()
            now = time.perf_counter()
            pygame.display.set_caption(f"gamengen: {player.title} · {1 / max(now - t_last, 1e-6):.1f} FPS")
            t_last = now
            shown += 1
            clock.tick(fps)
    finally:
        game.close()
        pygame.quit()
    return shown
