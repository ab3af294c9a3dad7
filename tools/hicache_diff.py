#!/usr/bin/env python3
"""Our host tier against SGLang 0.5.23's real one (development only: needs
../shared/oracle/hicache_oracle.py and its ~/.venv-sgl).

    .venv/bin/python tools/hicache_diff.py [--seeds 20] [--ops 200] [--policies write_through,write_back]
                                           [--components full,mamba]

Per seed and policy: a random sequence of inserts, matches, evictions, host evictions
and load-backs over a few shared prompts (page 1, device 64 tokens, host 33: SGLang's
ratio 0.5 plus a page; with Mamba 12 states, 7 on the host), run on the oracle and on
ours; compared op by op — insert prefix_len; match prefix_len, host_hit_length,
full_kv_hit_length (and the Mamba host hit and branching point); evict's units;
load_back's loaded and host_hit_length; evict_host's units — and after every op each
node's device and host lengths per component (a host_dump). Prints one line per run
and the first difference.
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


def sequence(seed: int, n: int, components: list[str]) -> list[dict]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(1, 5) for _ in range(rng.randrange(4, 17))] for _ in range(5)]
    aux = [c for c in components if c != "full"]
    ops = []
    for _ in range(n):
        key = rng.choice(prompts) + [rng.randrange(1, 5) for _ in range(rng.randrange(0, 6))]
        kind = rng.choice(["insert", "insert", "match", "evict", "load_back", "evict_host"])
        if kind == "evict":
            op = {"op": "evict", "full": rng.randrange(1, 24)}
            if aux and rng.random() < 0.5:
                op = {"op": "evict", "full": 0, **{c: rng.randrange(1, 4 if c == "mamba" else 12) for c in aux}}
            ops.append(op)
        elif kind == "evict_host":
            component = rng.choice(["full", *aux])
            ops.append({"op": "evict_host", "n": rng.randrange(1, 4 if component == "mamba" else 16),
                        "component": component})
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
    mamba = "mamba" in config["components"]
    ps = config.get("page_size", 1)

    def host_tokens(size: int) -> int:  # SGLang's host size: the ratio's share, in pages, plus one page
        return (int(size * config["hicache_ratio"]) // ps + 1) * ps

    host = {"write_policy": config["write_policy"], "host_kv_size": host_tokens(config["kv_size"]),
            "load_back_threshold": config["load_back_threshold"]}
    if mamba:
        host["host_mamba_size"] = int(config["mamba_size"] * config["hicache_ratio"]) + 1
    if "swa" in config["components"]:
        host["host_swa_size"] = host_tokens(config["swa_kv_size"])
    cache = UnifiedRadixCache(kv_size=config["kv_size"], page_size=ps, device="cpu", components=tuple(config["components"]),
                              mamba_size=config.get("mamba_size"), sliding_window=config.get("sliding_window"),
                              swa_kv_size=config.get("swa_kv_size"), hicache=host)
    out, handles = [], {}
    for op in ops:
        try:
            out.append(_apply(cache, op, handles))
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
        leaked = handles.get("leaked", 0)  # slots the oracle's harness keeps: not a leak of ours
        bad = [v for v in check_invariants(cache) if not (leaked and v.name == "pool.full.balance"
                                                            and v.message.endswith(f"(leak of {leaked})"))]
        if bad:
            out[-1]["violations"] = [str(v) for v in bad]
    return out


def _apply(cache: UnifiedRadixCache, op: dict, handles: dict) -> dict:
    kind = op["op"]
    if kind == "insert":
        tokens = op["key"]
        mamba = "mamba" in cache.by_name
        if cache.available_size() < len(tokens) or ("swa" in cache.by_name and cache.available_size("swa") < len(tokens)):
            raise RuntimeError("out of slots")  # the oracle's own refusal without auto_evict
        if mamba and cache.available_size("mamba") < 1:
            cache.alloc_kv(len(tokens))  # the oracle's harness takes the KV slots first and keeps them
            handles["leaked"] = handles.get("leaked", 0) + len(tokens)
            raise RuntimeError("out of mamba slots")
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        floor = op.get("swa_evicted_seqlen", 0)
        if floor:  # the oracle's harness: the request already gave back its SWA below the floor
            cache.free_swa(slots[:floor])
        aligned = len(tokens) - len(tokens) % cache.page_size
        state = cache.alloc_mamba_state(tokens[:aligned]) if mamba else None  # the state the cached prefix ends in
        result = cache.insert(InsertParams(RadixKey(tokens), slots, state, swa_evicted_seqlen=floor))
        if aligned < len(tokens):  # the oracle frees the unaligned tail, as release_kv_cache does
            cache.free_kv([slots[aligned:]])
        if state is not None and result.mamba_exist:
            cache.free_mamba_state(state)
        return {"prefix_len": result.prefix_len}
    if kind == "lock":  # on the last match's device end, as the oracle's "last_match"
        handles[op["as"]] = (handles["last_match"], cache.inc_lock_ref(handles["last_match"]))
        return {}
    if kind == "unlock":
        cache.dec_lock_ref(*handles.pop(op["handle"]))
        return {}
    if kind in ("sanity", "sizes"):
        return {}
    if kind == "match":
        m = cache.match_prefix(RadixKey(op["key"]))
        handles["last_match"] = m.last_device_node
        out = {"prefix_len": m.prefix_len, "host_hit_length": m.host_hit_length,
               "full_kv_hit_length": m.full_kv_hit_length}
        if "mamba" in cache.by_name:
            out.update(mamba_host_hit_length=m.mamba_host_hit_length, mamba_branching_seqlen=m.mamba_branching_seqlen)
        if "swa" in cache.by_name:
            out.update(swa_host_hit_length=m.swa_host_hit_length)
        return out
    if kind == "evict":
        r = cache.evict(EvictParams(num_tokens=op.get("full", 0), swa_num_tokens=op.get("swa", 0), mamba_num=op.get("mamba", 0)))
        return {"full": r.num_tokens_evicted, "swa": r.swa_num_tokens_evicted, "mamba": r.mamba_num_evicted}
    if kind == "evict_host":
        return {"evicted": cache.evict_host(op["n"], op["component"])}
    if kind == "load_back":
        r = cache.load_back(RadixKey(op["key"]), op.get("mem_quota"))
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
        row = [depth, node.length, node.token_ids[0]]
        for d in node.data:
            row += [None if d.value is None else d.value.shape[0], None if d.host_value is None else d.host_value.shape[0]]
        rows.append(tuple(row))
    return sorted(rows, key=_order)


def _order(row) -> tuple:
    return tuple(-1 if v is None else v for v in row)


FIELDS = {"lock": (), "unlock": (), "sanity": (), "sizes": (), "insert": ("prefix_len",), "match": ("prefix_len", "host_hit_length", "full_kv_hit_length",
                                               "mamba_host_hit_length", "mamba_branching_seqlen", "swa_host_hit_length"),
          "evict": ("full", "swa", "mamba"), "evict_host": ("evicted",), "load_back": ("host_hit_length", "loaded")}


def compare(ops, theirs, ours, components) -> str | None:
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
            rows = sorted(((r["depth"], r["len"], r["tok0"], *[x for c in components for x in r[c][:2]])
                           for r in t["nodes"]), key=_order)
            if rows != [tuple(r) for r in o["nodes"]]:
                return f"op {k} host_dump: oracle {rows} ours {o['nodes']}"
            continue
        for field in FIELDS[op["op"]]:
            if field not in o and op["op"] != "load_back":
                continue  # a field only the other configs report
            if t.get(field) != o.get(field):
                return f"op {k} {op['op']} {field}: oracle {t.get(field)} ours {o.get(field)} ({op})"
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--ops", type=int, default=150)
    ap.add_argument("--policies", default="write_through,write_through_selective,write_back")
    ap.add_argument("--components", default="full")
    ap.add_argument("--page-size", type=int, default=1)
    ap.add_argument("--replay", metavar="FILE", help="an oracle JSONL file (config line first) instead of random runs")
    args = ap.parse_args()
    if args.replay:
        config, *ops = [json.loads(line) for line in Path(args.replay).read_text().splitlines() if line.strip()]
        components = config["components"]
        config = {"kv_size": 256, "hicache_ratio": 2.0, "load_back_threshold": 10, "write_policy": "write_through",
                  **config}
        config.setdefault("swa_kv_size", config["kv_size"])
        diff = compare(ops, run_oracle(config, ops), run_ours(config, ops), components)
        print(f"{args.replay}: {diff or 'agrees'}")
        return 1 if diff else 0
    components = args.components.split(",")
    failed = 0
    for policy in args.policies.split(","):
        for seed in range(args.seeds):
            config = {"components": components, "kv_size": 64, "hicache_ratio": 0.5, "write_policy": policy,
                      "load_back_threshold": 4, "page_size": args.page_size}
            if "mamba" in components:
                config["mamba_size"] = 12
            if "swa" in components:
                config.update(sliding_window=4, swa_kv_size=48)
            ops = sequence(seed, args.ops, components)
            diff = compare(ops, run_oracle(config, ops), run_ours({**config}, ops), components)
            print(f"{'+'.join(components)} page {args.page_size} {policy:24s} seed {seed:3d}: {diff or 'agrees'}",
                  flush=True)
            failed += diff is not None
    runs = len(args.policies.split(",")) * args.seeds
    print(f"{runs} runs, {runs * args.ops} ops compared (each op's result, then every node's state): "
          f"{failed} diverged")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
