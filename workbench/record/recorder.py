"""The live recorder: wraps one SGLang ``UnifiedRadixCache``'s public calls.

Each call runs unchanged; when it returns, its line is written and flushed, so an
interrupted process leaves a trace that ends on a whole line (a torn last line is
dropped with a notice when loaded). Only the outermost recorded call is written:
a call made inside another (an eviction inside a match's copy-on-write) is part of
it: evictions made inside a call are written as their own steps right after it,
anything else is noted. A call that raised is a comment (evictions it made first are
still written). A request the trace can replay (``request_calls.py``) is written as
request ops: its admitting lock as ``req_prefill``, what it computed since as
``req_decode``, ``checkpoint``, and its whole ``release_kv_cache`` (``claim_kv_row``
up to ``on_release``) as one ``release``. Any other request's request-level calls
are noted by name, and the tree calls they make recorded as they happen.
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
from .mapping import Line, RecordedCall, TraceMapper, call_arg, state_expect
from ..model.ops.requests import CHECKPOINT, DECODE, PREFILL, RELEASE
from ..model.ops.request_view import view_of_first_arg
from ..model.ops.spec import sglang_components, stateful, windowed

NOTED = ("release_swa_prefix_lock",)  # no op of ours: noted, its tree calls recorded
CHECKPOINT_CALL, RELEASE_END = CHECKPOINT.records[0], RELEASE.records[0]  # SGLang's checkpoint and on_release
REQUEST_CALLS = (CHECKPOINT_CALL, RELEASE_END, "evict_sliding_windows")  # request ops when the request is tracked
WRAPPED = ("claim_kv_row", "evict_sliding_windows", *NOTED)  # watched beyond the ops' own ``records``
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
    if windowed(names):
        config["sliding_window"] = int(cache.sliding_window_size)
        config["swa_kv_size"] = int(allocator.size_swa)
    if stateful(names):
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
        self._nested: list[tuple] = []
        self._release = None  # the tracked request whose release_kv_cache is under way
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
        for name in dict.fromkeys((*self.calls, *WRAPPED)):
            if hasattr(cache, name):
                self._originals[name] = getattr(cache, name)
                setattr(cache, name, self._wrap(name, self._originals[name]))

    # ---- wrapping ------------------------------------------------------------------
    def _wrap(self, name: str, call):
        def recorded(*args, **kwargs):
            if self._stream.closed:
                return call(*args, **kwargs)
            if name == RELEASE_END and self._release is not None and self._depth == 1:
                return self._release_ends(call, args, kwargs)
            if self._depth > 0:  # part of the outer call (or of a release)
                return self._run(name, call, args, kwargs, None)
            if name == "claim_kv_row":
                return self._release_starts(call, args, kwargs)
            view = view_of_first_arg(args, kwargs) if name in REQUEST_CALLS else None
            live = self.mapper.requests.tracked(args[0] if args else kwargs.get("req")) if view else None
            if name in NOTED or (name in REQUEST_CALLS and live is None):
                if name != RELEASE_END:  # the end of an untracked release says nothing new
                    self._safely(self._comment, f"{name}({_describe_args(args, kwargs)}): its tree calls follow")
                return call(*args, **kwargs)
            if name == CHECKPOINT_CALL:  # what it decoded first, with the sizes before the checkpoint
                self._safely(self._finish, self._decoded(view))
            if name == "evict_sliding_windows":
                return self._run(name, call, args, kwargs, self._slide(view, args, kwargs))
            if name == "inc_lock_ref":
                pending = self.mapper.requests.admission(call_arg(args, kwargs, 0, "node_id"))
                if pending is not None:
                    return self._admit(call, args, kwargs, pending)
            return self._run(name, call, args, kwargs, self._mapping(name, args, kwargs))

        return recorded

    def _mapping(self, name: str, args: tuple, kwargs: dict):
        """The op's own ``record``, with what its ``record_before`` reads now."""
        before = self.calls[name].record_before
        already = before(args, kwargs) if before is not None else None
        return lambda result: self._map(name, args, kwargs, result, already)

    def _run(self, name: str, call, args: tuple, kwargs: dict, mapping):
        """Make the call; at the outermost level (``mapping`` set) write its line."""
        outer = mapping is not None
        self._depth += 1
        try:
            result = call(*args, **kwargs)
        except BaseException as exc:
            self._depth -= 1
            if outer or (self._release is not None and self._depth == 1):
                if not outer:  # a release that cannot finish: it is not written
                    self.mapper.requests.running.pop(self._release.rid, None)
                    self._depth, self._release = 0, None
                first = (str(exc).splitlines() or [""])[0][:200]
                self._safely(self._finish, f"{name} raised {type(exc).__name__}: {first}")
            raise
        self._depth -= 1
        if not outer:
            if name in self.calls:  # evictions are written after the outer call; the rest is noted
                self._nested.append((name, args, kwargs, result))
            return result
        try:
            line = mapping(result)
        except Exception as exc:  # never break the live cache over a line we cannot map
            line = f"{name}: not recorded ({type(exc).__name__}: {exc})"
        self._safely(self._finish, line)
        if name == "match_prefix":
            self._note_request_match(args, kwargs, result)
        return result

    # ---- request calls (workbench/record/request_calls.py) ------------------------------
    def _note_request_match(self, args: tuple, kwargs: dict, result) -> None:
        params = call_arg(args, kwargs, 0, "params")
        req = getattr(params, "req", None)
        if req is None:
            return
        try:
            self.mapper.requests.matched(req, result.last_device_node, RecordedCall.tokens(params.key),
                                         params.key.extra_key, int(result.device_prefix_len),
                                         int(getattr(result, "host_hit_length", 0) or 0))
        except Exception as exc:  # the request stays tree calls
            self._safely(self._comment, f"match_prefix of req {getattr(req, 'rid', '?')}: not tracked ({exc})")

    def _admit(self, call, args: tuple, kwargs: dict, pending):
        """The lock that admits a matched request: ``req_prefill``, or the lock (and why not)."""
        skipped = call_arg(args, kwargs, 1, "skip_lock_components")
        why = "its lock skips components" if skipped else self.mapper.requests.admit(pending)
        if why is None:
            return self._run("inc_lock_ref", call, args, kwargs, lambda result: PREFILL.record(
                self.mapper, RecordedCall("inc_lock_ref", args, kwargs, result, pending, self.cache.is_root)))
        rid = getattr(pending.req, "rid", "?")
        mapping = self._mapping("inc_lock_ref", args, kwargs)
        return self._run("inc_lock_ref", call, args, kwargs, lambda result: [
            mapping(result), f"req {rid} is admitted as tree calls, not req_prefill: {why}"])

    def _slide(self, view, args: tuple, kwargs: dict):
        """``evict_sliding_windows`` of a tracked request: its decode, sliding."""
        pre_len = call_arg(args, kwargs, 1, "pre_len")

        def mapping(result):
            step = self._decoded(view)
            if step is None:
                return f"evict_sliding_windows(req {view.rid}) with no new token: a slide alone is not an op"
            if pre_len is not None and int(pre_len) == view.committed - 1:
                step["slide_window"] = True
                return step
            return [step, f"evict_sliding_windows(req {view.rid}, {pre_len}): not at its last token, not replayed"]

        return mapping

    def _decoded(self, view):
        """``req_decode`` of what a tracked request computed since its last step (or None)."""
        return DECODE.record(self.mapper, RecordedCall(DECODE.name, (), {}, None, view))

    def _release_starts(self, call, args: tuple, kwargs: dict):
        """``release_kv_cache`` begins: a tracked request's release gathers every cache
        call up to its ``on_release`` (its checkpoint, unlock, frees) into one step."""
        view = view_of_first_arg(args, kwargs)
        tracker = self.mapper.requests
        if view is None or tracker.tracked(args[0] if args else kwargs.get("req")) is None:
            self._safely(self._comment, f"release_kv_cache({_describe_args(args, kwargs)}): its tree calls follow")
            return call(*args, **kwargs)
        self._safely(self._finish, self._decoded(view))
        kept = call(*args, **kwargs)
        if kept:
            tracker.running.pop(view.rid, None)
            self._safely(self._comment, f"release_kv_cache(req {view.rid}): a session kept its row, not replayed")
        else:
            self._release, self._depth = view, self._depth + 1
        return kept

    def _release_ends(self, call, args: tuple, kwargs: dict):
        view, self._release = self._release, None
        try:
            result = call(*args, **kwargs)
        finally:
            self._depth -= 1
        try:
            line = RELEASE.record(self.mapper, RecordedCall(RELEASE_END, args, kwargs, result, view, self.cache.is_root))
        except Exception as exc:
            line = f"{RELEASE_END}: not recorded ({type(exc).__name__}: {exc})"
        self._safely(self._finish, line)
        return result

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
    def _finish(self, line) -> None:
        """The outer call's line (none, one, or a list), then the evictions made inside
        it as their own steps (they changed the tree after the outer call's own changes:
        a match's walk comes before its copy-on-write eviction); the other nested calls
        are noted in one comment."""
        nested, self._nested = self._nested, []
        for one in line if isinstance(line, list) else [line]:
            if one is not None:
                self._emit(one)
        inside = []
        for name, args, kwargs, result in nested:
            if self.calls[name].records_nested:
                step = self._map(name, args, kwargs, result)
                step["description"] = (step.get("description", "") + " (made inside the call above)").strip()
                self._emit(step)
            else:
                inside.append(name)
        if inside:
            self._comment(f"{', '.join(inside)} called inside the call above: part of it, not replayed apart")

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
        listed = self.config["components"]
        # SGLang's cache reads each component's sizes as <component>_evictable_size() and _protected_size()
        return {name: (int(getattr(c, f"{name}_evictable_size")()), int(getattr(c, f"{name}_protected_size")()))
                for name in sglang_components() if name in listed}

    # ---- SGLang's objects to steps: each op's ``record`` ------------------------------------
    def _map(self, name: str, args: tuple, kwargs: dict, result, already=None) -> Line:
        call = RecordedCall(name, args, kwargs, result, already, self.cache.is_root)
        return self.calls[name].record(self.mapper, call)


def _describe_args(args: tuple, kwargs: dict) -> str:
    parts = [f"req {getattr(a, 'rid', '?')}" if hasattr(a, "rid") else type(a).__name__ for a in args]
    parts += [f"{k}={v}" for k, v in kwargs.items() if isinstance(v, (int, bool, str))]
    return ", ".join(parts)
