"""SGLang 0.5.23's own cache driven by our scenario ops: the bridge's other side.

Each op makes the calls our ``CacheDriver`` makes on ours (those a scheduler makes),
through SGLang's API: its allocators hand out the slots, its ``Req`` and
req_to_token rows carry requests, its ``UnifiedRadixCache`` decides. Built on the CPU
with the smallest model shapes its pools accept: the bridge compares bookkeeping
(tree, locks, LRU lists, pool counts), not KV bytes. ``state()`` reads it back in the
canonical form (``canonical.py``).
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Optional

from cache.basics.keys import ceil_align

from ..model import ops
from .canonical import leaf_order, CanonicalState, NodeState
from .sglang_env import BridgeError, sglang_api
from .sglang_host import HostTier, server_args_fields
from .sglang_options import init_params_options, mamba_extra_buffer, option_env, server_args_options
from ..model.ops.spec import BASE, in_sglang, stateful, windowed

SHAPE = dict(layers=2, full_layers=(1,), heads=1, head_dim=8)  # one Full and one SWA/Mamba layer
MAMBA_SHAPE = dict(intermediate_size=32, n_groups=1, num_heads=2, head_dim=16, state_size=16, conv_kernel=4)
MAMBA_CHUNK = 64  # SGLang's FLA chunk; the Mamba grid is max(chunk, page)


class SGLangOpError(Exception):
    """SGLang refused an op (out of slots, a lock it does not hold, its own assert)."""


class SGLangSide:
    """One SGLang cache with the pools and allocators a scheduler builds for it."""

    def __init__(self, config: dict, core: str = "python", max_requests: int = 16, max_context: int = 4096,
                 allow_version: bool = False) -> None:
        unsupported = [c for c in config["components"] if not in_sglang(c)]
        if unsupported:
            raise BridgeError(f"SGLang's unified cache has no {unsupported[0]!r} component")
        self.sg = sg = sglang_api(allow_version)
        self.names = list(config["components"])
        self.types = {name: getattr(sg.ComponentType, name.upper()) for name in self.names}
        self.ps = config.get("page_size", 1)
        self.kv_size = config["kv_size"]
        self.swa_size = config.get("swa_kv_size") or self.kv_size
        self.window, self.states = windowed(self.names), stateful(self.names)  # the SWA and Mamba names, or None
        self.has_swa, self.has_mamba = self.window is not None, self.states is not None
        self.auto_evict = config.get("auto_evict", True)
        self.session_radix = bool(config.get("session_radix_cache", False))
        self.is_eagle = bool(config.get("is_eagle", False)) and not self.has_mamba  # bigram keys, as its tree core
        self.core_name = core
        self.config = config
        self._build(config, core, max_requests, max_context)
        self.matches: dict[str, Any] = {}  # name -> node handle
        self.locks: dict[str, Any] = {}  # name -> TreeLock (released ones kept: a second unlock reaches SGLang)
        self.reqs: dict[str, dict] = {}  # name -> {"req": Req, "spare": slots past the committed length}
        self.retracted: dict[str, dict] = {}  # name -> a retracted request's entry (ops/retraction.py)
        self._rid = 0

    @classmethod
    def for_scenario(cls, scenario, core: str = "python", allow_version: bool = False) -> SGLangSide:
        """The SGLang cache a scenario's [config] describes (its faults and device left
        out: SGLang runs its own code on the CPU), with request rows and context room
        for the scenario's requests."""
        config = {k: v for k, v in scenario.config.items() if k not in ("faults", "device")}
        return cls(config, core, *request_sizes(scenario), allow_version)

    def close(self) -> None:
        """Remove what the side keeps on disk (its storage tier's directory)."""
        if getattr(self, "host", None) is not None:
            self.host.close()

    # ---- build -------------------------------------------------------------------
    def _build(self, config: dict, core: str, max_requests: int, max_context: int) -> None:
        sg, ps = self.sg, self.ps
        torch = sg.torch
        server_args = sg.ServerArgs(model_path="dummy", page_size=ps, enable_session_radix_cache=self.session_radix,
                                    **server_args_fields(config), **server_args_options(config))
        server_args._mamba_cache_chunk_size = max(MAMBA_CHUNK, ps)  # else it reads the model's HF config
        sg.set_global_server_args_for_scheduler(server_args)
        full_ids = list(SHAPE["full_layers"])
        other_ids = [i for i in range(SHAPE["layers"]) if i not in full_ids]
        dtype, heads, dim = torch.bfloat16, SHAPE["heads"], SHAPE["head_dim"]
        self.extra_buffer = extra_buffer = mamba_extra_buffer(config)
        rows = dict(size=max_requests, max_context_len=max_context, device="cpu", enable_memory_saver=False)
        if self.has_mamba:
            with sg.envs.SGLANG_MAMBA_SSM_DTYPE.override("bfloat16"):
                shape = sg.Mamba2StateShape.create(tp_world_size=1, **MAMBA_SHAPE)
                params = sg.Mamba2CacheParams(shape=shape, layers=other_ids)
            self.r2t = sg.HybridReqToTokenPool(
                **rows, mamba_size=config["mamba_size"], mamba_spec_state_size=max_requests, cache_params=params,
                mamba_layer_ids=other_ids, enable_mamba_extra_buffer=extra_buffer, speculative_num_draft_tokens=3,
            )
        else:
            self.r2t = sg.ReqToTokenPool(**rows)
        kv = dict(page_size=ps, dtype=dtype, head_num=heads, head_dim=dim, device="cpu")
        if self.has_swa:
            pool = sg.SWAKVPool(size=self.kv_size, size_swa=self.swa_size, swa_attention_layer_ids=other_ids,
                                full_attention_layer_ids=full_ids, **kv)
            self.alloc = sg.SWATokenToKVPoolAllocator(size=self.kv_size, size_swa=self.swa_size, page_size=ps,
                                                      dtype=dtype, device="cpu", kvcache=pool, need_sort=False)
        else:
            if self.has_mamba:
                pool = sg.HybridLinearKVPool(size=self.kv_size, full_attention_layer_ids=full_ids,
                                             enable_memory_saver=False, mamba_pool=self.r2t.mamba_pool, **kv)
            else:
                pool = sg.MHATokenToKVPool(size=self.kv_size, layer_num=SHAPE["layers"], enable_memory_saver=False, **kv)
            # as production configures it: the token allocator at page 1, the paged one above
            if ps == 1:
                self.alloc = sg.TokenToKVPoolAllocator(size=self.kv_size, dtype=dtype, device="cpu", kvcache=pool,
                                                       need_sort=False)
            else:
                self.alloc = sg.PagedTokenToKVPoolAllocator(size=self.kv_size, page_size=ps, dtype=dtype,
                                                            device="cpu", kvcache=pool, need_sort=False)
        params = sg.CacheInitParams(
            req_to_token_pool=self.r2t, token_to_kv_pool_allocator=self.alloc, page_size=ps, disable=False,
            sliding_window_size=config.get("sliding_window") if self.has_swa else None,
            tree_components=tuple(self.types.values()), enable_mamba_extra_buffer=extra_buffer,
            tree_core_backend=core, enable_session_radix_cache=self.session_radix, **init_params_options(config),
        )
        self.cache = sg.UnifiedRadixCache(params=params)
        self.sessions = sg.SessionController(self.cache)  # the scheduler's session bookkeeping (ops/sessions.py)
        self.host = HostTier(self, server_args, params, config) if config.get("hicache") else None
        self.core = self.cache.tree_core
        self.inspectable = type(self.core).__name__ != "RustUnifiedTreeCore"

    # ---- ops: each op's ``run_sglang`` (workbench/model/ops) makes the calls ------------------
    def run(self, op: str, fields: dict) -> Optional[dict]:
        spec = ops.get(op)
        if spec is None or spec.run_sglang is None:
            raise BridgeError(f"the bridge cannot run op {op!r} on SGLang")
        try:
            with option_env(self.sg, self.config):
                return spec.run_sglang(self, fields)
        finally:
            if self.host is not None:  # the host tier's transfers, acknowledged as SGLang's scheduler polls
                self.host.after_op()

    def session_leaf_counts(self, sid: str) -> dict[str, int]:
        """Per component, the frontier nodes a session's references hang from."""
        return {name: len(self.cache.components[kind]._session_leaves.get(sid, ())) for name, kind in self.types.items()}

    @staticmethod
    def refused(message: str) -> SGLangOpError:
        return SGLangOpError(message)

    def lock_named(self, name: str):
        lock = self.locks.get(name)
        if lock is None:
            raise SGLangOpError(f"unknown lock name {name!r}")
        return lock

    def node_depth(self, node_id) -> Optional[int]:
        """Tokens (bigram keys: pairs) from the root to a node's end; None for no node,
        or where the tree core cannot show its nodes (the Rust one)."""
        if node_id is None or not self.inspectable:
            return None
        node, depth = self.core.node_by_id(node_id), 0
        while node.parent is not None:
            depth, node = depth + len(node.key), node.parent
        return depth

    def request_named(self, name: str) -> dict:
        entry = self.reqs.get(name)
        if entry is None:
            raise SGLangOpError(f"unknown or finished request {name!r}")
        return entry

    def next_rid(self) -> str:
        self._rid += 1
        return f"bridge-{self._rid}"

    def abandon(self, req) -> None:
        """What the scheduler gives back when it cannot admit a request (sglang#16067's fix)."""
        if req.lock is not None:
            self.cache.unlock(req.lock)
            req.lock = None
        if req.kv.holds_kv:
            self.r2t.free(req)
        if self.has_mamba and req.kv.holds_mamba:  # the copy-on-write slot the match handed out
            self.r2t.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
            req.kv.mamba_pool_idx = None

    def track_checkpoint(self, req) -> None:
        """What the model's forward does with the extra buffer: track the state at the
        last grid boundary the request's tokens passed, in the other ping-pong slot
        (ours does the same in MambaComponent.advance_request)."""
        if not (self.has_mamba and self.extra_buffer):
            return
        chunk = max(MAMBA_CHUNK, self.ps)
        grid = chunk * self.ps // math.gcd(chunk, self.ps)
        kv = req.kv
        tracked = kv.kv_committed_len - kv.kv_committed_len % grid
        if tracked and tracked > (kv.mamba_last_track_seqlen or 0):
            track_idx = kv.mamba_next_track_idx
            kv.mamba_prev_track_seqlen, kv.mamba_last_track_seqlen = kv.mamba_last_track_seqlen, tracked
            kv.mamba_last_track_idx = track_idx
            kv.mamba_next_track_idx = self.r2t.get_mamba_ping_pong_other_idx(track_idx)

    # ---- slots ---------------------------------------------------------------------
    def key(self, tokens: list[int], extra_key: Optional[str], cache_salt: Optional[str] = None):
        return self.sg.RadixKey(array("q", tokens), extra_key=extra_key, cache_salt=cache_salt)

    def available(self) -> dict[str, int]:
        if self.has_swa:
            out = {BASE: int(self.alloc.full_available_size()), self.window: int(self.alloc.swa_available_size())}
        else:
            out = {BASE: int(self.alloc.available_size())}
        if self.has_mamba:
            out[self.states] = int(self.r2t.mamba_allocator.available_size())
        return out

    def _shortfalls(self, n: int, states: int = 0) -> dict[str, int]:
        need = ceil_align(n, self.ps)
        available = self.available()
        short = {name: need - n for name, n in available.items() if name != self.states}
        if states:
            short[self.states] = states - available[self.states]
        return short

    def check_capacity(self, n: int, states: int = 0) -> None:
        """Refuse before anything changes what eviction cannot cover (our check_capacity:
        SGLang's scheduler checks the same before it admits)."""
        for name, short in self._shortfalls(n, states).items():
            reclaimable = int(self.core.component_evictable_size(self.types[name])) if self.auto_evict else 0
            if short > reclaimable:
                raise SGLangOpError(f"{name} pool exhausted: {short} more slot(s) needed, {reclaimable} evictable")

    def evict_short(self, full: int = 0, swa: int = 0, mamba: int = 0) -> None:
        if not self.auto_evict:
            raise SGLangOpError(f"out of slots (available {self.available()}) and auto_evict is off")
        self.cache.evict_for_alloc(self.sg.EvictParams(num_tokens=full, swa_num_tokens=swa, mamba_num=mamba))

    def alloc_kv(self, n: int):
        """``n`` fresh slots on whole pages (evicting the shortfall first, as our
        alloc_kv does), and the page-rounding slots past them."""
        need = ceil_align(n, self.ps)
        short = self._shortfalls(n)
        if any(value > 0 for value in short.values()):
            self.check_capacity(n)
            self.evict_short(full=max(0, short[BASE]), swa=max(0, short.get(self.window, 0)))
            if any(value > 0 for value in self._shortfalls(n).values()):
                raise SGLangOpError(f"out of slots after eviction: need {need}, available {self.available()}")
        if self.has_swa and self.ps > 1:  # its alloc() is page-1 only: pair whole pages by hand
            full = self.alloc.full_attn_allocator.alloc(need)
            swa = self.alloc.swa_attn_allocator.alloc(need)
            self.alloc.set_full_to_swa_mapping(full, swa)
            slots = full
        else:
            slots = self.alloc.alloc(need)
        if slots is None:
            raise SGLangOpError(f"SGLang's allocator returned None for {need} slots")
        slots = slots.to(self.sg.torch.int64)
        return slots[:n], slots[n:]

    def alloc_mamba(self):
        if self.r2t.mamba_allocator.available_size() < 1:
            self.evict_short(mamba=1)
        slot = self.r2t.mamba_allocator.alloc(1)
        if slot is None:
            raise SGLangOpError("out of Mamba slots after eviction")
        return slot

    def take_slots(self, entry: dict, n: int):
        """A request's next ``n`` slots: the rest of its last page first."""
        spare = entry["spare"]
        if spare.numel() >= n:
            entry["spare"] = spare[n:]
            return spare[:n]
        fresh, extra = self.alloc_kv(n - spare.numel())  # a refusal leaves the tail as it was
        entry["spare"] = extra
        return self.sg.torch.cat([spare, fresh])

    # ---- state ---------------------------------------------------------------------
    def state(self) -> CanonicalState:
        """The cache's state in the canonical form; with the Rust tree core (no node
        inspection in its binding) only the pools."""
        core = self.core
        pools = {}
        available = self.available()
        for name, kind in self.types.items():
            pools[name] = (available[name], int(core.component_evictable_size(kind)), int(core.component_protected_size(kind)))
        host_pools = self.host.host_pools() if self.host is not None else {}
        if not self.inspectable:
            return CanonicalState(None, None, {}, pools, host_pools)
        nodes: dict[tuple, NodeState] = {}
        ident_of: dict[int, tuple] = {}
        root = core.root_node
        stack = [(root, ())]
        while stack:
            node, path = stack.pop()
            if node is not root:
                key = node.key
                raw = tuple(key.raw_token_ids())
                # a bigram key's first token is its parent's last (the pair across them)
                path = path + (raw[1:] if key.is_bigram and path else raw)
                ident = (key.extra_key if key.cache_salt is None else (key.extra_key, key.cache_salt), path)
                ident_of[id(node)] = ident
                comps = {}
                for name, kind in self.types.items():
                    data = node.component_data[kind]
                    comps[name] = (None if data.value is None else int(len(data.value)), int(data.lock_ref))
                host = self.host.node_host_lens(node) if self.host is not None else {}
                tagged = {name: (int(node.component_data[kind].session_ref),
                                 tuple(sorted(node.component_data[kind].session_ids or ())))
                          for name, kind in self.types.items()}
                tagged = {name: t for name, t in tagged.items() if t != (0, ())}
                nodes[ident] = NodeState(len(key), node.id, comps, host, tagged,
                                         (int(node.hit_count), int(node.priority)))
            stack.extend((child, path) for child in node.children.values())
        leaves = frozenset(ident_of[id(n)] for n in core.evictable_device_leaves if id(n) in ident_of)
        evict_order = tuple(ident_of[id(n)] for n in self._eviction_order(core) if id(n) in ident_of)
        lru = {}
        for name, kind in self.types.items():
            if name == BASE:
                continue  # SGLang keeps no Full list: a heap over access times
            lru[name] = self._lru_order(core.lru_lists[kind], ident_of)
            if core.enable_hicache:  # the host tier's, its host-locked copies left out as ours leaves them out
                lru[f"{name}_host"] = self._lru_order(core.host_lru_lists[kind], ident_of,
                                                      lambda x: x.component_data[kind].host_lock_ref == 0)
        return CanonicalState(nodes, leaves, lru, pools, host_pools, self._sessions_state(ident_of), evict_order)

    @staticmethod
    def _lru_order(lst, ident_of: dict, keep=lambda node: True) -> tuple:
        """An LRU list's members, most recent first (its sentinels left out)."""
        pt, order, x = lst._pt, [], lst.head.lru_next[lst._pt]
        while x is not None and x is not lst.tail:
            if x is not lst.mid and x is not lst.cursor and keep(x):
                order.append(ident_of.get(id(x), ("unreachable", x.id)))
            x = x.lru_next[pt]
        return tuple(order)

    def _eviction_order(self, core) -> list:
        """Full's evictable leaves in the order its eviction walk pops them: its heap's
        key (the policy's, behind the session refs with the session radix cache), ties
        by access time (the node's own order)."""
        policy = core.eviction_strategy.get_priority
        full = self.sg.ComponentType.FULL

        def key(node):
            if not self.session_radix:
                return policy(node), node.last_access_time
            ref = node.component_data[full].session_ref
            return (ref > 0, ref, policy(node)), node.last_access_time
        return sorted(core.evictable_device_leaves, key=key)

    def _sessions_state(self, ident_of: dict) -> dict:
        """The session bookkeeping in canonical form (canonical.py): parts left out while empty."""
        refs, slots = self.cache.session_refs, self.cache.session.slots
        leaves = tuple(sorted(((sid, name, ident_of[id(node)]) for name, kind in self.types.items()
                               for sid, nodes in self.cache.components[kind]._session_leaves.items() for node in nodes),
                              key=leaf_order))
        controller = tuple(sorted((sid, bool(s.streaming), bool(s._inflight), bool(s.close_on_finish))
                                  for sid, s in self.sessions.sessions.items()))
        streaming = tuple(sorted(
            (sid, bool(slot.kv.holds_kv), int(slot.kv.cache_protected_len), int(slot.kv.kv_committed_len),
             int(slot.kv.kv_allocated_len), bool(slot.publishes_prompt),
             None if slot.lock is None else ident_of.get(id(self.core.node_by_id(slot.lock.node)), "root"))
            for sid, slot in slots.items()))
        parts = {"generations": tuple(sorted(refs._session_generations.items())),
                 "closed": tuple(refs._closed_session_ids), "leaves": leaves, "controller": controller,
                 "slots": streaming}
        return {part: value for part, value in parts.items() if value}


def request_sizes(scenario) -> tuple[int, int]:
    """Request rows and the longest context SGLang's req_to_token pool must hold: the
    ops that start, extend and end requests say so in their fields. A release with a
    stop is not counted as an end: ours refuses a stop outside what the request holds
    without sending it to SGLang, where the request then runs on in its row."""
    live: dict[str, int] = {}
    most_live, longest = 1, 0
    for step in scenario.steps:
        spec = ops.get(step.op)
        for field in spec.fields if spec is not None else ():
            name = step.fields.get(field.name)
            tokens = spec.token_field
            grown = len(step.fields.get(tokens.name, ())) if tokens is not None else 0
            if field.defines == "requests":
                live[name] = grown
            elif field.uses == "requests" and field.ends and "stop_at" not in step.fields:
                live.pop(name, None)  # (a stop ours finds out of range refuses the release: the row stays)
            elif field.uses == "requests" and name in live:
                live[name] += grown
        most_live = max(most_live, len(live))
        longest = max([longest, *live.values()])
    page = scenario.config.get("page_size", 1)
    return most_live + 2, max(512, longest + 2 * page)
