"""The live recorder: wraps one SGLang ``UnifiedRadixCache``'s public calls.

Each call runs unchanged; when it returns, its line is written and flushed, so an
interrupted process leaves a trace that ends on a whole line (a torn last line is
dropped with a notice when loaded). Only the outermost recorded call is written:
a call made inside another (an eviction inside a match's copy-on-write) is part of
it: evictions made inside a call are written as their own steps right after it,
anything else is noted. A call that raised is a comment (evictions it made first are
still written). Request-level calls (``checkpoint``,
``evict_sliding_windows``, ``release_swa_prefix_lock``) are noted by name; the tree
calls they make are recorded as they happen.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from ..bridge.sglang_env import installed_version
from ..model import ops
from .mapping import Line, RecordedCall, TraceMapper, state_expect

NOTED = ("checkpoint", "evict_sliding_windows", "release_swa_prefix_lock")
# state_every counts written steps of every op; the sizes go on those that are not read-only


def recorded_calls() -> dict[str, ops.OpSpec]:
    """SGLang cache method -> the op that records it, from the ops' declarations."""
    return {call: spec for spec in ops.all_ops() for call in spec.records}


def cache_config(cache) -> dict:
    """Our [config] for the cache, read from the cache and its pools."""
    names = [_component_name(c) for c in cache._components_tuple]
    allocator = cache.token_to_kv_pool_allocator
    config: dict[str, Any] = {"components": names, "page_size": int(cache.page_size),
                              "kv_size": int(getattr(allocator, "size_full", None) or allocator.size)}
    if "swa" in names:
        config["sliding_window"] = int(cache.sliding_window_size)
        config["swa_kv_size"] = int(allocator.size_swa)
    if "mamba" in names:
        config["mamba_size"] = int(cache.req_to_token_pool.mamba_pool.size)
    return config


def _component_name(component) -> str:
    kind = getattr(component, "component_type", None)
    if kind is not None:
        return kind.name.lower()
    return type(component).__name__.removesuffix("Component").lower()


class Recorder:
    def __init__(self, cache, path: str | Path, force: bool = False, state_every: int = 1) -> None:
        if type(state_every) is not int or state_every < 1:
            raise ValueError(f"state_every must be a positive int (got {state_every!r})")
        self.cache = cache
        self.path = Path(path)
        self.config = cache_config(cache)
        self.mapper = TraceMapper(self.config["components"], self.config["page_size"])
        self.calls = recorded_calls()
        self.state_every = state_every
        self.written = 0  # steps written
        self._depth = 0
        self._nested: list[str] = []
        self._originals: dict[str, Any] = {}
        # never through a link, never into a pipe or device (non-blocking: a FIFO fails at once)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_TRUNC if force else os.O_EXCL)
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileExistsError:
            raise FileExistsError(f"{self.path} exists: pick another name, or force=True to overwrite it") from None
        except OSError as exc:
            raise ValueError(f"{self.path}: cannot record there ({exc.strerror or exc}): name a regular file") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"{self.path}: not a regular file; a recording goes only to a regular file")
        os.set_blocking(fd, True)
        self._stream = os.fdopen(fd, "w", encoding="utf-8")
        version = installed_version() or "?"
        header = {"schema": 1, "scenario": {"name": self.path.stem, "source": f"workbench.record of SGLang {version}"},
                  "config": {**self.config, "auto_evict": True}}
        self._write(header)
        held = self._sizes()
        if any(evictable or protected for evictable, protected in held.values()):
            note = (f"attached to a cache already holding data ({held}): the trace replays from an empty cache, "
                    "so its first results may differ")
            self._comment(note)
            print(f"workbench.record: {note}", file=sys.stderr)
        for name in (*self.calls, *NOTED):
            if hasattr(cache, name):
                self._originals[name] = getattr(cache, name)
                setattr(cache, name, self._wrap(name, self._originals[name]))

    # ---- wrapping ------------------------------------------------------------------
    def _wrap(self, name: str, call):
        noted = name in NOTED

        def recorded(*args, **kwargs):
            if noted:
                self._safely(self._comment, f"{name}({_describe_args(args, kwargs)}): its tree calls follow")
                return call(*args, **kwargs)
            # read before the call what the call changes (a lock's window flag)
            before = self.calls[name].record_before
            already = before(args, kwargs) if before is not None else None
            self._depth += 1
            try:
                result = call(*args, **kwargs)
            except BaseException as exc:
                self._depth -= 1
                if self._depth == 0:
                    first = (str(exc).splitlines() or [""])[0][:200]
                    self._safely(self._finish, f"{name} raised {type(exc).__name__}: {first}")
                raise
            self._depth -= 1
            if self._depth > 0:  # part of the outer call; evictions are written after it
                self._nested.append((name, args, kwargs, result))
                return result
            try:
                line = self._map(name, args, kwargs, result, already)
            except Exception as exc:  # never break the live cache over a line we cannot map
                line = f"{name}: not recorded ({type(exc).__name__}: {exc})"
            self._safely(self._finish, line)
            return result

        return recorded

    def detach(self) -> None:
        for name, call in self._originals.items():
            setattr(self.cache, name, call)
        self._originals.clear()
        if not self._stream.closed:
            self._stream.close()

    def _safely(self, write, *args) -> None:
        """A failed write (disk full, the file closed under a kept method reference)
        stops the recording with one line on stderr; the cache call it follows has
        already happened and its result goes back to the caller."""
        if self._stream.closed:
            return
        try:
            write(*args)
        except (OSError, ValueError) as exc:
            print(f"workbench.record: stopped recording to {self.path}: {exc}", file=sys.stderr)
            self.detach()

    # ---- lines ---------------------------------------------------------------------
    def _finish(self, line: Line) -> None:
        """The outer call's line, then the evictions made inside it as their own steps
        (they changed the tree after the outer call's own changes: a match's walk comes
        before its copy-on-write eviction); other nested calls are noted."""
        nested, self._nested = self._nested, []
        self._emit(line)
        for name, args, kwargs, result in nested:
            if self.calls[name].records_nested:
                step = self._map(name, args, kwargs, result)
                step["description"] = (step.get("description", "") + " (made inside the call above)").strip()
                self._emit(step)
            else:
                self._comment(f"{name} was called inside the call above: part of it, not replayed apart")

    def _emit(self, line: Line) -> None:
        if isinstance(line, str):
            self._comment(line)
            return
        self.written += 1
        spec = ops.get(line["op"])
        if spec is not None and not spec.read_only and self.written % self.state_every == 0:
            line.setdefault("expect", {}).update(state_expect(self._sizes()))
        self._write(line)

    def _comment(self, text: str) -> None:
        self._stream.write("# " + " ".join(text.split()) + "\n")
        self._stream.flush()

    def _write(self, record: dict) -> None:
        self._stream.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._stream.flush()

    def _sizes(self) -> dict[str, tuple[int, int]]:
        c = self.cache
        sizes = {"full": (c.full_evictable_size(), c.full_protected_size())}
        if "swa" in self.config["components"]:
            sizes["swa"] = (c.swa_evictable_size(), c.swa_protected_size())
        if "mamba" in self.config["components"]:
            sizes["mamba"] = (c.mamba_evictable_size(), c.mamba_protected_size())
        return {k: (int(a), int(b)) for k, (a, b) in sizes.items()}

    # ---- SGLang's objects to steps: each op's ``record`` ------------------------------------
    def _map(self, name: str, args: tuple, kwargs: dict, result, already=None) -> Line:
        call = RecordedCall(name, args, kwargs, result, already, self.cache.is_root)
        return self.calls[name].record(self.mapper, call)


def _describe_args(args: tuple, kwargs: dict) -> str:
    parts = [f"req {getattr(a, 'rid', '?')}" if hasattr(a, "rid") else type(a).__name__ for a in args]
    parts += [f"{k}={v}" for k, v in kwargs.items() if isinstance(v, (int, bool, str))]
    return ", ".join(parts)
