#!/usr/bin/env python3
"""Differential harness (development only): replay an SGLang-oracle JSONL op stream
against our ``cache`` package and compare, op by op, with what the real SGLang 0.5.23
cache answered.

The oracle (``/work/shared/oracle/sgl_oracle.py``, see its README) drives the real
``UnifiedRadixCache``; this script mirrors what that harness does for each op with our
API, builds an answer of the same shape, and diffs the comparable fields:

  insert      prefix_len, last_node_depth, tail_freed, auto_evict.full
  match       prefix_len, last_node_depth, best_match_depth, full_kv_hit_length
  lock        node_depth, delta            unlock   ok / error
  evict       full
  sizes/dump  sizes.full.{evictable,protected}, available.full
  dump        nodes (pre-order DFS, children sorted by (extra_key, key tokens)):
              parent, key, full.len, full.lock; evictable_leaves (as dump indices)
  req_*       prefix_len, cache_protected_len, kv_committed_len, last_node_depth,
              available
  any op      error vs success (messages differ by design, only the fact is compared)

"soft" fields are reported apart and do not fail the run: hit_count, the
full_access_order of a dump (ties between equal access times break by node id, and
ids differ) and the per-op ``sanity`` verdict vs our ``check_invariants``.

Our allocator is page-granular (every allocation is whole pages) while the oracle's
is token-granular at every page size (as upstream's test fixture), so ``available``
and an allocation's eviction shortfall legitimately differ while a request holds a
partial page, or an insert key is not page aligned. Those differences are classified
``page`` (explained) when the gap equals the partial-page slack, else ``hard``.

Only FULL-only configs (``"components": ["full"]``) are supported for now. SWA/Mamba
specific ops (release_swa, req_evict_swa, req_release_swa, free_kept) and ops this
cache cannot express (a node given by raw SGLang id, ``checkpoint up_to``) are
reported as skipped.

Usage (from /work/main, with our venv):
  .venv/bin/python tools/oracle_diff.py OPS.jsonl [EXPECTED.out.jsonl]
      EXPECTED defaults to OPS with .out.jsonl when that exists
  .venv/bin/python tools/oracle_diff.py --run-oracle OPS.jsonl
      runs the real oracle first (~10 s startup; ~/.venv-sgl/bin/python, override
      with SGL_ORACLE_PYTHON / SGL_ORACLE_SCRIPT), and --save-oracle OUT keeps it
  .venv/bin/python tools/oracle_diff.py --gen f1 7 250
      generates gen_random_ops.py f1 seed 7 (250 ops) and runs the oracle on it
  .venv/bin/python tools/oracle_diff.py tools/oracle_cases/*.jsonl
      every .jsonl (not .out.jsonl) given, each against its saved .out.jsonl
Options: -v prints every op with both answers; --json prints a machine-readable
report; --max-show N limits the divergences printed per file (default 20).
Exit status: 0 when no hard divergence, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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

SKIPPED_OPS = {"release_swa", "req_evict_swa", "req_release_swa", "free_kept"}


class HarnessError(Exception):
    """Mirrors the oracle's OracleError: a harness-level failure."""


def _err(exc: BaseException) -> dict:
    msg = str(exc).strip().replace("\n", " | ")
    return {"error": f"{type(exc).__name__}: {msg[:500]}"}


def read_ops(path: Path) -> list[dict]:
    """The op lines the oracle answers (blank and '#' lines skipped, like it does)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        out.append(json.loads(line))
    return out


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
class Ours:
    def __init__(self, cfg: dict) -> None:
        comps = cfg.get("components", ["full"])
        if list(comps) != ["full"]:
            raise HarnessError(f"only FULL-only configs are supported, got components={comps}")
        for unsupported in ("eviction_policy",):
            if cfg.get(unsupported, "lru") != "lru":
                raise HarnessError(f"{unsupported}={cfg[unsupported]!r} is not supported")
        self.ps = int(cfg.get("page_size", 1))
        self.kv_size = int(cfg.get("kv_size", 256))
        self.auto_evict = bool(cfg.get("auto_evict", False))
        self.free_unaligned_tail = bool(cfg.get("free_unaligned_tail", True))
        self.check_each_op = bool(cfg.get("sanity_check_each_op", False))
        self.cache = UnifiedRadixCache(
            CacheConfig(components=("full",), page_size=self.ps, kv_size=self.kv_size, device="cpu",
                        auto_evict=self.auto_evict)
        )
        self.last_match = None
        self.last_insert = None
        self.locks: dict[str, tuple[int, Any]] = {}
        self.reqs: dict[str, Any] = {}
        self.leaked_slots = 0  # prev_prefix_len without reuse_prefix, as upstream
        self._last_auto_evicts: list[int] = []
        real = self.cache.evict_for_alloc

        def recording_evict_for_alloc(params):  # request-flow allocations evict through this
            res = real(params)
            self._last_auto_evicts.append(res.num_tokens_evicted)
            return res

        self.cache.evict_for_alloc = recording_evict_for_alloc  # instance-level wrapper, harness only

    # -- helpers ------------------------------------------------------------
    def available(self) -> dict:
        return {"full": int(self.cache.available_size())}

    def sizes(self) -> dict:
        return {"full": {"evictable": int(self.cache.full_evictable_size()),
                         "protected": int(self.cache.full_protected_size())}}

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
        pool = self.cache.kv_pool
        short = pool.pages_for(n) * self.ps - pool.available_size()
        if short > 0:
            if not self.auto_evict:
                raise HarnessError(f"out of slots: need {n}, available {self.available()}")
            res = self.cache.evict_for_alloc(EvictParams(num_tokens=short))
            self._last_auto_evicts.clear()
            notes["auto_evict"] = {"full": res.num_tokens_evicted, "swa": 0, "mamba": 0}
            if pool.pages_for(n) * self.ps > pool.available_size():
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
            raise SkipOp(f"op {name!r} is SWA/Mamba-specific")
        fn = getattr(self, f"op_{name}", None) if isinstance(name, str) else None
        if fn is None:
            raise HarnessError(f"unknown op {name!r}")
        return fn(op)

    def op_insert(self, op: dict) -> dict:
        if "swa_evicted_seqlen" in op:
            raise SkipOp("swa_evicted_seqlen needs SWA")
        key = self._key(op)
        tokens = key.token_ids
        n = len(key)
        notes: dict = {}
        prev = int(op.get("prev_prefix_len", 0))
        reuse = bool(op.get("reuse_prefix", False)) and prev > 0
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
        result = self.cache.insert(params)
        if not reuse and prev > 0:
            # upstream leaks [0, prev): the caller "already uses the tree's slots"
            self.leaked_slots += min(prev, n - n % self.ps)
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
        if bad:
            out["_verify_match"] = [str(v) for v in bad]
        return out

    def op_lock(self, op: dict) -> dict:
        handle = op.get("as")
        if not isinstance(handle, str):
            raise HarnessError("lock needs 'as': handle name")
        if handle in self.locks:
            raise HarnessError(f"handle {handle!r} already held")
        if op.get("skip"):
            raise SkipOp("lock skip needs SWA/Mamba")
        node = self._resolve(op.get("node", "last_match"))
        res = self.cache.inc_lock_ref(node)
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
        if int(op.get("swa", 0)) or int(op.get("mamba", 0)):
            pass  # no such pools here; SGLang ignores them too for a FULL-only tree
        params = EvictParams(num_tokens=int(op.get("full", 0)))
        res = self.cache.evict_for_alloc(params) if op.get("for_alloc", False) else self.cache.evict(params)
        self._last_auto_evicts.clear()
        return {"full": res.num_tokens_evicted, "swa": 0, "mamba": 0}

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
            if n.extra_key is not None:
                rec["extra_key"] = n.extra_key
            nodes.append(rec)
            for child in sorted(n.children, key=sort_key, reverse=True):
                stack.append((child, i))
        timed = sorted((n for n in snap.nodes[1:]), key=lambda n: (-n.last_access_time, n.id))
        out = {
            "nodes": nodes,
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

    def sanity(self) -> dict:
        violations = [v for v in check_invariants(self.cache) if not self._explained_leak(v)]
        if not violations:
            return {"ok": True}
        return {"ok": False, "error": "; ".join(map(str, violations))[:1000]}

    def _explained_leak(self, v) -> bool:
        # our own balance check counts the slots upstream's prev_prefix_len semantics leak
        if v.name != "pool.full.balance" or not self.leaked_slots:
            return False
        return f"(leak of {self.leaked_slots})" in v.message

    # -- request ops ------------------------------------------------------------
    def _req_summary(self, req) -> dict:
        return {
            "cache_protected_len": int(req.cache_protected_len),
            "kv_committed_len": int(req.kv_len),
            "last_node": req.last_node,
            "last_node_depth": self.depth(req.last_node) if req.last_node in self.cache.tree.nodes else None,
            "available": self.available(),
        }

    def _req(self, op: dict):
        handle = op.get("req")
        if handle not in self.reqs:
            raise HarnessError(f"unknown request handle {handle!r}")
        return self.reqs[handle]

    def _auto_evict_note(self, notes: dict) -> None:
        if self._last_auto_evicts:
            notes["auto_evict"] = {"full": sum(self._last_auto_evicts), "swa": 0, "mamba": 0}
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
        return {**self._req_summary(req), **notes}

    def op_req_checkpoint(self, op: dict) -> dict:
        req = self._req(op)
        if "up_to" in op and int(op["up_to"]) != req.kv_len:
            raise SkipOp("checkpoint up_to < committed length is not expressible")
        self.cache.cache_unfinished_req(req)
        return self._req_summary(req)

    def op_req_finish(self, op: dict) -> dict:
        handle = op.get("req")
        req = self._req(op)
        self.cache.cache_finished_req(req, is_insert=bool(op.get("insert", True)))
        del self.reqs[handle]
        depth = self.depth(req.last_node) if req.last_node in self.cache.tree.nodes else None
        return {"last_node": req.last_node, "last_node_depth": depth, "available": self.available()}


class SkipOp(Exception):
    pass


# ---------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------
HARD_FIELDS = {
    "insert": ["prefix_len", "last_node_depth", "tail_freed"],
    "match": ["prefix_len", "last_node_depth", "best_match_depth", "full_kv_hit_length", "host_hit_length"],
    "lock": ["node_depth", "delta"],
    "unlock": ["ok"],
    "evict": ["full"],
    "req_open": ["prefix_len", "cache_protected_len", "kv_committed_len", "last_node_depth"],
    "req_extend": ["cache_protected_len", "kv_committed_len", "last_node_depth"],
    "req_checkpoint": ["cache_protected_len", "kv_committed_len", "last_node_depth"],
    "req_finish": ["last_node_depth"],
}


class Diff:
    def __init__(self, line: int, op: dict, kind: str, field: str, oracle: Any, ours: Any, note: str = ""):
        self.line, self.op, self.kind, self.field = line, op, kind, field
        self.oracle, self.ours, self.note = oracle, ours, note

    def as_dict(self) -> dict:
        return {"line": self.line, "op": self.op, "kind": self.kind, "field": self.field,
                "oracle": self.oracle, "ours": self.ours, "note": self.note}

    def __str__(self) -> str:
        op = json.dumps(self.op, separators=(",", ":"))
        if len(op) > 160:
            op = op[:157] + "..."
        note = f"  [{self.note}]" if self.note else ""
        return (f"  line {self.line} [{self.kind}] {self.field}: oracle={_short(self.oracle)} "
                f"ours={_short(self.ours)}{note}\n      op: {op}")


def _short(v: Any, limit: int = 300) -> str:
    s = json.dumps(v, separators=(",", ":")) if not isinstance(v, str) else v
    return s if len(s) <= limit else s[: limit - 3] + "..."


def compare_op(line: int, op: dict, exp: dict, got: dict, slack: int, diffs: list[Diff]) -> None:
    name = op.get("op")
    add = lambda kind, field, a, b, note="": diffs.append(Diff(line, op, kind, field, a, b, note))  # noqa: E731
    e_err, g_err = "error" in exp, "error" in got
    if e_err or g_err:
        if e_err != g_err:
            add("hard", "error", exp.get("error"), got.get("error"))
        return
    for field in HARD_FIELDS.get(name, []):
        if exp.get(field) != got.get(field):
            add("hard", field, exp.get(field), got.get(field))
    if "auto_evict" in exp or "auto_evict" in got:
        a = (exp.get("auto_evict") or {}).get("full", 0)
        b = (got.get("auto_evict") or {}).get("full", 0)
        if a != b:
            ps = _PS[0]
            unaligned = name != "insert" or len(op.get("key", [])) % ps != 0
            kind = "page" if ps > 1 and (slack or unaligned) else "hard"
            add(kind, "auto_evict.full", a, b, "page-rounded shortfall" if kind == "page" else "")
    if "_verify_match" in got:
        add("hard", "our verify_match", None, got["_verify_match"])
    if "available" in exp and "available" in got:
        compare_available(exp["available"], got["available"], slack, add)
    if "sizes" in exp:
        for part in ("evictable", "protected"):
            a = exp["sizes"]["full"][part]
            b = got["sizes"]["full"][part]
            if a != b:
                add("hard", f"sizes.full.{part}", a, b)
    if name == "dump":
        compare_dump(exp, got, add)
    if "sanity" in exp and "sanity" in got and name != "dump":
        if exp["sanity"].get("ok") != got["sanity"].get("ok"):
            add("soft", "sanity", exp["sanity"], got["sanity"])
    if name == "dump" and exp.get("sanity", {}).get("ok") != got.get("sanity", {}).get("ok"):
        add("soft", "sanity", exp.get("sanity"), got.get("sanity"))


_PS = [1]


def compare_available(exp_av: dict, got_av: dict, slack: int, add) -> None:
    a, b = exp_av.get("full"), got_av.get("full")
    if a == b:
        return
    if slack and a - b == slack:
        add("page", "available.full", a, b, f"explained: {slack} slot(s) of partly-used request pages")
    else:
        add("hard", "available.full", a, b, f"partial-page slack {slack}" if slack else "")


def compare_dump(exp: dict, got: dict, add) -> None:
    en, gn = exp.get("nodes") or [], got.get("nodes") or []
    if len(en) != len(gn):
        add("hard", "dump.node_count", len(en), len(gn),
            f"oracle keys {[n['key'] for n in en][:12]} / ours {[n['key'] for n in gn][:12]}")
    for e, g in zip(en, gn):
        for field, ev, gv in (
            ("parent", e["parent"], g["parent"]),
            ("key", e["key"], g["key"]),
            ("full.len", e["comp"]["full"]["len"], g["comp"]["full"]["len"]),
            ("full.lock", e["comp"]["full"]["lock"], g["comp"]["full"]["lock"]),
        ):
            if ev != gv:
                add("hard", f"dump.node[{e['i']}].{field}", ev, gv)
        if e.get("hit_count") != g.get("hit_count"):
            add("soft", f"dump.node[{e['i']}].hit_count", e.get("hit_count"), g.get("hit_count"),
                f"key {e['key']}")
    if len(en) == len(gn) and all(e["key"] == g["key"] for e, g in zip(en, gn)):
        if exp.get("evictable_leaves") != got.get("evictable_leaves"):
            add("hard", "dump.evictable_leaves", exp.get("evictable_leaves"), got.get("evictable_leaves"))
        if exp.get("full_access_order") != got.get("full_access_order"):
            add("soft", "dump.full_access_order", exp.get("full_access_order"), got.get("full_access_order"))


def replay(ops: list[dict], expected: list[dict], verbose: bool = False) -> dict:
    """Run ``ops`` (config first) on our cache, compare with ``expected``."""
    report = {"diffs": [], "skipped": [], "ops": len(ops) - 1, "compared": 0, "config": ops[0]}
    if not expected or "error" in expected[0]:
        report["fatal"] = f"oracle config line failed: {expected[:1]}"
        return report
    if len(expected) != len(ops):
        report["fatal"] = f"{len(ops)} input lines but {len(expected)} oracle answers"
        return report
    try:
        ours = Ours(ops[0])
    except HarnessError as exc:
        report["fatal"] = str(exc)
        return report
    _PS[0] = ours.ps
    diffs: list[Diff] = []
    for line, (op, exp) in enumerate(zip(ops[1:], expected[1:]), start=2):
        try:
            got = {"op": op.get("op"), **ours.apply(op)}
            if ours.check_each_op and op.get("op") != "dump":
                got["sanity"] = ours.sanity()
        except SkipOp as exc:
            report["skipped"].append({"line": line, "op": op.get("op"), "why": str(exc)})
            if verbose:
                print(f"{line:4d} SKIP {json.dumps(op)} ({exc})")
            continue
        except Exception as exc:  # noqa: BLE001 - an op error is an answer
            got = {"op": op.get("op"), **_err(exc)}
        report["compared"] += 1
        before = len(diffs)
        compare_op(line, op, exp, got, ours.page_slack(), diffs)
        if verbose:
            mark = " " if len(diffs) == before else "!"
            print(f"{line:4d}{mark} {json.dumps(op, separators=(',', ':'))[:150]}")
            if op.get("op") != "dump" or len(diffs) != before:
                print(f"       oracle: {_short(_strip(exp), 400)}")
                print(f"       ours  : {_short(_strip(got), 400)}")
    report["diffs"] = diffs
    return report


def _strip(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in ("last_node", "node", "op")}


def print_report(name: str, report: dict, max_show: int) -> bool:
    diffs = report["diffs"]
    hard = [d for d in diffs if d.kind == "hard"]
    page = [d for d in diffs if d.kind == "page"]
    soft = [d for d in diffs if d.kind == "soft"]
    if "fatal" in report:
        print(f"{name}: FATAL {report['fatal']}")
        return False
    skipped = report["skipped"]
    verdict = "OK" if not hard else "DIVERGES"
    print(f"{name}: {verdict}  ops={report['ops']} compared={report['compared']} skipped={len(skipped)} "
          f"hard={len(hard)} page={len(page)} soft={len(soft)}")
    for label, group in (("hard", hard), ("page-granularity", page), ("soft", soft)):
        if group:
            print(f" {label}:")
            for d in group[:max_show]:
                print(d)
            if len(group) > max_show:
                print(f"  ... {len(group) - max_show} more")
    if skipped:
        kinds = sorted({f"{s['op']} ({s['why']})" for s in skipped})
        print(f" skipped: {', '.join(kinds)}")
    return not hard


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="OPS.jsonl [EXPECTED.out.jsonl] or several OPS.jsonl")
    ap.add_argument("--run-oracle", action="store_true", help="run the real oracle instead of reading .out.jsonl")
    ap.add_argument("--save-oracle", metavar="OUT", help="with --run-oracle/--gen (one file): keep its answers")
    ap.add_argument("--gen", nargs="+", metavar=("CONFIG", "SEED"), help="gen_random_ops.py CONFIG SEED [N]")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--max-show", type=int, default=20)
    args = ap.parse_args(argv)

    jobs: list[tuple[str, list[dict], Optional[list[dict]], Optional[Path]]] = []
    if args.gen:
        gen = [sys.executable, str(ORACLE_DIR / "gen_random_ops.py"), *args.gen]
        text = subprocess.run(gen, capture_output=True, text=True, check=True).stdout
        tmp = Path(tempfile.mkstemp(suffix=".jsonl", prefix="oracle_ops_")[1])
        tmp.write_text(text)
        jobs.append((f"gen {' '.join(args.gen)} ({tmp})", read_ops(tmp), None, tmp))
        args.run_oracle = True
    files = [Path(f) for f in args.files]
    if len(files) == 2 and files[1].name.endswith(".out.jsonl"):
        jobs.append((str(files[0]), read_ops(files[0]), read_jsonl(files[1]), files[0]))
    else:
        for f in files:
            if f.name.endswith(".out.jsonl"):
                continue
            out = f.with_name(f.name[: -len(".jsonl")] + ".out.jsonl")
            exp = None if args.run_oracle else (read_jsonl(out) if out.exists() else None)
            if exp is None and not args.run_oracle:
                print(f"{f}: no {out.name}; pass --run-oracle", file=sys.stderr)
                return 2
            jobs.append((str(f), read_ops(f), exp, f))
    if not jobs:
        ap.print_usage()
        return 2
    ok = True
    results = []
    for name, ops, exp, path in jobs:
        if exp is None:
            exp = run_oracle(path)
            if args.save_oracle and len(jobs) == 1:
                Path(args.save_oracle).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in exp))
        report = replay(ops, exp, verbose=args.verbose)
        if args.json:
            results.append({"name": name, **{k: v for k, v in report.items() if k != "diffs"},
                            "diffs": [d.as_dict() for d in report["diffs"]]})
            ok &= "fatal" not in report and not any(d.kind == "hard" for d in report["diffs"])
        else:
            ok &= print_report(name, report, args.max_show)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
