"""Request ops, the scheduler's calls for one request: ``req_prefill`` (admit: match,
lock, allocate the rest, or only a first chunk of it), ``req_extend`` (chunked
prefill's next chunk), ``req_decode`` (new tokens, the window may slide),
``checkpoint`` (cache what is done so far) and ``release`` (``release_kv_cache``:
insert or not, up to the stop, then unlock and free the rest)."""

from __future__ import annotations

from array import array
from typing import Optional

from .keys import draw_priority
from .request_view import view_of_first_arg
from .spec import COUNT, FLAG, HOST, NAME, TOKENS, Field, FuzzRule, OpSpec, declare, recorded_by, stateful, windowed

REQ = Field("req", NAME, required=True, uses="requests", positional=True)


def _req_before(args: tuple, kwargs: dict):
    return view_of_first_arg(args, kwargs)


# ---- req_prefill --------------------------------------------------------------------------------
def run_prefill(driver, f: dict) -> dict:
    name = f["req"]
    if name in driver.reqs:
        raise driver.refused(f"request {name!r} is already running")
    load_back = bool(f.get("load_back"))
    if f.get("mem_quota") is not None and not load_back:
        raise driver.refused("mem_quota is the load-back's budget: it needs load_back")
    more = {"load_back": True, "mem_quota": f.get("mem_quota")} if load_back else {}
    if f.get("session") is not None:  # a radix-native session request (ops/sessions.py)
        more.update(session_id=f["session"], session_generation=f.get("generation"))
    elif f.get("generation") is not None:
        raise driver.refused("generation is a session's: it needs session=ID")
    if f.get("cache_salt"):
        more["cache_salt"] = f["cache_salt"]
    req = driver.cache.new_request(f["tokens"], rid=name, chunk=f.get("chunk"), **more)
    req.priority = f.get("priority", 0)  # read by its checkpoints (InsertParams.priority)
    driver.reqs[name] = req
    driver.finished.pop(name, None)
    out = {"prefix_len": req.cache_protected_len}
    if load_back:
        out["host_loaded"] = req.host_loaded_length
    return out


def sglang_prefill(side, f: dict) -> dict:
    sg, torch = side.sg, side.sg.torch
    name, tokens = f["req"], f["tokens"]
    if name in side.reqs:
        raise side.refused(f"request {name!r} is already running")
    req = sg.Req(rid=side.next_rid(), origin_input_text="", origin_input_ids=array("q", tokens),
                 sampling_params=sg.SamplingParams(temperature=0, max_new_tokens=1 << 20),
                 priority=f.get("priority"), session_id=f.get("session"), cache_salt=f.get("cache_salt"))
    if f.get("generation") is not None:  # a request created under an earlier incarnation of its session
        req.session_generation = f["generation"]
    elif f.get("session") is not None and side.session_radix:  # the scheduler's radix-native session request
        req.session_generation = side.cache.ensure_session_generation(f["session"])
    sg.match_kv_cache(req, side.cache, cow_mamba=side.has_mamba)
    entry = {"req": req, "spare": torch.empty((0,), dtype=torch.int64)}
    try:  # the scheduler's order: load back, budget the KV, lock the prefix, the row and its states, the KV
        loaded = side.host.admit_load_back(req, f) if f.get("load_back") else None  # workbench/bridge/sglang_host.py
        prefix = side.cache.prefix_device_indices(req).to(torch.int64)
        computed = len(tokens) if f.get("chunk") is None else min(len(tokens), prefix.numel() + f["chunk"])
        req.extend_end = computed  # set before the lock, as the scheduler's admission does (the recorder reads it)
        req.lock = side.cache.lock(req.last_node)
        side.check_capacity(computed - prefix.numel())
        if side.has_mamba:  # alloc_req_slots: the running slot and the ping-pong pair, evicting the shortfall
            sg.ensure_mamba_capacity(side.r2t, [req], side.cache)
        if side.r2t.alloc([req]) is None:
            raise side.refused("no free req_to_token row")
        fresh = side.take_slots(entry, computed - prefix.numel())
    except BaseException:
        side.abandon(req)  # what the scheduler gives back when it cannot admit (sglang#16067's fix)
        raise
    row = req.kv.req_pool_idx
    side.r2t.write((row, slice(0, prefix.numel())), prefix.to(torch.int32))
    side.r2t.write((row, slice(prefix.numel(), computed)), fresh.to(torch.int32))
    req.kv.cache_protected_len = prefix.numel()
    req.kv.kv_allocated_len = req.kv.kv_committed_len = computed
    req.prefix_len = req.extend_end = computed  # where the next chunk starts
    req.refresh_fill_ids()
    side.track_checkpoint(req)
    side.reqs[name] = entry
    out = {"prefix_len": int(req.kv.cache_protected_len)}
    if loaded is not None:
        out["host_loaded"] = loaded
    return out


def fuzz_prefill(gen) -> dict:
    rng = gen.rng
    name = f"r{gen.count}"
    gen.running.append(name)
    tokens = gen.key(min_len=1)
    if rng.random() < 0.1:  # a prompt about the size of the pool: admission may be refused
        kv = gen.config.scenario_config()["kv_size"]
        tokens = tokens + [rng.randint(1, 3) for _ in range(rng.randint(kv // 2, kv + kv // 4))]
    step = {"op": PREFILL.name, "req": name, "tokens": tokens, **gen.salt()}
    gen.computed[name], gen.outputs[name] = len(tokens), 0
    if rng.random() < 0.2 and len(tokens) > 1:  # chunked prefill: the rest comes with req_extend
        step["chunk"] = rng.randint(1, len(tokens) - 1)
        gen.chunked.add(name)
    if gen.config.hicache and rng.random() < 0.4:  # admission with the host tier's part of the prefix
        step["load_back"] = True
        if rng.random() < 0.25:
            step["mem_quota"] = rng.randint(0, 8 * gen.page)
    priority = draw_priority(gen)  # the priority policy's keys
    if priority is not None:
        step["priority"] = priority
    if gen.config.sessions and rng.random() < 0.7:  # a session's request (ops/sessions.py)
        from .sessions import fuzz_session_fields

        step.update(fuzz_session_fields(gen))
    return step


def _prefill_weight(gen) -> int:
    max_running = 5 if stateful(gen.config.components) else 3  # enough requests to exhaust a small state pool
    return 7 if len(gen.running) < max_running else 0


PREFILL = declare(OpSpec(
    "req_prefill", "admit a request: match its prompt, lock the prefix, allocate the rest",
    run_prefill,
    fields=(Field("req", NAME, required=True, defines="requests", positional=True),
            Field("tokens", TOKENS, required=True, nonempty=True),
            Field("chunk", COUNT, placeholder="N"),
            Field("load_back", FLAG, flag_word="load_back", needs=HOST), Field("mem_quota", COUNT, needs=HOST),
            Field("session", NAME, placeholder="SID"), Field("generation", COUNT, placeholder="N"),
            Field("priority", COUNT, placeholder="N"), Field("cache_salt", NAME, placeholder="SALT")),
    results=("prefix_len", "host_loaded"),
    run_sglang=sglang_prefill,
    refusal_changes="SGLang's scheduler matches a request before it knows it can admit it: a refused admission "
    "keeps its match's split and LRU refresh (it holds nothing); with load_back, a load v0.5.23 has made stays, "
    "and a called-off load lets go of what it locked (host LRU: most recent end)",
    fuzz=(FuzzRule(3, _prefill_weight, fuzz_prefill),),
    # the lock that admits a matched request (the recorder finds it)
    record=recorded_by("request_calls", "record_prefill"),
))


# ---- req_decode ---------------------------------------------------------------------------------
def run_decode(driver, f: dict) -> None:
    req = driver.request_named(f["req"])
    if req.is_chunked:  # SGLang's scheduler never decodes a request mid-prefill (its bridge side does not check)
        raise driver.refused(f"request {f['req']!r} is still in chunked prefill: req_extend it first")
    # one call: a refused decode must not leave half a step (tokens in, no slide)
    driver.cache.extend_request(req, f["tokens"], slide=bool(f.get("slide_window")))


def sglang_decode(side, f: dict) -> None:
    torch = side.sg.torch
    entry = side.request_named(f["req"])
    req, tokens = entry["req"], f["tokens"]
    start = req.kv.kv_committed_len
    slots = side.take_slots(entry, len(tokens))
    side.r2t.write((req.kv.req_pool_idx, slice(start, start + len(tokens))), slots.to(torch.int32))
    req.output_ids.extend(tokens)
    req.kv.kv_committed_len += len(tokens)
    req.kv.kv_allocated_len += len(tokens)
    req.refresh_fill_ids()
    req.extend_end = req.kv.kv_committed_len  # prepare_for_decode: the forward's end is the row's
    side.track_checkpoint(req)
    if f.get("slide_window"):
        side.cache.evict_sliding_windows(req, req.kv.kv_committed_len - 1)


def _decoding(gen) -> list[str]:
    """Running requests past their prompt. With Mamba, not a streaming turn at its
    max_new_tokens: a decode past the cap (spec decoding's overshoot) leaves the
    session's Mamba state past the record that SGLang 0.5.23's release trims to the
    cap (StreamingSession._trim_overshoot frees only KV), which the checker flags
    (tests/sessions/test_streaming_overshoot.py)."""
    if stateful(gen.config.components):
        cap = gen.output_cap
        return [name for name in gen.running
                if name not in gen.chunked and (name not in cap or gen.outputs[name] < cap[name])]
    return [name for name in gen.running if name not in gen.chunked]


def _decode_refused(gen, step: dict, running) -> None:
    """A decode refused (no room for its KV) decoded nothing: a later stop or checkpoint
    must fall inside what did, or it is refused and the request runs on unseen. The
    counts the draws read stay as drawn (so a seed draws what it always drew); the
    tokens that never came are counted apart and taken off the value drawn."""
    gen.undecoded[step["req"]] = gen.undecoded.get(step["req"], 0) + len(step["tokens"])


def fuzz_decode(gen) -> dict:
    rng = gen.rng
    name = rng.choice(_decoding(gen))
    step = {"op": DECODE.name, "req": name, "tokens": [rng.randint(1, 3) for _ in range(rng.randint(1, 2 * gen.page))]}
    if name in gen.output_cap and stateful(gen.config.components):  # no overshoot (see _decoding)
        del step["tokens"][gen.output_cap[name] - gen.outputs[name]:]
    gen.computed[name] += len(step["tokens"])
    gen.outputs[name] += len(step["tokens"])
    if windowed(gen.config.components) and rng.random() < 0.4:
        step["slide_window"] = True
    return step


DECODE = declare(OpSpec(
    "req_decode", "a request's new tokens (slots taken from its last page first); slide its window",
    run_decode,
    fields=(REQ, Field("tokens", TOKENS, required=True, nonempty=True),
            Field("slide_window", FLAG, flag_word="slide", needs="swa")),
    run_sglang=sglang_decode,
    fuzz=(FuzzRule(8, lambda gen: 9 if _decoding(gen) else 0, fuzz_decode, refused=_decode_refused),),
    record=recorded_by("request_calls", "record_decode"),  # what a request computed between its calls
))


# ---- req_extend ---------------------------------------------------------------------------------
def run_extend(driver, f: dict) -> None:
    driver.cache.extend_prompt(driver.request_named(f["req"]), f.get("chunk"))


def sglang_extend(side, f: dict) -> None:
    torch = side.sg.torch
    entry = side.request_named(f["req"])
    req = entry["req"]
    start = req.kv.kv_committed_len
    left = len(req.origin_input_ids) - start
    if left <= 0:
        raise side.refused(f"request {f['req']!r} has computed its whole prompt")
    n = left if f.get("chunk") is None else min(f["chunk"], left)
    slots = side.take_slots(entry, n)
    side.r2t.write((req.kv.req_pool_idx, slice(start, start + n)), slots.to(torch.int32))
    req.kv.kv_committed_len += n
    req.kv.kv_allocated_len += n
    req.prefix_len = req.extend_end = req.kv.kv_committed_len
    side.track_checkpoint(req)


def fuzz_extend(gen) -> dict:
    name = gen.rng.choice(sorted(gen.chunked))
    step = {"op": EXTEND.name, "req": name}
    if gen.rng.random() < 0.5:
        step["chunk"] = gen.rng.randint(1, 3 * gen.page)
    else:
        gen.chunked.discard(name)
    return step


EXTEND = declare(OpSpec(
    "req_extend", "chunked prefill's next chunk: compute the next N prompt tokens of a request admitted with "
    "chunk=N (default: the rest of its prompt)",
    run_extend,
    fields=(REQ, Field("chunk", COUNT, placeholder="N")),
    run_sglang=sglang_extend,
    fuzz=(FuzzRule(14, lambda gen: 6 if gen.chunked else 0, fuzz_extend),),
))


# ---- checkpoint (was req_chunk) ------------------------------------------------------------------
def run_checkpoint(driver, f: dict) -> None:
    req = driver.request_named(f["req"])
    up_to = f.get("up_to")
    if up_to is not None and up_to > req.kv_committed_len:
        raise driver.refused(f"up_to={up_to}: request {f['req']!r} has computed {req.kv_committed_len} tokens")
    driver.cache.checkpoint(req, up_to=up_to)


def sglang_checkpoint(side, f: dict) -> None:
    """SGLang's checkpoint_kv_cache: the chunk's end (extend_end), or ``up_to``."""
    req = side.request_named(f["req"])["req"]
    up_to = f.get("up_to")
    side.cache.checkpoint(req, up_to=req.kv.kv_committed_len if up_to is None else up_to)


def _checkpointable(gen) -> list[str]:
    """Running requests a checkpoint may name: not a streaming turn that has decoded
    (SGLang checkpoints after an extend only; such a turn would publish output that its
    next turn's history, cut at max_new_tokens, does not hold)."""
    turns = gen.turn_of.values()
    return [name for name in gen.running if not (gen.outputs[name] and name in turns)]


def fuzz_checkpoint(gen) -> dict:
    name = gen.rng.choice(_checkpointable(gen))
    step = {"op": CHECKPOINT.name, "req": name}
    # a checkpoint short of what it has computed; not with Mamba, whose state is taken after all of it
    # (SGLang would key it at up_to: the checker flags that, and its scheduler never asks for it)
    if gen.rng.random() < 0.1 and name not in gen.chunked and not stateful(gen.config.components):
        done = gen.computed[name]
        step["up_to"] = min(gen.rng.randint(max(0, done - 2 * gen.page), done), done - gen.undecoded.get(name, 0))
    return step


CHECKPOINT = declare(OpSpec(
    "checkpoint", "cache what a running request has so far (or its first up_to=N tokens) and move its lock "
    "there; it keeps running (SGLang's checkpoint: chunked prefill's per-chunk publish)",
    run_checkpoint,
    fields=(REQ, Field("up_to", COUNT, placeholder="N")),
    run_sglang=sglang_checkpoint,
    refusal_changes="SGLang asserts on a checkpoint below what the request's lock protects only after its insert: "
    "the refusal keeps that insert's LRU refresh and any split at the key's end (no slot changes hands)",
    fuzz=(FuzzRule(9, lambda gen: 3 if _checkpointable(gen) else 0, fuzz_checkpoint),),
    aliases=("req_chunk",),
    records=("checkpoint",), record=recorded_by("request_calls", "record_checkpoint"), record_before=_req_before,
))


# ---- release (was req_finish) --------------------------------------------------------------------
def run_release(driver, f: dict) -> None:
    name, stop = f["req"], f.get("stop_at")
    req = driver.request_named(name)
    if stop is not None:
        _check_stop(driver, name, req, stop)
    before, req.finished_len = req.finished_len, length_capped(stop, len(req.output_ids),
                                                               getattr(req, "max_new_tokens", None))
    req.finish_aborted = bool(f.get("abort"))  # FINISH_ABORT: its insert registers no session reference
    try:
        driver.cache.release_kv_cache(req, checkpoint=f.get("insert", True))
    except BaseException:
        req.finished_len, req.finish_aborted = before, False  # refused: the request runs on as it was
        raise
    driver.finished[name] = driver.reqs.pop(name)


def _check_stop(driver, name: str, req, stop: int) -> None:
    """A stop within the request's output, past what the tree already holds of it
    (SGLang frees from the stop's page on, so an earlier stop would free tree KV). With
    EAGLE's bigram keys the tree holds pairs: N of them span N + 1 tokens."""
    if stop > len(req.output_ids):
        raise driver.refused(f"stop_at={stop}: request {name!r} has {len(req.output_ids)} output tokens")
    held = req.cache_protected_len + int(driver.cache.bigram_keys and req.cache_protected_len > 0)
    if len(req.origin_input_ids) + stop < held:
        raise driver.refused(f"stop_at={stop} would end request {name!r} inside the {held} "
                              "tokens the tree already holds for it")


def length_capped(stop: Optional[int], output_len: int, max_new_tokens: Optional[int]) -> Optional[int]:
    """The finished length SGLang's ``Req.check_finished`` leaves: an output that
    reached ``max_new_tokens`` (a multi-token decode may pass it) ends there, and a
    stop past it is capped (``_cap_finished_len_at_max_new_tokens``); a streaming
    session trims its record to that length, which the next turn's history holds."""
    if max_new_tokens is None or (stop if stop is not None else output_len) <= max_new_tokens:
        return stop
    return max_new_tokens


def sglang_release(side, f: dict) -> None:
    req = side.request_named(f["req"])["req"]
    req.finished_len = length_capped(f.get("stop_at"), len(req.output_ids), req.sampling_params.max_new_tokens)
    sg = side.sg
    req.finished_reason = sg.FINISH_ABORT() if f.get("abort") else sg.FINISH_LENGTH(length=len(req.output_ids))
    side.sg.release_kv_cache(req, side.cache, checkpoint=f.get("insert", True))
    del side.reqs[f["req"]]


def fuzz_release(gen) -> dict:
    name = gen.running.pop(gen.rng.randrange(len(gen.running)))
    gen.chunked.discard(name)
    if gen.turn_of:  # a streaming turn ends (ops/streaming.py)
        from .streaming import turn_ended

        turn_ended(gen, name)
    step = {"op": RELEASE.name, "req": name}
    if gen.rng.random() < 0.15:
        step["insert"] = False
    outputs = gen.outputs.get(name, 0)
    # a stop before the last token: the KV past it is freed (not with Mamba at page 1, where the state
    # cached is the one after every committed token: SGLang keys it at the stop, which the checker flags)
    mamba_running_state = stateful(gen.config.components) and gen.page == 1
    if outputs and gen.rng.random() < 0.2 and not mamba_running_state:
        stop, decoded = gen.rng.randint(0, outputs - 1), outputs - gen.undecoded.get(name, 0)
        if decoded > 0:
            step["stop_at"] = min(stop, decoded - 1)
    if gen.config.sessions and gen.rng.random() < 0.15:  # an aborted finish registers no session reference
        step["abort"] = True
    return step


RELEASE = declare(OpSpec(
    "release", "a request ends: insert what it owns up to its stop (or not: noinsert), unlock, free the rest "
    "(SGLang's release_kv_cache; stop_at=N: its output ends after N tokens, finished_len)",
    run_release,
    fields=(Field("req", NAME, required=True, uses="requests", ends=True, positional=True),
            Field("insert", FLAG, flag_word="noinsert", flag_value=False),
            Field("stop_at", COUNT, placeholder="N"), Field("abort", FLAG, flag_word="abort")),
    run_sglang=sglang_release,
    fuzz=(FuzzRule(10, lambda gen: 6 if gen.running else 0, fuzz_release),),
    aliases=("req_finish",),
    records=("on_release",), record=recorded_by("request_calls", "record_release"), record_before=_req_before,
))
