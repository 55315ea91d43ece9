"""The one thread a server process runs its models on.

PyTorch's CPU kernels parallelise with OpenMP. libgomp keeps a team of worker threads for each
thread that enters a parallel region, and lets the workers spin for a while after a region so that
the next one starts at once. Once a second thread has a team of its own (a server's compute thread,
after the command loaded its model on the main thread), libgomp manages more threads than there are
cores and cuts that spin short: every parallel region then waits for its workers to wake, and a
network of many small kernels runs at little more than one core's speed. Through clip play's server a
chunk took 1.64 s instead of 1.04 s on 2 cores that way (docs/performance.md, "One compute thread").

So a server's command loads its models here (``on_compute``) and every session of every server in
the process steps here (``compute_thread``): one OpenMP team per process.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


def compute_thread() -> ThreadPoolExecutor:
    """The process's compute thread, one worker, made on first use and kept for the process's life
    (servers come and go in one process, in tests and benches; the thread and its team stay)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gamengen-compute")
        return _executor


def on_compute(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) run on the compute thread and waited for; its exceptions are raised here."""
    return compute_thread().submit(fn, *args, **kwargs).result()
