"""FULL+SWA configs for the oracle harness (development only; see oracle_diff.py).

``OursSWA`` adds to ``oracle_adapter.Ours`` what /work/shared/oracle/sgl_oracle.py does
for a ``"components": ["full", "swa"]`` config, with our API:

  insert + swa_evicted_seqlen=E   the oracle first frees the SWA side of the request's
                                  own slots in [own_from, min(E, aligned key)) (a real
                                  request already gave them back, free_swa_out_of_window_slots):
                                  ours ``cache.free_swa``; then InsertParams(swa_evicted_seqlen=E)
  release_swa                     SGLang ``cache.release_swa(lock)`` (= dec_swa_lock_only,
                                  a no-op once released): ours ``cache.release_window``
  req_extend + slide_window,      SGLang ``evict_sliding_windows(req, pre_len)`` (pre_len
  req_evict_swa [pre_len]         defaults to seqlen - 1): ours ``cache.slide_window(req)``
                                  (that at seqlen - 1), or with an explicit pre_len the SWA
                                  component's ``slide_window(req, pre_len)``
  req_release_swa                 SGLang ``release_swa_prefix_lock(req)`` (only when the
                                  lock has an SWA boundary, once): ours ``cache.release_window``
                                  on the request's lock

Diagnostic emulation (off by default; ``oracle_diff.py --emulate swa_leaf_hit_count``):
SGLang counts a new leaf's hit after the SWA commit hook split it (window clip / leaf
cap), so the split-off upper parts keep 0; ours counts first and the split copies the
count up. The emulation takes it back off those parts, so long runs can show what else
differs. Never use it for saved cases.

and the SWA answer fields: per-node ``swa.len`` / ``swa.lock`` / ``boundary`` presence,
``lru.swa`` (dump indices, MRU -> LRU), ``sizes.swa``, ``available.swa``, evict ``swa``,
``auto_evict.swa``, ``swa_out_of_window_freed``, ``swa_released``, the requests'
``swa_evicted_seqlen``. The comparison helpers at the bottom are used by oracle_diff.

The SWA allocator of the oracle is paged at page_size > 1 (SWATokenToKVPoolAllocator
over two PagedTokenToKVPoolAllocators, whole pages per allocation, as ours), and
token-granular at page_size 1, so no page-slack is expected on either pool here.
"""

from __future__ import annotations

from typing import Any

from oracle_adapter import HarnessError, Ours

from cache import CacheConfig

EMULATIONS = {"swa_leaf_hit_count"}


class OursSWA(Ours):
    SUPPORTED = (["full", "swa"],)

    def __init__(self, cfg: dict, emulate: frozenset = frozenset()) -> None:
        super().__init__(cfg)
        unknown = set(emulate) - EMULATIONS
        if unknown:
            raise HarnessError(f"unknown emulation(s) {sorted(unknown)}; known: {sorted(EMULATIONS)}")
        self.emulate = set(emulate)
        if "swa_leaf_hit_count" in self.emulate:
            tree = self.cache.tree
            real_insert = tree.insert

            def insert(params, apply_actions):
                first_new = tree._next_id
                res = real_insert(params, apply_actions)
                if res.prefix_len < res.total_len and res.total_len > params.inserted_len:
                    node = tree.nodes[res.last_device_node].parent
                    while node is not tree.root and node.id >= first_new and self.depth(node.id) > res.prefix_len:
                        node.hit_count -= 1  # split off the new leaf after SGLang would count it
                        node = node.parent
                return res

            tree.insert = insert  # instance-level wrapper, harness only

    def _cache_config(self, cfg: dict) -> CacheConfig:
        sw = cfg.get("sliding_window")
        if not sw:
            raise HarnessError("an swa config needs a positive sliding_window")
        self.sliding_window = int(sw)
        self.swa_kv_size = int(cfg.get("swa_kv_size", self.kv_size))
        if not cfg.get("free_out_of_window_swa", True):
            raise HarnessError("free_out_of_window_swa=false is not supported")
        return CacheConfig(components=("full", "swa"), page_size=self.ps, kv_size=self.kv_size,
                           sliding_window=self.sliding_window, swa_kv_size=self.swa_kv_size,
                           device="cpu", auto_evict=self.auto_evict)

    @property
    def swa(self):
        return self.cache.by_name["swa"]

    def page_slack(self) -> int:
        return 0  # the oracle's SWA allocator hands out whole pages too

    def _shortfalls(self, n: int) -> dict:
        out = super()._shortfalls(n)
        out["swa"] = self.swa.peer_shortfall(n)
        return out

    # -- ops --------------------------------------------------------------------
    def _before_insert(self, op: dict, params, values, own_from: int, notes: dict) -> tuple[int, int]:
        if "swa_evicted_seqlen" not in op:
            return (0, 0)
        evicted = int(op["swa_evicted_seqlen"])
        params.swa_evicted_seqlen = evicted
        own_to = min(evicted, len(params.key) // self.ps * self.ps)
        if own_to > own_from:
            self.cache.free_swa(values[own_from:own_to])
            notes["swa_out_of_window_freed"] = own_to - own_from
            return (own_from, own_to)
        return (0, 0)

    def op_release_swa(self, op: dict) -> dict:
        handle = op.get("handle")
        if handle not in self.locks:
            raise HarnessError(f"unknown lock handle {handle!r}")
        node, receipt = self.locks[handle]
        if not receipt.swa_released:  # SGLang's release_swa is a no-op the second time
            self.cache.release_window(node, receipt)
        return {"ok": True, "swa_released": bool(receipt.swa_released)}

    def _slide_window(self, req, pre_len: Any = None) -> None:
        if pre_len is None:
            self.cache.slide_window(req)  # evict_sliding_windows(req, seqlen - 1)
        else:
            self.cache._check_live(req)
            self.swa.slide_window(req, int(pre_len))

    def op_req_evict_swa(self, op: dict) -> dict:
        req = self._req(op)
        self._slide_window(req, op.get("pre_len"))
        return self._req_summary(req)

    def op_req_release_swa(self, op: dict) -> dict:
        req = self._req(op)
        lock = req.lock
        if lock is not None and lock.component_lock_uuids.get("swa") is not None and not lock.swa_released:
            self.cache.release_window(req.last_node, lock)
        return {"swa_released": bool(lock is not None and lock.swa_released)}

    # -- dump ---------------------------------------------------------------------
    def _dump_node_extra(self, n, rec: dict) -> None:
        view = n.components["swa"]
        entry = {"len": view.value_len, "lock": view.lock_ref}
        if view.extras.get("boundary") is not None:
            entry["boundary"] = True
        rec["comp"]["swa"] = entry


# ---------------------------------------------------------------------------------
# Comparison of the SWA fields (oracle_diff.compare_op calls these)
# ---------------------------------------------------------------------------------
def compare_swa_dump_nodes(e: dict, g: dict, add) -> None:
    """Per-node SWA fields of two dump nodes at the same position."""
    es, gs = e["comp"].get("swa"), g["comp"].get("swa")
    if es is None and gs is None:
        return
    es, gs = es or {}, gs or {}
    for field in ("len", "lock"):
        if es.get(field) != gs.get(field):
            add("hard", f"dump.node[{e['i']}].swa.{field}", es.get(field), gs.get(field), f"key {e['key']}")
    if bool(es.get("boundary")) != bool(gs.get("boundary")):
        add("hard", f"dump.node[{e['i']}].swa.boundary", bool(es.get("boundary")), bool(gs.get("boundary")),
            f"key {e['key']}")


def compare_lru(exp: dict, got: dict, add) -> None:
    """Auxiliary LRU lists (dump indices, MRU -> LRU); only meaningful when the two
    trees have the same shape (the caller checks)."""
    elru, glru = exp.get("lru") or {}, got.get("lru") or {}
    for name in sorted(set(elru) | set(glru)):
        if name == "full":
            continue  # always empty in SGLang; full_access_order is compared instead
        if elru.get(name) != glru.get(name):
            add("hard", f"dump.lru.{name}", elru.get(name), glru.get(name))


def compare_reqs(exp: dict, got: dict, add) -> None:
    """The dump's running-request summaries (per handle)."""
    ereqs, greqs = exp.get("reqs") or {}, got.get("reqs") or {}
    if sorted(ereqs) != sorted(greqs):
        add("hard", "dump.reqs", sorted(ereqs), sorted(greqs))
        return
    for h in sorted(ereqs):
        for field in ("cache_protected_len", "kv_committed_len", "last_node_depth", "swa_evicted_seqlen"):
            a, b = ereqs[h].get(field), greqs[h].get(field)
            if a != b:
                add("hard", f"dump.reqs.{h}.{field}", a, b)
