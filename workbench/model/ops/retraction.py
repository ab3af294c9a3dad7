"""Ops that pause or drop a request, as SGLang 0.5.23's scheduler does: ``retract``
(decode retraction, optionally backing the row up to the host), ``restore`` (a
retracted request with a backup runs again) and ``abort`` (wherever the request is).

A retracted request's name stays in use: it can be restored (with a backup) or
aborted. On SGLang's side a decode request holds one sampled token whose KV the next
forward writes (its ``seqlen`` is the row plus one): the bridge adds that token
around the backup and the restore, so SGLang backs up exactly the row ours does.
"""

from __future__ import annotations

from .spec import COUNT, FLAG, NAME, Field, FuzzRule, OpSpec, declare, stateful

REQ = Field("req", NAME, required=True, uses="requests", positional=True)


# ---- retract ------------------------------------------------------------------------------------
def run_retract(driver, f: dict) -> dict:
    name = f["req"]
    req = driver.reqs.get(name)
    if req is None:
        raise driver.refused(f"retract: request {name!r} is not running")
    if req.is_chunked:  # decode retraction takes only requests in the decode batch (SGLang's side does not check)
        raise driver.refused(f"retract: request {name!r} is still in chunked prefill")
    kept = driver.cache.retract(req, backup=bool(f.get("backup")), evict=f.get("evict", 0))
    del driver.reqs[name]
    if kept:
        driver.retracted[name] = req
    else:  # the host could not hold the backup: SGLang aborts the request
        driver.finished[name] = req
    saved = req.retraction_backup
    return {"backup_slots": 0 if saved is None else int(saved.host_indices.shape[0])}


def sglang_retract(side, f: dict) -> dict:
    """SGLang's release_req for a PD decode request, its backup gate made explicit."""
    sg = side.sg
    name = f["req"]
    entry = side.reqs.get(name)
    if entry is None:
        raise side.refused(f"retract: request {name!r} is not running")
    req = entry["req"]
    kept = True
    if f.get("backup"):
        req.output_ids.append(0)  # the sampled token awaiting its forward: seqlen = row + 1
        try:
            kept = sg.backup_kv_cache(req, side.cache, side.r2t, side.alloc, "host_pool")
        finally:
            req.output_ids.pop()
    sg.release_kv_cache(req, side.cache, checkpoint=False)
    sg.evict_from_tree_cache(side.cache, f.get("evict", 0))
    req.reset_for_retract()
    entry["spare"] = entry["spare"][:0]
    del side.reqs[name]
    if kept:
        side.retracted[name] = entry
    saved = req.kv.retraction_backup
    return {"backup_slots": 0 if saved is None else int(len(saved.host_indices))}


def _not_turns(gen) -> list[str]:
    """Running requests that are not streaming turns (SGLang's streaming sessions keep
    their turns out of retraction, and ours refuses it)."""
    turns = set(gen.turn_of.values())
    return [name for name in gen.running if name not in turns]


def _take_plain(gen) -> str:
    pool = _not_turns(gen)
    name = pool[gen.rng.randrange(len(pool))]
    gen.running.remove(name)
    return name


def fuzz_retract(gen) -> dict:
    retracted = _retracted(gen)
    name = _take_plain(gen)
    gen.chunked.discard(name)
    step = {"op": RETRACT.name, "req": name}
    if gen.config.hicache and not stateful(gen.config.components) and gen.rng.random() < 0.7:
        step["backup"] = True
    if gen.rng.random() < 0.3:
        step["evict"] = gen.rng.randint(1, 8 * gen.page)
    retracted.append((name, bool(step.get("backup"))))
    return step


def _hosted(weight: int, when=lambda gen: True):
    """Drawn on every fuzz config (a backup only with a host tier and no Mamba)."""
    return lambda gen: weight if when(gen) else 0


def _retracted(gen) -> list:
    """The generator's retracted requests: (name, with a backup)."""
    return gen.__dict__.setdefault("retracted", [])


RETRACT = declare(OpSpec(
    "retract", "decode retraction: back the row up to the host (backup), give it back uncached, evict the "
    "shortfall below evict=N tokens (SGLang's release_req + reset_for_retract)",
    run_retract,
    fields=(REQ, Field("backup", FLAG, flag_word="backup"), Field("evict", COUNT)),
    results=("backup_slots",),
    run_sglang=sglang_retract,
    fuzz=(FuzzRule(20, _hosted(2, lambda gen: bool(_not_turns(gen))), fuzz_retract),),
    describe=lambda f: f"retract {f['req']}" + (" with a host backup" if f.get("backup") else ""),
))


# ---- restore ------------------------------------------------------------------------------------
def run_restore(driver, f: dict) -> None:
    name = f["req"]
    req = driver.retracted.get(name)
    if req is None:
        raise driver.refused(f"restore: request {name!r} is not retracted")
    driver.cache.restore(req)
    driver.reqs[name] = driver.retracted.pop(name)


def sglang_restore(side, f: dict) -> None:
    """decode.py's resume: _pre_alloc (a fresh row and slots), then restore_kv_cache."""
    sg, torch = side.sg, side.sg.torch
    name = f["req"]
    entry = side.retracted.get(name)
    if entry is None:
        raise side.refused(f"restore: request {name!r} is not retracted")
    req = entry["req"]
    if req.kv.retraction_backup is None:
        raise side.refused(f"restore: request {name!r} was retracted without a backup")
    n = len(req.origin_input_ids) + len(req.output_ids)
    side.check_capacity(n)
    if side.r2t.alloc([req]) is None:
        raise side.refused("no free req_to_token row")
    slots, spare = side.alloc_kv(n)
    side.r2t.write((req.kv.req_pool_idx, slice(0, n)), slots.to(torch.int32))
    req.kv.kv_committed_len = req.kv.kv_allocated_len = n
    req.is_retracted = False
    req.output_ids.append(0)  # the sampled token awaiting its forward: seqlen = row + 1
    try:
        sg.restore_kv_cache(req, side.cache, side.r2t, side.alloc, "host_pool")
    finally:
        req.output_ids.pop()
    req.last_node = side.cache.root_node if req.last_node is None else req.last_node
    req.refresh_fill_ids()
    req.extend_end = n  # it decodes on from its whole row
    entry["spare"] = spare
    side.reqs[name] = side.retracted.pop(name)


def fuzz_restore(gen) -> dict:
    retracted = _retracted(gen)
    with_backup = [i for i, (_, kept) in enumerate(retracted) if kept]
    name, _ = retracted.pop(gen.rng.choice(with_backup))
    gen.running.append(name)
    return {"op": RESTORE.name, "req": name}


RESTORE = declare(OpSpec(
    "restore", "a retracted request with a backup runs again: fresh slots, its KV copied back from the host "
    "(SGLang's _pre_alloc + restore_kv_cache)",
    run_restore,
    fields=(REQ,),
    run_sglang=sglang_restore,
    fuzz=(FuzzRule(21, _hosted(4, lambda gen: any(kept for _, kept in _retracted(gen))), fuzz_restore),),
))


# ---- abort --------------------------------------------------------------------------------------
def run_abort(driver, f: dict) -> None:
    name = f["req"]
    req = driver.retracted.get(name) or driver.reqs.get(name)
    if req is None:
        raise driver.refused(f"abort: request {name!r} is neither running nor retracted")
    driver.cache.abort(req)
    driver.finished[name] = driver.retracted.pop(name, None) or driver.reqs.pop(name)


def sglang_abort(side, f: dict) -> None:
    """scheduler.py's abort_request: a retracted request's backup is discarded; a running
    one finishes with FINISH_ABORT and is released with its KV cached; one in chunked
    prefill gets release_aborted_request, then is released uncached."""
    sg = side.sg
    name = f["req"]
    if name in side.retracted:
        sg.discard_kv_cache_backup(side.retracted.pop(name)["req"], side.cache, "host_pool")
        return
    req = side.request_named(name)["req"]
    req.finished_reason = sg.FINISH_ABORT()
    chunked = req.kv.kv_committed_len < len(req.origin_input_ids)
    if chunked:
        side.cache.release_aborted_request(req.cache_request_handle)
    sg.release_kv_cache(req, side.cache, checkpoint=not chunked)
    del side.reqs[name]


def fuzz_abort(gen) -> dict:
    retracted = _retracted(gen)
    if retracted and (not _not_turns(gen) or gen.rng.random() < 0.5):
        name, _ = retracted.pop(gen.rng.randrange(len(retracted)))
    else:
        name = _take_plain(gen)
        gen.chunked.discard(name)
    return {"op": ABORT.name, "req": name}


ABORT = declare(OpSpec(
    "abort", "abort a request: running, released with its KV cached; in chunked prefill, released uncached; "
    "retracted, its host backup discarded (SGLang's abort_request paths)",
    run_abort,
    fields=(Field("req", NAME, required=True, uses="requests", ends=True, positional=True),),
    run_sglang=sglang_abort,
    fuzz=(FuzzRule(22, _hosted(2, lambda gen: bool(_not_turns(gen) or _retracted(gen))), fuzz_abort),),
))
