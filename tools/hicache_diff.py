#!/usr/bin/env python3
"""Our host tier against SGLang 0.5.23's real one (development only: needs
../shared/oracle/hicache_oracle.py and its ~/.venv-sgl).

    .venv/bin/python tools/hicache_diff.py [--seeds 20] [--ops 200] [--policies write_through,write_back]

Per seed and policy: a random sequence of inserts, matches, evictions, host evictions
and load-backs over a few shared prompts (Full only, page 1, device 64 tokens, host
33: SGLang's ratio 0.5 plus a page), run on the oracle and on ours; compared op by op — insert prefix_len; match
prefix_len, host_hit_length, full_kv_hit_length; evict's tokens; load_back's loaded
and host_hit_length; evict_host's tokens — and after every op each node's device and
host lengths (a host_dump). Prints one line per run and the first difference.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
ORACLE = REPO.parent / "shared" / "oracle" / "hicache_oracle.py"
PY = Path.home() / ".venv-sgl" / "bin" / "python"

from cache import EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants  # noqa: E402


def sequence(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, 5) for _ in range(rng.randrange(4, 17))] for _ in range(5)]
    ops = []
    for _ in range(n):
        key = rng.choice(prompts) + [rng.randrange(1, 5) for _ in range(rng.randrange(0, 6))]
        kind = rng.choice(["insert", "insert", "match", "evict", "load_back", "evict_host"])
        if kind == "evict":
            ops.append({"op": "evict", "full": rng.randrange(1, 24)})
        elif kind == "evict_host":
            ops.append({"op": "evict_host", "n": rng.randrange(1, 16), "component": "full"})
        else:
            ops.append({"op": kind, "key": key})
        ops.append({"op": "events"})  # complete the transfers (ours completes them when made)
        ops.append({"op": "host_dump"})
    return ops


def run_oracle(config: dict, ops: list[dict]) -> list[dict]:
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write("\n".join(json.dumps(x) for x in [config, *ops]) + "\n")
    out = subprocess.run([str(PY), "-W", "ignore", str(ORACLE)], stdin=open(f.name), capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()][1:]


def run_ours(config: dict, ops: list[dict]) -> list[dict]:
    cache = UnifiedRadixCache(kv_size=config["kv_size"], device="cpu",
                              hicache={"write_policy": config["write_policy"],
                                       # SGLang's host size: the ratio's share plus one page (page 1 here)
                                       "host_kv_size": int(config["kv_size"] * config["hicache_ratio"]) + 1,
                                       "load_back_threshold": config["load_back_threshold"]})
    out = []
    for op in ops:
        try:
            out.append(_apply(cache, op))
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
        bad = check_invariants(cache)
        if bad:
            out[-1]["violations"] = [str(v) for v in bad]
    return out


def _apply(cache: UnifiedRadixCache, op: dict) -> dict:
    kind = op["op"]
    if kind == "insert":
        tokens = op["key"]
        if cache.available_size() < len(tokens):
            raise RuntimeError("out of slots")  # the oracle's own refusal without auto_evict
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        return {"prefix_len": cache.insert(InsertParams(RadixKey(tokens), slots)).prefix_len}
    if kind == "match":
        m = cache.match_prefix(RadixKey(op["key"]))
        return {"prefix_len": m.prefix_len, "host_hit_length": m.host_hit_length,
                "full_kv_hit_length": m.full_kv_hit_length}
    if kind == "evict":
        return {"full": cache.evict(EvictParams(num_tokens=op["full"])).num_tokens_evicted}
    if kind == "evict_host":
        return {"evicted": cache.evict_host(op["n"])}
    if kind == "load_back":
        r = cache.load_back(RadixKey(op["key"]))
        return {"host_hit_length": r.host_hit_length, "loaded": r.loaded}
    if kind == "events":
        return {}
    if kind == "host_dump":
        return {"nodes": _dump(cache)}
    raise ValueError(kind)


def _dump(cache) -> list:
    rows, root = [], cache.tree.root
    for node in cache.tree.nodes.values():
        if node is root:
            continue
        depth, cur = 0, node
        while cur is not root:
            depth += cur.length
            cur = cur.parent
        d = node.data[0]
        rows.append((depth, node.length, node.token_ids[0], None if d.value is None else d.value.shape[0],
                     None if d.host_value is None else d.host_value.shape[0]))
    return sorted(rows, key=_order)


def _order(row) -> tuple:
    return tuple(-1 if v is None else v for v in row)


FIELDS = {"insert": ("prefix_len",), "match": ("prefix_len", "host_hit_length", "full_kv_hit_length"),
          "evict": ("full",), "evict_host": ("evicted",), "load_back": ("host_hit_length", "loaded")}


def compare(ops, theirs, ours) -> str | None:
    for k, (op, t, o) in enumerate(zip(ops, theirs, ours)):
        if "violations" in o:
            return f"op {k} {op['op']}: our invariants: {o['violations'][:2]}"
        if ("error" in t) != ("error" in o):
            return f"op {k} {op['op']}: oracle {t} ours {o}"
        if "error" in t:
            continue
        if op["op"] == "events":
            continue
        if op["op"] == "host_dump":
            rows = sorted(((r["depth"], r["len"], r["tok0"], *r["full"][:2]) for r in t["nodes"]), key=_order)
            if rows != [tuple(r) for r in o["nodes"]]:
                return f"op {k} host_dump: oracle {rows} ours {o['nodes']}"
            continue
        for field in FIELDS[op["op"]]:
            if t.get(field) != o.get(field):
                return f"op {k} {op['op']} {field}: oracle {t.get(field)} ours {o.get(field)} ({op})"
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--ops", type=int, default=150)
    ap.add_argument("--policies", default="write_through,write_through_selective,write_back")
    args = ap.parse_args()
    failed = 0
    for policy in args.policies.split(","):
        for seed in range(args.seeds):
            config = {"components": ["full"], "kv_size": 64, "hicache_ratio": 0.5, "write_policy": policy,
                      "load_back_threshold": 4}
            ops = sequence(seed, args.ops)
            diff = compare(ops, run_oracle(config, ops), run_ours({**config}, ops))
            print(f"{policy:24s} seed {seed:3d}: {diff or 'agrees'}", flush=True)
            failed += diff is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
