"""Ops on keys: ``insert`` (what a scheduler does to cache a sequence) and ``match``
(a prefix lookup), on our cache and on SGLang's."""

from __future__ import annotations

from typing import Any, Optional

from .spec import COUNT, NAME, TOKENS, Field, FuzzRule, OpSpec, declare, stateful, windowed


# ---- insert -------------------------------------------------------------------------------------
def run_insert(driver, f: dict) -> dict:
    """Allocate slots for the whole key, write its KV, free the SWA below
    ``swa_evicted_seqlen``, take a Mamba state, insert, then free the unaligned
    tail (and the state, when the tree already had one).

    All the allocations are checked together first, so a refusal changes nothing:
    no slot taken, nothing evicted. Should a call before the insert fail anyway
    (after the check only a fault can), what was taken goes back before the error
    does; eviction an allocation already did cannot be undone, which is why the
    check comes ahead of every allocation. After the insert (the commit) only
    returns of what the tree did not take are left."""
    from cache import CacheError, InsertParams, RadixKey  # torch: only once an op runs
    from cache.basics.errors import InvalidValueError
    from cache.basics.keys import token_array

    cache = driver.cache
    tokens = f["key"]
    key = RadixKey(driver.token_ids(f, "key"), f.get("extra_key"), f.get("cache_salt"))
    aligned = len(tokens) - len(tokens) % cache.page_size
    window_floor = f.get("swa_evicted_seqlen", 0)
    if window_floor:  # a request whose window slid: its SWA KV below the floor is gone
        if not windowed(cache.by_name):
            raise CacheError("swa_evicted_seqlen needs the swa component")
        if type(window_floor) is not int or window_floor < 0 or window_floor % cache.page_size:
            # freeing part of a page's SWA would free the whole page under the rest
            raise InvalidValueError(
                f"swa_evicted_seqlen must be a non-negative multiple of page_size {cache.page_size}"
                f" (got {window_floor!r})"
            )
    mamba = stateful(cache.by_name)
    cache.check_capacity(len(tokens), mamba_states=1 if mamba else 0)
    slots = cache.alloc_kv(len(tokens))
    state = None
    try:
        held = tokens if cache.bigram_keys else token_array(key.data)  # the packed key itself: no list to convert
        cache.write_kv(slots, held)
        if window_floor:
            cache.free_swa(slots[:window_floor])
        if mamba:
            state = cache.alloc_mamba_state(held[:aligned])
        result = cache.insert(InsertParams(key, slots, state, swa_evicted_seqlen=window_floor,
                                           priority=f.get("priority", 0)))
    except BaseException:  # refused: the tree took nothing, so everything goes back
        cache.free_kv([slots])
        if state is not None:
            cache.free_mamba_state(state)
        raise
    if cache.bigram_keys:  # EAGLE: N tokens are N - 1 pairs, so the tree adopts one slot fewer
        aligned = max(len(tokens) - 1, 0) - max(len(tokens) - 1, 0) % cache.page_size
    if aligned < len(tokens):
        _free_tail(cache, slots, aligned, window_floor)
    if state is not None and result.mamba_exist:
        cache.free_mamba_state(state)  # the tree kept its own state
    if "as" in f:  # a name for the node the insert ended on, for a later lock
        driver.name_match(f["as"], result.last_device_node, result.prefix_len, key, None)
    out = {"prefix_len": result.prefix_len, "last_node_depth": node_depth(cache, result.last_device_node)}
    if mamba:
        out["mamba_exist"] = bool(result.mamba_exist)
    return out


def node_depth(cache, node_id) -> Optional[int]:
    """Tokens (bigram keys: pairs) from the root to a node's end, as SGLang's tests
    measure where an insert or a match ended; None for no node."""
    if node_id is None:
        return None
    node, depth = cache.tree.node_by_id(node_id), 0
    while node.parent is not None:
        depth, node = depth + node.length, node.parent
    return depth


def _free_tail(cache, slots, aligned: int, window_floor: int) -> None:
    """The slots the tree did not adopt go back; below the window floor their SWA side
    is gone already, so only their Full side is freed there."""
    if window_floor > aligned:
        cache.free_kv([slots[aligned:window_floor]], full_only=True)
        aligned = window_floor
    if aligned < len(slots):
        cache.free_kv([slots[aligned:]])


def sglang_insert(side, f: dict) -> dict:
    """The same calls on SGLang's allocators and cache."""
    sg, torch = side.sg, side.sg.torch
    tokens = f["key"]
    n = len(tokens)
    aligned = n - n % side.ps
    floor = f.get("swa_evicted_seqlen", 0)
    side.check_capacity(n, 1 if side.has_mamba else 0)
    slots, extra = side.alloc_kv(n)
    state = None
    try:
        if floor:  # the request's window slid: its SWA slots below the floor are gone already
            side.alloc.free_swa_segment(slots[: min(floor, aligned)], start_pos=0)
        if side.has_mamba:
            state = side.alloc_mamba()
        params = sg.InsertParams(key=side.key(tokens, f.get("extra_key"), f.get("cache_salt")), value=slots,
                                 mamba_value=state, priority=f.get("priority", 0))
        if floor:
            params.component_evicted_seqlens[sg.ComponentType.SWA] = floor
        result = side.cache.insert(params)
    except BaseException:
        side.alloc.free(torch.cat([slots, extra]))
        if state is not None:
            side.r2t.mamba_allocator.free(state)
        raise
    if side.is_eagle:  # the tree adopted one slot fewer (N tokens are N - 1 pairs): free that page too
        adopted = max(n - 1, 0) - max(n - 1, 0) % side.ps
        if adopted < aligned:
            from sglang.srt.mem_cache.common import free_kv_row_segments

            dead = min(floor, aligned) if side.has_swa else 0
            free_kv_row_segments(side.alloc, [(slots[adopted:aligned], adopted)], swa_evicted_seqlen=dead)
    tail = torch.cat([slots[aligned:], extra])
    if tail.numel():
        side.alloc.free_segment(tail, start_pos=aligned)
    if state is not None and result.mamba_exist:
        side.r2t.mamba_allocator.free(state)  # the tree kept its own state
    if "as" in f:
        side.matches[f["as"]] = result.last_device_node
    out = {"prefix_len": int(result.prefix_len), "last_node_depth": side.node_depth(result.last_device_node)}
    if side.has_mamba:
        out["mamba_exist"] = bool(result.mamba_exist)
    return out


def fuzz_insert(gen) -> dict:
    step: dict[str, Any] = {"op": INSERT.name, "key": gen.key(), **gen.salt()}
    if windowed(gen.config.components) and gen.rng.random() < 0.3 and len(step["key"]) >= gen.page:
        step["swa_evicted_seqlen"] = gen.rng.randint(0, len(step["key"]) // gen.page) * gen.page
    priority = draw_priority(gen)
    if priority is not None:
        step["priority"] = priority
    return step


def draw_priority(gen) -> Optional[int]:
    """A priority for an insert or a request, often, under the priority policy (whose key
    it is); None otherwise. Drawn from its own stream: the other draws stay as without."""
    if gen.config.option("eviction_policy") != "priority" or gen.priority_rng.random() < 0.4:
        return None
    return gen.priority_rng.randint(0, 3)


def record_insert(mapper, tokens: list[int], extra_key: Optional[str], swa_evicted_seqlen: int, node: Any,
                  prefix_len: int, page_size: int, cache_salt: Optional[str] = None, priority: int = 0):
    if swa_evicted_seqlen % page_size:
        return (f"insert of {len(tokens)} tokens with swa_evicted_seqlen {swa_evicted_seqlen}, not a multiple "
                f"of page_size {page_size}: not expressible as an insert op")
    name = mapper.new_name("i")
    mapper.name_node(node, name)
    step: dict = {"op": INSERT.name, "key": tokens, "as": name}
    if extra_key is not None:
        step["extra_key"] = extra_key
    if cache_salt is not None:
        step["cache_salt"] = cache_salt
    if swa_evicted_seqlen:
        step["swa_evicted_seqlen"] = swa_evicted_seqlen
    if priority:
        step["priority"] = priority
    step["expect"] = {"prefix_len": prefix_len}
    return step


def _recorded_insert(mapper, call):
    params = call.arg(0, "params")
    floor = next((int(v) for k, v in params.component_evicted_seqlens.items() if k.name == "SWA"), 0)
    return record_insert(mapper, call.tokens(params.key), params.key.extra_key, floor, call.result.last_device_node,
                         int(call.result.prefix_len), mapper.page_size, getattr(params.key, "cache_salt", None),
                         int(getattr(params, "priority", 0) or 0))


INSERT = declare(OpSpec(
    "insert", "cache a sequence: allocate, write KV, insert, free the unaligned tail",
    run_insert,
    fields=(Field("key", TOKENS, required=True), Field("as", NAME, defines="matches"), Field("extra_key", NAME, placeholder="NS"),
            Field("cache_salt", NAME, placeholder="SALT"),
            Field("swa_evicted_seqlen", COUNT, needs="swa", page_multiple=True), Field("priority", COUNT, placeholder="N")),
    results=("prefix_len", "last_node_depth", "mamba_exist"),
    run_sglang=sglang_insert,
    fuzz=(FuzzRule(0, lambda gen: 24, fuzz_insert),),
    records=("insert",), record=_recorded_insert,
))


# ---- match --------------------------------------------------------------------------------------
def run_match(driver, f: dict) -> dict:
    from cache import MatchPrefixParams, RadixKey

    cache = driver.cache
    key = RadixKey(driver.token_ids(f, "key"), f.get("extra_key"), f.get("cache_salt"))
    result = cache.match_prefix(MatchPrefixParams(key))
    driver.last_match = driver.name_match(f.get("as"), result.last_device_node, result.prefix_len, key, result)
    out = {"prefix_len": result.prefix_len, "host_hit_length": result.host_hit_length,
           "last_node_depth": node_depth(cache, result.last_device_node),
           "best_match_depth": node_depth(cache, result.best_match_node), "full_kv_hit_length": result.full_kv_hit_length}
    if windowed(cache.by_name):
        out["swa_host_hit_length"] = result.swa_host_hit_length
    if stateful(cache.by_name):
        out["mamba_branching_seqlen"] = result.mamba_branching_seqlen
        out["mamba_host_hit_length"] = result.mamba_host_hit_length
    return out


def sglang_match(side, f: dict) -> dict:
    result = side.cache.match_prefix(side.sg.MatchPrefixParams(key=side.key(f["key"], f.get("extra_key"), f.get("cache_salt"))))
    if "as" in f:
        side.matches[f["as"]] = result.last_device_node
    out = {"prefix_len": int(result.device_prefix_len), "host_hit_length": int(result.host_hit_length),
           "last_node_depth": side.node_depth(result.last_device_node),
           "best_match_depth": side.node_depth(result.best_match_node),
           "full_kv_hit_length": int(result.full_kv_hit_length)}
    if side.has_swa:  # MatchResult's per-component host hits (0 without a host tier), as ours reports them
        out["swa_host_hit_length"] = int(result.swa_host_hit_length)
    if side.has_mamba:
        out["mamba_branching_seqlen"] = result.mamba_branching_seqlen
        out["mamba_host_hit_length"] = int(result.mamba_host_hit_length)
    return out


def fuzz_match(gen) -> dict:
    name = f"m{gen.count}"
    gen.matches = (gen.matches + [name])[-6:]
    return {"op": MATCH.name, "key": gen.key(), "as": name, **gen.salt()}


def record_match(mapper, tokens: list[int], extra_key: Optional[str], node: Any, prefix_len: int,
                 mamba_branching_seqlen: Optional[int] = None, cow: bool = False,
                 cache_salt: Optional[str] = None) -> dict:
    name = mapper.new_name("m")
    mapper.name_node(node, name)
    step = {"op": MATCH.name, "key": tokens, "as": name}
    if extra_key is not None:
        step["extra_key"] = extra_key
    if cache_salt is not None:
        step["cache_salt"] = cache_salt
    expect = {"prefix_len": prefix_len}
    if stateful(mapper.components):
        expect["mamba_branching_seqlen"] = mamba_branching_seqlen
    step["expect"] = expect
    if cow:
        step["description"] = "cow_mamba: the request's own copy of the state is not part of the trace"
    return step


def _recorded_match(mapper, call):
    params, result = call.arg(0, "params"), call.result
    return record_match(mapper, call.tokens(params.key), params.key.extra_key, result.last_device_node,
                        int(result.device_prefix_len), result.mamba_branching_seqlen, bool(params.cow_mamba),
                        getattr(params.key, "cache_salt", None))


MATCH = declare(OpSpec(
    "match", "look a key up: the longest cached prefix, and what the host tier holds past it",
    run_match,
    fields=(Field("key", TOKENS, required=True), Field("as", NAME, defines="matches", offered=True),
            Field("extra_key", NAME, placeholder="NS"), Field("cache_salt", NAME, placeholder="SALT")),
    results=("prefix_len", "host_hit_length", "swa_host_hit_length", "mamba_host_hit_length", "mamba_branching_seqlen",
             "last_node_depth", "best_match_depth", "full_kv_hit_length"),
    run_sglang=sglang_match,
    fuzz=(FuzzRule(1, lambda gen: 20, fuzz_match),),
    records=("match_prefix",), record=_recorded_match, read_only=True,
    describe=lambda f: f"match as {f['as']}" if "as" in f else "match",
))
