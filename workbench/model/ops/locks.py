"""Lock ops: ``lock`` a matched node, ``unlock`` it with the lock's receipt, and
``release_window`` (SGLang's ``release_swa``: give up a lock's SWA part early)."""

from __future__ import annotations

from typing import Any, Hashable

from .spec import NAME, Field, FuzzRule, OpSpec, declare, windowed


# ---- lock ---------------------------------------------------------------------------------------
def run_lock(driver, f: dict) -> None:
    node = driver.match_named(f["match"])
    receipt = driver.cache.inc_lock_ref(node)
    driver.hold_lock(f["as"], node, receipt)


def sglang_lock(side, f: dict) -> None:
    node = side.matches.get(f["match"])
    if node is None:
        raise side.refused(f"unknown match name {f['match']!r}")
    receipt = side.cache.inc_lock_ref(node)
    side.locks[f["as"]] = side.sg.TreeLock(node, receipt.to_dec_params())


def fuzz_lock(gen) -> dict:
    name = f"L{gen.count}"
    gen.held.append(name)
    return {"op": LOCK.name, "match": gen.rng.choice(gen.matches), "as": name}


def record_lock(mapper, node: Any, receipt: Hashable, skipped: tuple[str, ...] = (), is_root: bool = False):
    if is_root:
        return "inc_lock_ref on the root: nothing to lock"
    if skipped:
        return f"inc_lock_ref(node {node}) skipping {', '.join(skipped)}: a lock op takes every component"
    target = mapper.node_name(node)
    if target is None:
        return f"inc_lock_ref(node {node}): no recorded match or insert ended on that node"
    name = mapper.new_name("L")
    mapper.open_lock(name, node, receipt)
    return {"op": LOCK.name, "match": target, "as": name}


def _recorded_lock(mapper, call):
    node = call.arg(0, "node_id")
    skipped = tuple(k.name.lower() for k in call.arg(1, "skip_lock_components", ()))
    return record_lock(mapper, node, call.hashable(call.result.to_dec_params()), skipped, call.is_root(node))


LOCK = declare(OpSpec(
    "lock", "take a lock on a matched node (inc_lock_ref), for every component",
    run_lock,
    fields=(Field("match", NAME, required=True, uses="matches", positional=True),
            Field("as", NAME, required=True, defines="locks", offered=True)),
    run_sglang=sglang_lock,
    fuzz=(FuzzRule(4, lambda gen: 9 if gen.matches and len(gen.held) < 6 else 0, fuzz_lock),),
    records=("inc_lock_ref",), record=_recorded_lock, wraps=("lock",),
    describe=lambda f: f"lock {f.get('match')} as {f.get('as')}",
))


# ---- unlock -------------------------------------------------------------------------------------
def run_unlock(driver, f: dict) -> None:
    handle = driver.lock_named(f["lock"])
    driver.cache.dec_lock_ref(handle.node, handle.receipt)
    driver.release_lock(f["lock"])


def sglang_unlock(side, f: dict) -> None:
    side.cache.unlock(side.lock_named(f["lock"]))


def fuzz_unlock(gen) -> dict:
    name = gen.held.pop(gen.rng.randrange(len(gen.held)))
    gen.released = (gen.released + [name])[-4:]
    return {"op": UNLOCK.name, "lock": name}


def fuzz_stale_unlock(gen) -> dict:
    """A lock released twice: the cache must refuse it and change nothing."""
    return {"op": UNLOCK.name, "lock": gen.rng.choice(gen.released), "expect_error": ""}


def _held_lock_step(mapper, op: str, call: str, node: Any, receipt: Hashable, is_root: bool, keep: bool,
                    what: str, root_note: str):
    """The step an op on a recorded lock replays as, or a comment where the trace holds no such lock."""
    if is_root:
        return f"{call} on the root: {root_note}"
    name = mapper.find_lock(node, receipt, keep=keep)
    if name is None:
        return f"{call}(node {node}): {what} the trace does not hold (taken before recording, or not recordable)"
    return {"op": op, "lock": name}


def record_unlock(mapper, node: Any, receipt: Hashable, is_root: bool = False):
    return _held_lock_step(mapper, UNLOCK.name, "dec_lock_ref", node, receipt, is_root, False,
                           "releases a lock", "nothing to unlock")


def _recorded_unlock(mapper, call):
    node = call.arg(0, "node_id")
    return record_unlock(mapper, node, call.hashable(call.arg(1, "params")), call.is_root(node))


UNLOCK = declare(OpSpec(
    "unlock", "release a lock with its receipt (dec_lock_ref); a second release is refused",
    run_unlock,
    fields=(Field("lock", NAME, required=True, uses="locks", ends=True, positional=True),),
    run_sglang=sglang_unlock,
    fuzz=(FuzzRule(5, lambda gen: 8 if gen.held else 0, fuzz_unlock),
          FuzzRule(6, lambda gen: 1 if gen.released else 0, fuzz_stale_unlock)),
    records=("dec_lock_ref",), record=_recorded_unlock, wraps=("unlock",),
))


# ---- release_window -----------------------------------------------------------------------------
def run_release_window(driver, f: dict) -> None:
    handle = driver.lock_named(f["lock"])
    release = getattr(driver.cache, "release_window", None)
    if release is None:
        raise driver.refused(f"{RELEASE_WINDOW.name} needs the swa component")
    release(handle.node, handle.receipt)


def sglang_release_window(side, f: dict) -> None:
    side.cache.release_swa(side.lock_named(f["lock"]))


def record_release_window(mapper, node: Any, receipt: Hashable, is_root: bool = False, already: bool = False):
    if already and not is_root:
        return f"release_swa(node {node}) on a lock whose window part is already released: SGLang does nothing"
    return _held_lock_step(mapper, RELEASE_WINDOW.name, "release_swa", node, receipt, is_root, True, "a lock",
                           "nothing to release")


def _recorded_release(mapper, call):
    lock = call.arg(0, "lock")
    if lock is None:
        return "release_swa(None): nothing to release"
    return record_release_window(mapper, lock.node, call.hashable(lock.receipt), call.is_root(lock.node),
                                 bool(call.before))


def _window_already_released(args: tuple, kwargs: dict) -> bool:
    """Read before the call: a lock whose window part is gone makes release_swa a no-op."""
    lock = args[0] if args else kwargs.get("lock")
    return bool(getattr(lock, "swa_released", False))


RELEASE_WINDOW = declare(OpSpec(
    "release_window", "give up a lock's SWA part early (SGLang's release_swa); the rest stays locked",
    run_release_window,
    fields=(Field("lock", NAME, required=True, uses="locks", positional=True),),
    needs=("swa",),
    run_sglang=sglang_release_window,
    fuzz=(FuzzRule(7, lambda gen: 3 if gen.held and windowed(gen.config.components) else 0,
                   lambda gen: {"op": RELEASE_WINDOW.name, "lock": gen.rng.choice(gen.held)}),),
    records=("release_swa",), record=_recorded_release, record_before=_window_already_released,
))
