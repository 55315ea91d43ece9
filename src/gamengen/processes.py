"""Process helpers shared by the recorders and the agent's games."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """Linux: a worker is killed with its parent, so a SIGKILLed recorder leaves no writer behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - non-Linux: the shard lock still guards against two writers
        pass
