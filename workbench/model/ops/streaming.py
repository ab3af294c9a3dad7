"""A streaming session's turn (SGLang 0.5.23's streaming sessions): ``stream_turn REQ
TOKENS… session=SID``. The session's history (the last turn's prompt and output) plus
these tokens is the turn's prompt. The first turn runs as any request and hands its
record (row, KV, lock) to the session's slot; a later turn borrows that record: its
match lands on the slot's virtual node and its prefix is everything committed. The
turn is then a running request like any other (``req_decode``, ``checkpoint``,
``release``). A turn sent while another runs is rejected (``aborted``), as SGLang's
``Session.create_req`` rejects it.
"""

from __future__ import annotations

from array import array

from .spec import COUNT, FLAG, NAME, TOKENS, Field, FuzzRule, OpSpec, declare


def run_turn(driver, f: dict) -> dict:
    name = f["req"]
    if name in driver.reqs:
        raise driver.refused(f"request {name!r} is already running")
    try:
        turn = driver.cache.stream_turn(f["session"], name, f["tokens"], max_new_tokens=f.get("max_new_tokens"),
                                         priority=f.get("priority", 0), checkpoint=f.get("checkpoint", True))
    except BaseException:
        admitted = driver.cache.requests.get(name)
        if admitted is not None:  # its post-prefill checkpoint asserted: the turn was admitted and runs on
            driver.reqs[name] = admitted
        raise
    from cache.sessions.controller import TurnRejected  # (the cache loads torch: only when a step runs)

    if isinstance(turn, TurnRejected):  # TurnRejected: another turn of the session runs
        return {"aborted": True, "prefix_len": 0, "borrowed": False}
    driver.reqs[name] = turn
    driver.finished.pop(name, None)
    return {"aborted": False, "prefix_len": turn.prefix_len, "borrowed": turn.borrowed_slot}


def sglang_turn(side, f: dict) -> dict:
    """One turn as the scheduler runs it: ``Session.create_req`` (history + tokens), the
    match (``init_next_round_input``: a later turn borrows the slot's record), the lock
    (none on the slot's virtual node), the row and fresh KV past the prefix,
    ``maybe_hand_to_session`` (a first turn's slot takes record and lock), then the
    post-prefill ``checkpoint_kv_cache`` (a first turn publishes its prompt)."""
    sg, torch = side.sg, side.sg.torch
    name, sid = f["req"], f["session"]
    if name in side.reqs:
        raise side.refused(f"request {name!r} is already running")
    owner = side.sessions.get(sid)
    if owner is None or owner.close_on_finish:  # handle_generate_request aborts it before any cache call
        raise side.refused(f"session {sid!r} is not open (or is closing)")
    if not owner.streaming:
        raise side.refused(f"session {sid!r} is not a streaming session")
    limit = f.get("max_new_tokens")
    recv = sg.TokenizedGenerateReqInput(
        rid=side.next_rid(), input_text=None, input_ids=array("q", f["tokens"]), input_embeds=None,
        mm_inputs=None, token_type_ids=None, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0,
        token_ids_logprob=None, stream=False, session_params=sg.SessionParams(id=sid), priority=f.get("priority"),
        sampling_params=sg.SamplingParams(temperature=0, max_new_tokens=1 << 20 if limit is None else limit))
    with sg.get_parallel().override(tp_rank=0):  # its abort path logs on rank 0 only
        req = owner.create_req(recv, None, None, req_factory=sg.Req)
    if isinstance(req.to_finish, sg.FINISH_ABORT):  # rejected: its scheduling pass detaches it from the session
        req.init_next_round_input(side.cache)
        return {"aborted": True, "prefix_len": 0, "borrowed": False}
    req.init_next_round_input(side.cache)
    prefix_len, fill_len = int(req.prefix_len), len(req.full_untruncated_fill_ids)
    req.extend_end = fill_len
    req.lock = side.cache.lock(req.last_node)  # None on the slot's virtual node
    borrowed = bool(req.kv.holds_kv)
    entry = {"req": req, "spare": _rest_of_last_page(side, req, prefix_len) if borrowed else
             torch.empty((0,), dtype=torch.int64)}
    prefix = None if borrowed else side.cache.prefix_device_indices(req).to(torch.int64)
    try:
        if side.has_mamba and side.extra_buffer:  # the running slot and the ping-pong pair, evicting the shortfall
            sg.ensure_mamba_capacity(side.r2t, [req], side.cache)
        elif side.has_mamba and not req.kv.holds_mamba:
            side.evict_short(mamba=max(0, 1 - side.r2t.mamba_allocator.available_size()))
        if side.r2t.alloc([req]) is None:
            raise side.refused("no free req_to_token row")
        fresh = side.take_slots(entry, fill_len - prefix_len)
    except BaseException:  # not admitted: dropped as an abort drops it (Session.abort_req: not in flight)
        if not borrowed:
            side.abandon(req)
        owner.abort_req()
        raise
    row = req.kv.req_pool_idx
    if prefix is not None:
        side.r2t.write((row, slice(0, prefix_len)), prefix.to(torch.int32))
    side.r2t.write((row, slice(prefix_len, fill_len)), fresh.to(torch.int32))
    req.kv.kv_allocated_len = req.kv.kv_committed_len = fill_len
    side.cache.maybe_hand_to_session(req)
    side.reqs[name] = entry  # admitted: it runs on even when its post-prefill checkpoint asserts
    if f.get("checkpoint", True):
        sg.checkpoint_kv_cache(req, side.cache)
    return {"aborted": False, "prefix_len": prefix_len, "borrowed": borrowed}


def _rest_of_last_page(side, req, prefix_len: int):
    """A borrowed record continues its last page (the scheduler's alloc_extend starts
    after the row's last slot): the page's slots past the prefix come first."""
    torch, page = side.sg.torch, side.ps
    if page == 1 or prefix_len % page == 0:
        return torch.empty((0,), dtype=torch.int64)
    last = int(side.r2t.req_to_token[req.kv.req_pool_idx, prefix_len - 1])
    return torch.arange(last + 1, (last // page + 1) * page, dtype=torch.int64)


def fuzz_turn(gen) -> dict:
    """A turn of an open streaming session. One sent while another runs is rejected and,
    as in SGLang, clears the session's in-flight flag: a third turn would then share the
    running turn's record (SGLang's suspected bug, which the checker flags), so after a
    rejection the session gets no turn and no close until its running turn ends."""
    rng = gen.rng
    sid = rng.choice(sorted(gen.streaming - gen.turn_blocked))
    name = f"r{gen.count}"
    tokens = [rng.randint(1, 3) for _ in range(rng.randint(1, 2 * gen.page))]
    step = {"op": TURN.name, "req": name, "tokens": tokens, "session": sid}
    if rng.random() < 0.2:
        step["max_new_tokens"] = gen.output_cap[name] = rng.randint(0, 4)
    if sid in gen.turn_of:  # rejected: it never runs
        gen.turn_blocked.add(sid)
        return step
    gen.turn_of[sid] = name
    gen.running.append(name)
    gen.computed[name], gen.outputs[name] = len(tokens), 0  # at least: the history adds to it
    return step


def _turn_refused(gen, step: dict, running) -> None:
    """A turn refused before it was admitted never runs: its session is free for the next
    turn (one admitted whose post-prefill checkpoint then asserted runs on)."""
    name = step["req"]
    if name not in running and gen.turn_of.get(step["session"]) == name:
        gen.running.remove(name)
        turn_ended(gen, name)


def turn_ended(gen, name: str) -> None:
    """The generator's record of a finished (or retracted) turn."""
    for sid, turn in list(gen.turn_of.items()):
        if turn == name:
            del gen.turn_of[sid]
            gen.turn_blocked.discard(sid)


def _turn_weight(gen) -> int:
    if len(gen.running) >= 4 or not gen.streaming - gen.turn_blocked:
        return 0
    return 5


TURN = declare(OpSpec(
    "stream_turn", "a streaming session's next turn: its history plus these tokens; the first turn hands its "
    "record to the session's slot, later turns borrow it (prefix: all the session committed)",
    run_turn,
    fields=(Field("req", NAME, required=True, defines="requests", positional=True),
            Field("tokens", TOKENS, required=True, nonempty=True),
            Field("session", NAME, required=True, placeholder="SID"),
            Field("max_new_tokens", COUNT, placeholder="N"), Field("priority", COUNT, placeholder="N"),
            Field("checkpoint", FLAG, flag_word="nocheckpoint", flag_value=False)),
    results=("aborted", "prefix_len", "borrowed"),
    reports_all_results=True,
    run_sglang=sglang_turn,
    defines_when_refused=True,  # admitted, its post-prefill checkpoint asserted: it runs on
    refusal_changes="SGLang matches a turn in its scheduling pass, before it knows the row fits: a refused first "
    "turn keeps its match's split and LRU refresh (as req_prefill's), a refused later turn its record rewound "
    "to the borrowed prefix (the tail past it freed)",
    fuzz=(FuzzRule(33, _turn_weight, fuzz_turn, refused=_turn_refused),),
))
