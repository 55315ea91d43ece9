"""docs/dataset.md's time indexing on the toy game: frames[t+1] is the result of actions[t], and windows follow it."""

import numpy as np

from gamengen.data.store import Store
from gamengen.data.windows import FrameWindows
from gamengen.envs import EnvConfig, make_env
from gamengen.envs.toy import MOVES


def test_next_frame_is_the_result_of_the_action(toy_store):
    store = Store.open(toy_store)
    toy = make_env("toy:cursor", EnvConfig(store.spec.height, store.spec.width))
    names, grid = store.spec.action_set.names, toy.grid
    checked = 0
    for rec in store.episodes():
        g = store.open_episode(rec)
        frames, actions, variables = g["frames"][:], g["actions"][:], g["game_variables"][:]
        cells = [toy.cell_of(f) for f in frames]
        # game variables belong to the frame of the same step
        assert [tuple(map(int, v)) for v in variables] == cells
        for t in range(rec.length - 1):
            dx, dy = MOVES[names[actions[t]]]
            assert cells[t + 1] == ((cells[t][0] + dx) % grid, (cells[t][1] + dy) % grid), (rec.path, t)
            checked += 1
        # the episode's flags describe its last action: reaching the goal terminates
        assert bool(g["terminated"][-1]) == (rec.meta["return"] > 0)
    assert checked > 1000


def test_windows_follow_the_time_indexing(toy_store):
    store = Store.open(toy_store)
    N = 8
    windows = FrameWindows(store, context=N)
    no_action = len(store.spec.action_set)  # the "no action" token of padded steps
    assert len(windows) == sum(r.length - 1 for r in store.episodes())
    rng = np.random.default_rng(0)
    for i in list(rng.integers(len(windows), size=40)) + [0]:
        w = windows[int(i)]
        g = store.open_episode(windows.records[windows.locate(int(i))[0]])
        n = w.n
        frames, actions = g["frames"][:], g["actions"][:]
        assert np.array_equal(w.target, frames[n])
        k = min(N, n)  # real context steps
        assert w.context_mask.tolist() == [False] * (N - k) + [True] * k
        assert np.array_equal(w.context[N - k :], frames[n - k : n])
        assert np.array_equal(w.actions[N - k :], actions[n - k : n])
        assert (w.context[: N - k] == frames[0]).all() and (w.actions[: N - k] == no_action).all()
    full = FrameWindows(store, context=N, min_context=N)
    assert all(full[j].context_mask.all() for j in range(0, len(full), 97))
