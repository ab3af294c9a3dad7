"""The oracle's op semantics on our cache (development only; see oracle_diff.py).

``Ours`` mirrors what /work/shared/oracle/sgl_oracle.py does for each op, with our
API, and answers in the oracle's shape so the two can be diffed field by field.
FULL-only and FULL+SWA configs; the SWA-specific ops and answer fields live in
``oracle_swa.py`` (``make_ours`` picks the class for a config).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from cache import (  # noqa: E402
    CacheConfig,
    EvictParams,
    InsertParams,
    RadixKey,
    UnifiedRadixCache,
    check_invariants,
    verify_match,
)

ORACLE_DIR = Path(os.environ.get("SGL_ORACLE_DIR", "/work/shared/oracle"))
ORACLE_PY = os.environ.get("SGL_ORACLE_PYTHON", str(Path.home() / ".venv-sgl/bin/python"))
ORACLE_SCRIPT = os.environ.get("SGL_ORACLE_SCRIPT", str(ORACLE_DIR / "sgl_oracle.py"))

SKIPPED_OPS = {"free_kept"}  # Mamba COW slots: no Mamba here
SWA_OPS = {"release_swa", "req_evict_swa", "req_release_swa"}  # answered by oracle_swa.OursSWA


class HarnessError(Exception):
    """Mirrors the oracle's OracleError: a harness-level failure."""


def _err(exc: BaseException) -> dict:
    msg = str(exc).strip().replace("\n", " | ")
    return {"error": f"{type(exc).__name__}: {msg[:500]}"}


def read_ops(path: Path) -> list[dict]:
    """The op lines the oracle answers (blank and '#' lines skipped, like it does).
    Each op gets its 1-based line number in the file under the key ``_line``."""
    out = []
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op = json.loads(line)
        if isinstance(op, dict):
            op["_line"] = lineno
        out.append(op)
    return out


def _clean(op: dict) -> dict:
    return {k: v for k, v in op.items() if k != "_line"}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_oracle(ops_path: Path) -> list[dict]:
    with ops_path.open() as fin:
        proc = subprocess.run(
            [ORACLE_PY, ORACLE_SCRIPT], stdin=fin, capture_output=True, text=True, check=False
        )
    if proc.returncode != 0 and not proc.stdout.strip():
        raise SystemExit(f"oracle failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------
# Our side: the oracle's op semantics on our cache.
# ---------------------------------------------------------------------------------
def make_ours(cfg: dict, emulate: frozenset = frozenset()) -> "Ours":
    """Our side for an oracle config: ``Ours`` (FULL) or ``OursSWA`` (FULL+SWA);
    ``emulate`` names diagnostic SGLang behaviours (oracle_swa.EMULATIONS)."""
    if "swa" in list(cfg.get("components", ["full"])):
        from oracle_swa import OursSWA

        return OursSWA(cfg, emulate)
    if emulate:
        raise HarnessError(f"emulations {sorted(emulate)} need an swa config")
    return Ours(cfg)


class Ours:
    SUPPORTED = (["full"],)

    def __init__(self, cfg: dict) -> None:
        comps = list(cfg.get("components", ["full"]))
        if comps not in [list(c) for c in self.SUPPORTED]:
            raise HarnessError(f"unsupported components={comps} (supported: {list(self.SUPPORTED)})")
        for unsupported in ("eviction_policy",):
            if cfg.get(unsupported, "lru") != "lru":
                raise HarnessError(f"{unsupported}={cfg[unsupported]!r} is not supported")
        self.comp_names = comps
        self.has_swa = "swa" in comps
        self.ps = int(cfg.get("page_size", 1))
        self.kv_size = int(cfg.get("kv_size", 256))
        self.auto_evict = bool(cfg.get("auto_evict", False))
        self.free_unaligned_tail = bool(cfg.get("free_unaligned_tail", True))
        self.check_each_op = bool(cfg.get("sanity_check_each_op", False))
        self.cache = UnifiedRadixCache(self._cache_config(cfg))
        self.last_match = None
        self.last_insert = None
        self.locks: dict[str, tuple[int, Any]] = {}
        self.reqs: dict[str, Any] = {}
        # prev_prefix_len without reuse_prefix leaks slots, as upstream (per pool)
        self.leaked = {name: 0 for name in comps}
        self._last_auto_evicts: list[tuple[int, int]] = []
        real = self.cache.evict_for_alloc

        def recording_evict_for_alloc(params):  # request-flow allocations evict through this
            res = real(params)
            self._last_auto_evicts.append((res.num_tokens_evicted, res.swa_num_tokens_evicted))
            return res

        self.cache.evict_for_alloc = recording_evict_for_alloc  # instance-level wrapper, harness only

    def _cache_config(self, cfg: dict) -> CacheConfig:
        return CacheConfig(components=("full",), page_size=self.ps, kv_size=self.kv_size, device="cpu",
                           auto_evict=self.auto_evict)

    # -- helpers ------------------------------------------------------------
    def available(self) -> dict:
        return {name: int(self.cache.available_size(name)) for name in self.comp_names}

    def sizes(self) -> dict:
        return {name: {"evictable": int(self.cache.evictable_size(name)),
                       "protected": int(self.cache.protected_size(name))} for name in self.comp_names}

    def _shortfalls(self, n: int) -> dict:
        pool = self.cache.kv_pool
        return {"full": pool.pages_for(n) * self.ps - pool.available_size()}

    def depth(self, node_id: Optional[int]) -> Optional[int]:
        if node_id is None:
            return None
        tree = self.cache.tree
        node = tree.node_by_id(node_id)
        d = 0
        while node.parent is not None:
            d += node.length
            node = node.parent
        return d

    def page_slack(self) -> int:
        """Slots our page-granular pool holds beyond what the token-granular oracle
        holds: the unused part of every live request's last page."""
        pool = self.cache.kv_pool
        slack = 0
        for req in self.cache.requests.values():
            own = req.own_indices
            if own.numel():
                slack += int(pool.page_ids(own).numel()) * self.ps - int(own.numel())
        return slack

    def _alloc(self, n: int, notes: dict) -> torch.Tensor:
        short = self._shortfalls(n)
        if any(v > 0 for v in short.values()):
            if not self.auto_evict:
                raise HarnessError(f"out of slots: need {n}, available {self.available()}")
            res = self.cache.evict_for_alloc(
                EvictParams(num_tokens=max(0, short["full"]), swa_num_tokens=max(0, short.get("swa", 0)))
            )
            self._last_auto_evicts.clear()
            notes["auto_evict"] = {"full": res.num_tokens_evicted, "swa": res.swa_num_tokens_evicted, "mamba": 0}
            if any(v > 0 for v in self._shortfalls(n).values()):
                raise HarnessError(f"out of slots after eviction: need {n}, available {self.available()}")
        return self.cache.alloc_kv(n, evict=False)

    def _key(self, op: dict, field: str = "key") -> RadixKey:
        toks = op.get(field)
        if not isinstance(toks, list):
            raise HarnessError(f"op needs a list field {field!r}")
        return RadixKey([int(t) for t in toks], op.get("extra_key"))

    def _resolve(self, ref) -> int:
        if ref is None or ref in ("last_match", "best_match"):
            if self.last_match is None:
                raise HarnessError("no previous match")
            return self.last_match.last_device_node if ref != "best_match" else self.last_match.best_match_node
        if ref == "last_insert":
            if self.last_insert is None:
                raise HarnessError("no previous insert")
            return self.last_insert.last_device_node
        if ref == "root":
            return self.cache.tree.root.id
        raise SkipOp(f"node reference {ref!r} (raw SGLang ids are not comparable)")

    # -- ops ------------------------------------------------------------------
    def apply(self, op: dict) -> dict:
        name = op.get("op")
        if name in SKIPPED_OPS:
            raise SkipOp(f"op {name!r} is Mamba-specific")
        if name in SWA_OPS and not self.has_swa:
            raise SkipOp(f"op {name!r} needs the swa component")
        fn = getattr(self, f"op_{name}", None) if isinstance(name, str) else None
        if fn is None:
            raise HarnessError(f"unknown op {name!r}")
        return fn(op)

    def op_insert(self, op: dict) -> dict:
        if "swa_evicted_seqlen" in op and not self.has_swa:
            raise SkipOp("swa_evicted_seqlen needs SWA")
        key = self._key(op)
        tokens = key.token_ids
        n = len(key)
        notes: dict = {}
        prev = int(op.get("prev_prefix_len", 0))
        reuse = bool(op.get("reuse_prefix", False)) and prev > 0
        before = self.available()
        if reuse:
            if self.last_match is None:
                raise HarnessError("reuse_prefix needs a previous match")
            path = self.cache.path_device_indices(self.last_match.last_device_node)
            if len(path) < prev:
                raise HarnessError(f"last match path has {len(path)} slots < prev_prefix_len {prev}")
            fresh = self._alloc(n - prev, notes)
            self.cache.write_kv(fresh, tokens, prev)
            values = torch.cat([path[:prev], fresh])
        else:
            values = self._alloc(n, notes)
            self.cache.write_kv(values, tokens)
        params = InsertParams(key, values, prev_prefix_len=prev, priority=int(op.get("priority", 0)))
        swa_freed = self._before_insert(op, params, values, prev if reuse else 0, notes)
        try:
            result = self.cache.insert(params)
        except Exception:
            # the oracle does not reclaim the slots of a failed insert either
            after = self.available()
            for name in self.leaked:
                self.leaked[name] += before[name] - after[name]
            raise
        if not reuse and prev > 0:
            # upstream leaks [0, prev) where the tree already held the tokens: the
            # caller "already uses the tree's slots" (less any SWA side freed above)
            held = min(prev, result.prefix_len)
            for name in self.leaked:
                self.leaked[name] += held - (min(held, swa_freed[1]) - min(held, swa_freed[0])
                                             if name == "swa" else 0)
        self.last_insert = result
        out = {"prefix_len": result.prefix_len, "last_node": result.last_device_node,
               "last_node_depth": self.depth(result.last_device_node)}
        aligned = n // self.ps * self.ps
        tail = values[aligned:]
        if self.free_unaligned_tail and tail.numel() > 0:
            self.cache.free_kv([tail])
            out["tail_freed"] = int(values.numel() - aligned)
        out.update(notes)
        return out

    def _before_insert(self, op: dict, params, values, own_from: int, notes: dict) -> tuple[int, int]:
        """SWA hook (oracle_swa.OursSWA): the request's own out-of-window SWA frees."""
        return (0, 0)

    def op_match(self, op: dict) -> dict:
        if op.get("cow_mamba"):
            raise SkipOp("cow_mamba needs Mamba")
        key = self._key(op)
        m = self.cache.match_prefix(key)
        self.last_match = m
        bad = verify_match(self.cache, key, m)
        out = {
            "prefix_len": int(m.prefix_len),
            "last_node": m.last_device_node,
            "last_node_depth": self.depth(m.last_device_node),
            "best_match_depth": self.depth(m.best_match_node),
            "host_hit_length": int(m.host_hit_length),
            "full_kv_hit_length": int(m.full_kv_hit_length),
        }
        if self.has_swa:
            out["swa_host_hit_length"] = int(m.swa_host_hit_length)
        if bad:
            out["_verify_match"] = [str(v) for v in bad]
        return out

    def op_lock(self, op: dict) -> dict:
        handle = op.get("as")
        if not isinstance(handle, str):
            raise HarnessError("lock needs 'as': handle name")
        if handle in self.locks:
            raise HarnessError(f"handle {handle!r} already held")
        skip = tuple(str(c) for c in op.get("skip", []))
        if "mamba" in skip:
            raise SkipOp("lock skip mamba needs Mamba")
        node = self._resolve(op.get("node", "last_match"))
        res = self.cache.inc_lock_ref(node, skip)
        self.locks[handle] = (node, res)
        return {"node": node, "node_depth": self.depth(node), "delta": res.delta}

    def op_unlock(self, op: dict) -> dict:
        handle = op.get("handle")
        if handle not in self.locks:
            raise HarnessError(f"unknown lock handle {handle!r}")
        node, receipt = self.locks[handle]
        self.cache.dec_lock_ref(node, receipt)
        if not op.get("keep_handle", False):
            self.locks.pop(handle)
        return {"ok": True}

    def op_evict(self, op: dict) -> dict:
        # a pool this tree lacks (mamba; swa for FULL-only) is ignored, as SGLang does
        swa = int(op.get("swa", 0)) if self.has_swa else 0
        params = EvictParams(num_tokens=int(op.get("full", 0)), swa_num_tokens=swa)
        res = self.cache.evict_for_alloc(params) if op.get("for_alloc", False) else self.cache.evict(params)
        self._last_auto_evicts.clear()
        return {"full": res.num_tokens_evicted, "swa": res.swa_num_tokens_evicted, "mamba": 0}

    def op_sanity(self, op: dict) -> dict:
        return {"sanity": self.sanity()}

    def op_sizes(self, op: dict) -> dict:
        return {"sizes": self.sizes(), "available": self.available()}

    def op_dump(self, op: dict) -> dict:
        snap = self.cache.snapshot()
        by_id = {n.id: n for n in snap.nodes}
        nodes, index = [], {}

        def sort_key(nid):
            n = by_id[nid]
            return (n.extra_key or "", list(n.key))

        stack = [(snap.root.id, None)]
        while stack:
            nid, parent_i = stack.pop()
            n = by_id[nid]
            i = len(nodes)
            index[nid] = i
            full = n.components["full"]
            rec = {"i": i, "id": nid, "parent": parent_i, "key": list(n.key), "path_len": len(n.path),
                   "comp": {"full": {"len": full.value_len, "lock": full.lock_ref}}, "hit_count": n.hit_count}
            self._dump_node_extra(n, rec)
            if n.extra_key is not None:
                rec["extra_key"] = n.extra_key
            nodes.append(rec)
            for child in sorted(n.children, key=sort_key, reverse=True):
                stack.append((child, i))
        timed = sorted((n for n in snap.nodes[1:]), key=lambda n: (-n.last_access_time, n.id))
        out = {
            "nodes": nodes,
            "lru": {"full": [], **{name: [index.get(x, f"unreachable:{x}") for x in ids]
                                   for name, ids in snap.lru.items() if name != "full"}},
            "full_access_order": [index[n.id] for n in timed],
            "evictable_leaves": sorted(index[n.id] for n in snap.nodes if n.evictable_leaf),
            "sizes": self.sizes(),
            "available": self.available(),
            "locks_held": sorted(self.locks),
        }
        if self.reqs:
            out["reqs"] = {h: self._req_summary(r) for h, r in sorted(self.reqs.items())}
        out["sanity"] = self.sanity()
        return out

    def _dump_node_extra(self, n, rec: dict) -> None:
        """SWA hook: per-node component fields beyond Full."""

    def sanity(self) -> dict:
        violations = [v for v in check_invariants(self.cache) if not self._explained_leak(v)]
        if not violations:
            return {"ok": True}
        return {"ok": False, "error": "; ".join(map(str, violations))[:1000]}

    def _explained_leak(self, v) -> bool:
        # our own balance check counts the slots upstream's prev_prefix_len semantics leak
        for name, leaked in self.leaked.items():
            if v.name == f"pool.{name}.balance" and leaked:
                return f"(leak of {leaked})" in v.message
        return False

    # -- request ops ------------------------------------------------------------
    def _req_summary(self, req) -> dict:
        return {
            "cache_protected_len": int(req.cache_protected_len),
            "kv_committed_len": int(req.kv_len),
            "last_node": req.last_node,
            "last_node_depth": self.depth(req.last_node) if req.last_node in self.cache.tree.nodes else None,
            "swa_evicted_seqlen": int(req.swa_evicted_seqlen),
            "available": self.available(),
        }

    def _req(self, op: dict):
        handle = op.get("req")
        if handle not in self.reqs:
            raise HarnessError(f"unknown request handle {handle!r}")
        return self.reqs[handle]

    def _auto_evict_note(self, notes: dict) -> None:
        if self._last_auto_evicts:
            notes["auto_evict"] = {"full": sum(f for f, _ in self._last_auto_evicts),
                                   "swa": sum(s for _, s in self._last_auto_evicts), "mamba": 0}
            self._last_auto_evicts.clear()

    def op_req_open(self, op: dict) -> dict:
        handle = op.get("as")
        if not isinstance(handle, str) or handle in self.reqs:
            raise HarnessError(f"req_open needs a new 'as' handle, got {handle!r}")
        tokens = op.get("tokens")
        if not isinstance(tokens, list) or not tokens:
            raise HarnessError("req_open needs a non-empty 'tokens' list")
        self._last_auto_evicts.clear()
        req = self.cache.new_request([int(t) for t in tokens], rid=handle, extra_key=op.get("extra_key"))
        self.reqs[handle] = req
        notes: dict = {}
        self._auto_evict_note(notes)
        return {"prefix_len": int(req.cache_protected_len), **self._req_summary(req), **notes}

    def op_req_extend(self, op: dict) -> dict:
        req = self._req(op)
        self._last_auto_evicts.clear()
        self.cache.extend_request(req, [int(t) for t in op.get("tokens", [])])
        notes: dict = {}
        self._auto_evict_note(notes)
        if op.get("slide_window", False):
            self._slide_window(req)
        return {**self._req_summary(req), **notes}

    def _slide_window(self, req) -> None:
        """SWA hook: the oracle ignores slide_window without SWA."""

    def op_req_checkpoint(self, op: dict) -> dict:
        req = self._req(op)
        if "up_to" in op and int(op["up_to"]) != req.kv_len:
            raise SkipOp("checkpoint up_to < committed length is not expressible")
        self.cache.checkpoint(req)
        return self._req_summary(req)

    def op_req_finish(self, op: dict) -> dict:
        handle = op.get("req")
        req = self._req(op)
        self.cache.release_kv_cache(req, checkpoint=bool(op.get("insert", True)))
        del self.reqs[handle]
        depth = self.depth(req.last_node) if req.last_node in self.cache.tree.nodes else None
        return {"last_node": req.last_node, "last_node_depth": depth, "available": self.available()}


class SkipOp(Exception):
    pass
