"""Session ops, the scheduler's session calls (SGLang 0.5.23): ``session_open``
(``Scheduler.open_session``: the session controller, then with the session radix cache
a new generation), ``session_release`` (``Scheduler.close_session``: the tree lets go of
the session's references, the controller closes it, or defers that while a streaming
turn runs) and ``session_reap`` (the controller's periodic pass that ends deferred
closes).

A request joins a session with ``req_prefill … session=ID`` (a radix-native session:
its finish registers a reference where its insert ended); ``stream_turn`` (ops/streaming)
runs a streaming session's turn. Session ids are plain names, not a namespace the
scenario checks: naming a closed or never-opened session is legal (SGLang reopens it).
"""

from __future__ import annotations

from .spec import FLAG, NAME, Field, FuzzRule, OpSpec, declare, recorded_by

SESSION = Field("session", NAME, required=True, positional=True, placeholder="SID")


# ---- session_open -------------------------------------------------------------------------------
def run_open(driver, f: dict) -> dict:
    opened = driver.cache.open_session(f["session"], streaming=bool(f.get("streaming")))
    return {"success": opened.success, "generation": opened.generation}


def sglang_open(side, f: dict) -> dict:
    sg, sid = side.sg, f["session"]
    output = side.sessions.open(sg.OpenSessionReqInput(capacity_of_str_len=1 << 20, session_id=sid,
                                                       streaming=bool(f.get("streaming")), timeout=None))
    generation = None
    if output.success and side.session_radix:
        generation = side.cache.open_radix_session(sid)
    return {"success": bool(output.success), "generation": generation}


def fuzz_open(gen) -> dict:
    sid = gen.rng.choice(SESSION_IDS)
    step = {"op": OPEN.name, "session": sid}
    if sid not in gen.open_sessions:  # (a second open is refused and changes nothing)
        gen.open_sessions.add(sid)
        if gen.rng.random() < 0.4:  # its requests are streaming turns (ops/streaming.py)
            step["streaming"] = True
            gen.streaming.add(sid)
    return step


OPEN = declare(OpSpec(
    "session_open", "open a session (SGLang's open_session): the controller takes it (a second open is "
    "refused: success false); with session_radix_cache it gets a new generation",
    run_open,
    fields=(SESSION, Field("streaming", FLAG, flag_word="streaming")),
    results=("success", "generation"),
    reports_all_results=True,
    run_sglang=sglang_open,
    records=("open_radix_session",), record=recorded_by("session_calls", "record_open"),
    fuzz=(FuzzRule(30, lambda gen: 2 if gen.config.sessions else 0, fuzz_open),),
))


# ---- session_release ----------------------------------------------------------------------------
def run_release(driver, f: dict) -> dict:
    refs = driver.cache.session_refs
    held = sum(map(len, refs.leaves_of(f["session"]).values())) if refs.enabled else 0  # what the close lets go
    closed = driver.cache.close_session(f["session"])
    return {"released": held, "deferred": closed.deferred}


def sglang_release(side, f: dict) -> dict:
    """Scheduler.close_session: the tree first, then the controller when it knows the
    session (its close releases the tree's part again: a no-op on the tombstone)."""
    sg, sid = side.sg, f["session"]
    released = side.session_leaf_counts(sid) if side.session_radix else {}
    if side.session_radix:
        side.cache.release_radix_session(sid)
    if sid in side.sessions or not side.session_radix:
        side.sessions.close(sg.CloseSessionReqInput(session_id=sid))
    known = side.sessions.get(sid)
    return {"released": sum(released.values()), "deferred": bool(known is not None and known.close_on_finish)}


def fuzz_release(gen) -> dict:
    # not a session whose running turn saw a rejection: SGLang would free its record under it
    pool = sorted(gen.open_sessions - gen.turn_blocked) or sorted(set(SESSION_IDS) - gen.turn_blocked)
    sid = gen.rng.choice(pool)
    gen.open_sessions.discard(sid)
    gen.streaming.discard(sid)
    return {"op": RELEASE.name, "session": sid}


RELEASE = declare(OpSpec(
    "session_release", "close a session (SGLang's close_session): with session_radix_cache its references "
    "go (nothing is freed: its data becomes evictable first); the controller closes it, or defers that while "
    "a streaming turn runs",
    run_release,
    fields=(SESSION,),
    results=("released", "deferred"),
    reports_all_results=True,
    run_sglang=sglang_release,
    records=("release_radix_session",), record=recorded_by("session_calls", "record_release"),
    fuzz=(FuzzRule(31, lambda gen: 1 if gen.config.sessions and set(SESSION_IDS) - gen.turn_blocked else 0,
                   fuzz_release),),
))


# ---- session_reap -------------------------------------------------------------------------------
def run_reap(driver, f: dict) -> dict:
    return {"closed": len(driver.cache.reap_sessions())}


def sglang_reap(side, f: dict) -> dict:
    """The controller's periodic pass with its interval elapsed."""
    before = set(side.sessions.sessions)
    side.sessions.maybe_reap(now=side.sessions._last_reap_time + 2.0)
    return {"closed": len(before - set(side.sessions.sessions))}


REAP = declare(OpSpec(
    "session_reap", "the session controller's periodic pass: closes whose streaming turn has ended take effect",
    run_reap,
    results=("closed",),
    reports_all_results=True,
    run_sglang=sglang_reap,
    fuzz=(FuzzRule(32, lambda gen: 1 if gen.config.sessions else 0, lambda gen: {"op": REAP.name}),),
))

SESSION_IDS = ["s1", "s2", "s3"]  # few, so the fuzzer's requests share them


def fuzz_session_fields(gen) -> dict:
    """A request's session: mostly an open one, sometimes a closed or unknown one
    (SGLang reopens it), now and then under a generation that may be stale."""
    rng = gen.rng
    radix = sorted(gen.open_sessions - gen.streaming)
    pool = radix if radix and rng.random() < 0.8 else SESSION_IDS
    fields = {"session": rng.choice(pool)}
    if rng.random() < 0.1:
        fields["generation"] = rng.randint(1, 4)
    return fields
