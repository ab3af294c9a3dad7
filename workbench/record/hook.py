"""Recording every cache a process builds, without editing SGLang: with ``URC_RECORD``
set, the first import of SGLang's unified_radix_cache module gets its
``UnifiedRadixCache.__init__`` wrapped so that each new cache is attached to the next
free file name (``trace.jsonl``, then ``trace.2.jsonl`` …, claimed atomically, so
several processes can share one name)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

TARGET = "sglang.srt.mem_cache.unified_radix_cache"
ENV = "URC_RECORD"


def next_free(base: Path) -> Path:
    """``base``, else ``stem.N.jsonl`` for the smallest free N (never an existing file)."""
    candidate, n = base, 1
    while True:
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return candidate
        except FileExistsError:
            n += 1
            candidate = base.with_name(f"{base.stem}.{n}{base.suffix}")


def patch(module) -> None:
    cls = module.UnifiedRadixCache
    if getattr(cls, "_urc_patched", False):
        return
    original = cls.__init__
    base = Path(os.environ[ENV]).resolve()

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            from . import attach

            path = next_free(base)
            attach(self, path, force=True)  # the empty file was claimed for this cache just now
        except Exception as exc:  # the recorded program runs on, unrecorded, and says so
            print(f"workbench.record: not recording this cache ({type(exc).__name__}: {exc})", file=sys.stderr)
            return
        print(f"workbench.record: recording this cache to {path}", file=sys.stderr)

    cls.__init__ = __init__
    cls._urc_patched = True


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Patch now if SGLang's module is loaded, else when it first is."""
    if TARGET in sys.modules:
        patch(sys.modules[TARGET])
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
