#!/usr/bin/env python3
"""Differential harness (development only): replay an SGLang-oracle JSONL op stream
against our ``cache`` package and compare, op by op, with what the real SGLang 0.5.23
cache answered.

The oracle (``/work/shared/oracle/sgl_oracle.py``, see its README) drives the real
``UnifiedRadixCache``; this script mirrors what that harness does for each op with our
API, builds an answer of the same shape, and diffs the comparable fields:

  insert      prefix_len, last_node_depth, tail_freed, auto_evict.{full,swa},
              swa_out_of_window_freed
  match       prefix_len, last_node_depth, best_match_depth, full_kv_hit_length,
              host_hit_length, swa_host_hit_length
  lock        node_depth, delta            unlock   ok / error
  release_swa swa_released                 evict    full, swa
  sizes/dump  sizes.{full,swa}.{evictable,protected}, available.{full,swa}
  dump        nodes (pre-order DFS, children sorted by (extra_key, key tokens)):
              parent, key, full.len, full.lock, swa.len, swa.lock, swa boundary
              presence; evictable_leaves and lru.swa (MRU -> LRU) as dump indices;
              reqs (cache_protected_len, kv_committed_len, last_node_depth,
              swa_evicted_seqlen per handle)
  req_*       prefix_len, cache_protected_len, kv_committed_len, last_node_depth,
              swa_evicted_seqlen, available; req_release_swa swa_released
  any op      error vs success (messages differ by design, only the fact is compared)

"soft" fields are reported apart and do not fail the run: hit_count, the
full_access_order of a dump (ties between equal access times break by node id, and
ids differ) and the per-op ``sanity`` verdict vs our ``check_invariants``.

Our allocator is page-granular (every allocation is whole pages) while the oracle's
is token-granular at every page size (as upstream's test fixture), so ``available``
and an allocation's eviction shortfall legitimately differ while a request holds a
partial page, or an insert key is not page aligned. Those differences are classified
``page`` (explained) when the gap equals the partial-page slack, else ``hard``. When a
page-rounded allocation makes the two sides evict different amounts (or fail on one
side only), the trees legitimately part ways: the report names that line and counts
every later difference as ``page`` too. Page-aligned request token counts avoid it.

FULL-only and FULL+SWA configs (``"components": ["full", "swa"]`` with
``sliding_window``, ``swa_kv_size``; see oracle_swa.py for the SWA ops) are supported;
Mamba configs are refused (fatal). The oracle's SWA allocator is paged at page_size > 1,
like ours, so SWA configs expect no page slack on either pool. Mamba-specific ops
(free_kept, cow_mamba), SWA ops on a FULL-only config, and ops this cache cannot
express (a node given by raw SGLang id, ``checkpoint up_to``) are reported as skipped.

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
  .venv/bin/python tools/oracle_diff.py --gen f4 7 250 --densify
  .venv/bin/python tools/oracle_diff.py --gen s4 3 250 --densify     (FULL+SWA: s1 s4 s42)
      adds a dump after every op before running the oracle, so the tree shape,
      locks, sizes and leaves are compared after every op, not only at dumps
Options: -v prints every op with both answers; --json prints a machine-readable
report; --max-show N limits the divergences printed per file (default 20);
--strict makes soft differences fail too; --hide-soft lists only hard and page ones;
--emulate NAME (swa_leaf_hit_count; repeatable) makes our side mimic a
known SGLang behaviour ours lacks, to see past that divergence (diagnostic only, see
oracle_swa.py). "line" in a report is the op's line in
its file (1-based, comments counted).
Exit status: 0 when no hard divergence, 1 otherwise, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oracle_adapter import (  # noqa: E402
    ORACLE_DIR,
    HarnessError,
    SkipOp,
    _clean,
    _err,
    read_jsonl,
    read_ops,
    make_ours,
    run_oracle,
)
from oracle_swa import compare_lru, compare_reqs, compare_swa_dump_nodes  # noqa: E402



# ---------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------
_REQ = ["cache_protected_len", "kv_committed_len", "last_node_depth", "swa_evicted_seqlen"]
HARD_FIELDS = {
    "insert": ["prefix_len", "last_node_depth", "tail_freed", "swa_out_of_window_freed"],
    "match": ["prefix_len", "last_node_depth", "best_match_depth", "full_kv_hit_length", "host_hit_length",
              "swa_host_hit_length"],
    "lock": ["node_depth", "delta"],
    "unlock": ["ok"],
    "release_swa": ["ok", "swa_released"],
    "evict": ["full", "swa"],
    "req_open": ["prefix_len", *_REQ],
    "req_extend": _REQ,
    "req_evict_swa": _REQ,
    "req_checkpoint": _REQ,
    "req_release_swa": ["swa_released"],
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


def compare_op(line: int, op: dict, exp: dict, got: dict, slack: int, diffs: list[Diff], ps: int,
               swa: bool = False) -> None:
    name = op.get("op")
    add = lambda kind, field, a, b, note="": diffs.append(Diff(line, op, kind, field, a, b, note))  # noqa: E731
    e_err, g_err = "error" in exp, "error" in got
    if e_err or g_err:
        if e_err != g_err:
            text = str(exp.get("error")) + str(got.get("error"))
            if ps > 1 and slack and ("out of slots" in text or "exhausted" in text):
                add("page", "error", exp.get("error"), got.get("error"),
                    f"page-rounded allocation with {slack} slot(s) of partly-used request pages")
            else:
                add("hard", "error", exp.get("error"), got.get("error"))
        return
    for field in HARD_FIELDS.get(name, []):
        if exp.get(field) != got.get(field):
            add("hard", field, exp.get(field), got.get(field))
    if "auto_evict" in exp or "auto_evict" in got:
        for pool in ("full", "swa"):
            a = (exp.get("auto_evict") or {}).get(pool, 0)
            b = (got.get("auto_evict") or {}).get(pool, 0)
            if a != b:
                unaligned = name != "insert" or len(op.get("key", [])) % ps != 0
                # only the FULL-only oracle allocates token-granular (slack is 0 for SWA)
                kind = "page" if ps > 1 and pool == "full" and (slack or unaligned) and not swa else "hard"
                add(kind, f"auto_evict.{pool}", a, b, "page-rounded shortfall" if kind == "page" else "")
    if "_verify_match" in got:
        add("hard", "our verify_match", None, got["_verify_match"])
    if "available" in exp and "available" in got:
        compare_available(exp["available"], got["available"], slack, add)
    if "sizes" in exp:
        for pool in exp["sizes"]:
            for part in ("evictable", "protected"):
                a = exp["sizes"][pool][part]
                b = ((got.get("sizes") or {}).get(pool) or {}).get(part)
                if a != b:
                    add("hard", f"sizes.{pool}.{part}", a, b)
    if name == "dump":
        compare_dump(exp, got, add)
    if "sanity" in exp and "sanity" in got and name != "dump":
        if exp["sanity"].get("ok") != got["sanity"].get("ok"):
            add("soft", "sanity", exp["sanity"], got["sanity"])
    if name == "dump" and exp.get("sanity", {}).get("ok") != got.get("sanity", {}).get("ok"):
        add("soft", "sanity", exp.get("sanity"), got.get("sanity"))


def compare_available(exp_av: dict, got_av: dict, slack: int, add) -> None:
    for pool in exp_av:
        a, b = exp_av.get(pool), got_av.get(pool)
        if a == b:
            continue
        if pool == "full" and slack and a - b == slack:
            add("page", "available.full", a, b, f"explained: {slack} slot(s) of partly-used request pages")
        else:
            add("hard", f"available.{pool}", a, b, f"partial-page slack {slack}" if slack else "")


def compare_dump(exp: dict, got: dict, add) -> None:
    compare_reqs(exp, got, add)
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
        compare_swa_dump_nodes(e, g, add)
        if e.get("hit_count") != g.get("hit_count"):
            add("soft", f"dump.node[{e['i']}].hit_count", e.get("hit_count"), g.get("hit_count"),
                f"key {e['key']}")
    if len(en) == len(gn) and all(e["key"] == g["key"] for e, g in zip(en, gn)):
        if exp.get("evictable_leaves") != got.get("evictable_leaves"):
            add("hard", "dump.evictable_leaves", exp.get("evictable_leaves"), got.get("evictable_leaves"))
        compare_lru(exp, got, add)
        if exp.get("full_access_order") != got.get("full_access_order"):
            add("soft", "dump.full_access_order", exp.get("full_access_order"), got.get("full_access_order"))


def replay(ops: list[dict], expected: list[dict], verbose: bool = False, emulate: frozenset = frozenset()) -> dict:
    """Run ``ops`` (config first) on our cache, compare with ``expected``."""
    report = {"diffs": [], "skipped": [], "ops": len(ops) - 1, "compared": 0, "config": ops[0]}
    if not expected or "error" in expected[0]:
        report["fatal"] = f"oracle config line failed: {expected[:1]}"
        return report
    if len(expected) != len(ops):
        report["fatal"] = f"{len(ops)} input lines but {len(expected)} oracle answers"
        return report
    if isinstance(ops[0], dict):
        ops[0] = _clean(ops[0])
    try:
        ours = make_ours(ops[0], emulate)
    except HarnessError as exc:
        report["fatal"] = str(exc)
        return report
    diffs: list[Diff] = []
    desync: Optional[int] = None
    for index, (op, exp) in enumerate(zip(ops[1:], expected[1:]), start=2):
        line = op.pop("_line", index) if isinstance(op, dict) else index
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
        compare_op(line, op, exp, got, ours.page_slack(), diffs, ours.ps, ours.has_swa)
        if desync is None and any(d.kind == "page" and d.field in ("auto_evict.full", "error")
                                  for d in diffs[before:]):
            desync = line
            report["desync_line"] = line
        if desync is not None:
            # after a page-rounded eviction (or allocation failure) the trees
            # legitimately differ: keep reporting, but as a consequence of that line
            for d in diffs[before:]:
                if d.kind == "hard":
                    d.kind, d.note = "page", f"desynced by the page-rounded allocation at line {desync}"
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


def print_report(name: str, report: dict, max_show: int, hide_soft: bool = False) -> bool:
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
    if "desync_line" in report:
        print(f" note: a page-rounded allocation at line {report['desync_line']} desynchronised the trees; "
              "later differences are counted as page-granularity")
    for label, group in (("hard", hard), ("page-granularity", page), ("soft", soft)):
        if group and not (hide_soft and label == "soft"):
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
    ap.add_argument("--densify", action="store_true",
                    help="with --run-oracle/--gen: add a dump after every op, so tree state is compared op by op")
    ap.add_argument("--emulate", action="append", default=[], metavar="NAME",
                    help="diagnostic: our side mimics a known SGLang behaviour (swa_leaf_hit_count), "
                         "to see past that divergence; see oracle_swa.py")
    ap.add_argument("--hide-soft", action="store_true", help="do not list soft differences (still counted)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--strict", action="store_true", help="soft differences (hit_count, access order, sanity) fail too")
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
        if args.densify:
            if exp is not None:
                print("--densify needs --run-oracle or --gen", file=sys.stderr)
                return 2
            dense = [_clean(ops[0])]
            for op in ops[1:]:
                op = _clean(op)
                dense += [op] if op.get("op") == "dump" else [op, {"op": "dump"}]
            path = Path(tempfile.mkstemp(suffix=".jsonl", prefix="oracle_dense_")[1])
            path.write_text("".join(json.dumps(o) + "\n" for o in dense))
            ops = read_ops(path)
            name += f" (densified: {path})"
        if exp is None:
            exp = run_oracle(path)
            if args.save_oracle and len(jobs) == 1:
                Path(args.save_oracle).write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in exp))
        report = replay(ops, exp, verbose=args.verbose, emulate=frozenset(args.emulate))
        if args.emulate:
            name += f" [emulating {','.join(args.emulate)}]"
        if args.strict:
            for d in report["diffs"]:
                if d.kind == "soft":
                    d.kind = "hard"
        if args.json:
            results.append({"name": name, **{k: v for k, v in report.items() if k != "diffs"},
                            "diffs": [d.as_dict() for d in report["diffs"]]})
            ok &= "fatal" not in report and not any(d.kind == "hard" for d in report["diffs"])
        else:
            ok &= print_report(name, report, args.max_show, args.hide_soft)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
        sys.exit(1)
