"""Record a live SGLang cache as a trace the workbench opens and replays.

    from workbench.record import attach, detach
    recorder = attach(cache, "trace.jsonl")   # cache: SGLang's UnifiedRadixCache
    ...                                       # use the cache as usual
    detach(cache)

or, without editing the program, for every cache a process (and its children)
builds: ``python -m workbench.record -o trace.jsonl -- python -m sglang.launch_server …``
(the launcher sets ``URC_RECORD``; a Python that starts with it set records too).
``urc run trace.jsonl`` replays it on our cache and checks the recorded results;
``urc run --against sglang trace.jsonl`` compares the two caches step by step.
"""

from __future__ import annotations

from pathlib import Path

from .recorder import Recorder

__all__ = ["Recorder", "attach", "detach"]


def attach(cache, path: str | Path, force: bool = False, state_every: int = 1) -> Recorder:
    """Start recording ``cache``'s public calls to ``path`` (a new file unless
    ``force``); ``state_every``: add the tree's sizes to every n-th written step
    (when that step can change them)."""
    if getattr(cache, "_urc_recorder", None) is not None:
        raise RuntimeError(f"this cache is already being recorded to {cache._urc_recorder.path}")
    recorder = Recorder(cache, path, force, state_every)
    cache._urc_recorder = recorder
    return recorder


def detach(cache) -> None:
    """Stop recording ``cache``: its methods are its own again, the file is closed."""
    recorder = getattr(cache, "_urc_recorder", None)
    if recorder is not None:
        recorder.detach()
        cache._urc_recorder = None
