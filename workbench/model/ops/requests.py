"""Request ops, the scheduler's calls for one request: ``req_prefill`` (admit: match,
lock, allocate the rest), ``req_decode`` (new tokens, the window may slide),
``req_chunk`` (cache what is done so far: ``checkpoint``) and ``req_finish``
(``release_kv_cache``: insert or not, then unlock)."""

from __future__ import annotations

from array import array

from .spec import COUNT, FLAG, HOST, NAME, TOKENS, Field, FuzzRule, OpSpec, declare

REQ = Field("req", NAME, required=True, uses="requests", positional=True)


# ---- req_prefill --------------------------------------------------------------------------------
def run_prefill(session, f: dict) -> dict:
    name = f["req"]
    if name in session.reqs:
        raise session.refused(f"request {name!r} is already running")
    load_back = bool(f.get("load_back"))
    if f.get("mem_quota") is not None and not load_back:
        raise session.refused("mem_quota is the load-back's budget: it needs load_back")
    more = {"load_back": True, "mem_quota": f.get("mem_quota")} if load_back else {}
    req = session.cache.new_request(f["tokens"], rid=name, **more)
    session.reqs[name] = req
    session.finished.pop(name, None)
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
                 sampling_params=sg.SamplingParams(temperature=0, max_new_tokens=1 << 20))
    sg.match_kv_cache(req, side.cache, cow_mamba=side.has_mamba)
    entry = {"req": req, "spare": torch.empty((0,), dtype=torch.int64)}
    try:
        loaded = side.host.admit_load_back(req, f) if f.get("load_back") else None  # workbench/bridge/sglang_host.py
        if side.has_mamba and not req.kv.holds_mamba and side.r2t.mamba_allocator.available_size() < 1:
            side.evict_short(mamba=1)
        if side.r2t.alloc([req]) is None:
            raise side.refused("no free req_to_token row")
        req.lock = side.cache.lock(req.last_node)
        prefix = side.cache.prefix_device_indices(req).to(torch.int64)
        fresh = side.take_slots(entry, len(tokens) - prefix.numel())
    except BaseException:
        side.abandon(req)  # what the scheduler gives back when it cannot admit (sglang#16067's fix)
        raise
    row = req.kv.req_pool_idx
    side.r2t.write((row, slice(0, prefix.numel())), prefix.to(torch.int32))
    side.r2t.write((row, slice(prefix.numel(), len(tokens))), fresh.to(torch.int32))
    req.kv.cache_protected_len = prefix.numel()
    req.kv.kv_allocated_len = req.kv.kv_committed_len = len(tokens)
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
    step = {"op": PREFILL.name, "req": name, "tokens": tokens}
    if gen.config.hicache and rng.random() < 0.4:  # admission with the host tier's part of the prefix
        step["load_back"] = True
        if rng.random() < 0.25:
            step["mem_quota"] = rng.randint(0, 8 * gen.page)
    return step


def _prefill_weight(gen) -> int:
    max_running = 5 if "mamba" in gen.config.components else 3  # enough requests to exhaust a small state pool
    return 7 if len(gen.running) < max_running else 0


PREFILL = declare(OpSpec(
    "req_prefill", "admit a request: match its prompt, lock the prefix, allocate the rest",
    run_prefill,
    fields=(Field("req", NAME, required=True, defines="requests", positional=True),
            Field("tokens", TOKENS, required=True, nonempty=True),
            Field("load_back", FLAG, flag_word="load_back", needs=HOST), Field("mem_quota", COUNT, needs=HOST)),
    results=("prefix_len", "host_loaded"),
    refusal_changes="with load_back, a load v0.5.23 has made stays when the rest of the prompt cannot be allocated; "
                    "a called-off load lets go of what it locked (host LRU: most recent end)",
    run_sglang=sglang_prefill,
    fuzz=(FuzzRule(3, _prefill_weight, fuzz_prefill),),
))


# ---- req_decode ---------------------------------------------------------------------------------
def run_decode(session, f: dict) -> None:
    req = session.request_named(f["req"])
    # one call: a refused decode must not leave half a step (tokens in, no slide)
    session.cache.extend_request(req, f["tokens"], slide=bool(f.get("slide_window")))


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
    side.track_checkpoint(req)
    if f.get("slide_window"):
        side.cache.evict_sliding_windows(req, req.kv.kv_committed_len - 1)


def fuzz_decode(gen) -> dict:
    rng = gen.rng
    step = {"op": DECODE.name, "req": rng.choice(gen.running),
            "tokens": [rng.randint(1, 3) for _ in range(rng.randint(1, 2 * gen.page))]}
    if "swa" in gen.config.components and rng.random() < 0.4:
        step["slide_window"] = True
    return step


DECODE = declare(OpSpec(
    "req_decode", "a request's new tokens (slots taken from its last page first); slide its window",
    run_decode,
    fields=(REQ, Field("tokens", TOKENS, required=True, nonempty=True),
            Field("slide_window", FLAG, flag_word="slide", needs="swa")),
    run_sglang=sglang_decode,
    fuzz=(FuzzRule(8, lambda gen: 9 if gen.running else 0, fuzz_decode),),
))


# ---- checkpoint (was req_chunk) ------------------------------------------------------------------
def sglang_chunk(side, f: dict) -> None:
    req = side.request_named(f["req"])["req"]
    side.cache.checkpoint(req, up_to=req.kv.kv_committed_len)


CHUNK = declare(OpSpec(
    "checkpoint", "cache what a running request has so far and move its lock there; it keeps running "
    "(SGLang's checkpoint)",
    lambda session, f: session.cache.checkpoint(session.request_named(f["req"])),
    fields=(REQ,),
    run_sglang=sglang_chunk,
    fuzz=(FuzzRule(9, lambda gen: 3 if gen.running else 0,
                   lambda gen: {"op": CHUNK.name, "req": gen.rng.choice(gen.running)}),),
    aliases=("req_chunk",),
))


# ---- release (was req_finish) --------------------------------------------------------------------
def run_finish(session, f: dict) -> None:
    name = f["req"]
    req = session.request_named(name)
    session.cache.release_kv_cache(req, checkpoint=f.get("insert", True))
    session.finished[name] = session.reqs.pop(name)


def sglang_finish(side, f: dict) -> None:
    req = side.request_named(f["req"])["req"]
    req.finished_reason = side.sg.FINISH_LENGTH(length=len(req.output_ids))
    side.sg.release_kv_cache(req, side.cache, checkpoint=f.get("insert", True))
    del side.reqs[f["req"]]


def fuzz_finish(gen) -> dict:
    step = {"op": FINISH.name, "req": gen.running.pop(gen.rng.randrange(len(gen.running)))}
    if gen.rng.random() < 0.15:
        step["insert"] = False
    return step


FINISH = declare(OpSpec(
    "release", "a request ends: insert what it computed (or not: noinsert), unlock, free the rest "
    "(SGLang's release_kv_cache)",
    run_finish,
    fields=(Field("req", NAME, required=True, uses="requests", ends=True, positional=True),
            Field("insert", FLAG, flag_word="noinsert", flag_value=False)),
    run_sglang=sglang_finish,
    fuzz=(FuzzRule(10, lambda gen: 6 if gen.running else 0, fuzz_finish),),
    aliases=("req_finish",),
))
