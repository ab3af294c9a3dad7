#!/usr/bin/env python3
"""Seeded request-heavy FULL+SWA op sequences for the oracle (development only).

    python3 tools/gen_swa_request_ops.py PAGE WINDOW SEED [N] [KV] [SWA_KV] > ops.jsonl

/work/shared/oracle/gen_random_ops.py never emits req_evict_swa / req_release_swa and
rarely puts the SWA pool under pressure; this mixes them with request checkpoints,
windowed extends, locks with early SWA release, inserts with swa_evicted_seqlen and
evictions over a few shared prefixes. req_evict_swa's pre_len stays below the
request's length (the scheduler's range). Ends by releasing everything and evicting
the whole tree. Config: auto_evict and sanity_check_each_op on. Then e.g.

    .venv/bin/python tools/oracle_diff.py --run-oracle --densify ops.jsonl
"""

from __future__ import annotations

import json
import random
import sys


def generate(ps: int, window: int, seed: int, n: int = 200, kv: int = 256, swa_kv: int = 256) -> list[dict]:
    rng = random.Random(seed)
    tok = lambda: rng.randrange(1, 40)  # noqa: E731 - small vocab => shared prefixes
    prefixes = [[tok() for _ in range(rng.choice([ps, 2 * ps, 3 * ps, 7]))] for _ in range(3)]
    ops: list[dict] = [{"components": ["full", "swa"], "page_size": ps, "sliding_window": window, "kv_size": kv,
                        "swa_kv_size": swa_kv, "auto_evict": True, "sanity_check_each_op": True}]
    live: list[str] = []
    locks: list[str] = []
    length: dict[str, int] = {}
    serial = 0
    for _ in range(n):
        r = rng.random()
        if r < 0.12:
            key = rng.choice(prefixes) + [tok() for _ in range(rng.randrange(0, 3 * ps + 3))]
            op = {"op": "insert", "key": key}
            if rng.random() < 0.3:
                op["swa_evicted_seqlen"] = rng.randrange(0, len(key) // ps + 1) * ps
            ops.append(op)
        elif r < 0.22:
            key = rng.choice(prefixes) + [tok() for _ in range(rng.randrange(0, 2 * ps + 3))]
            ops.append({"op": "match", "key": key})
        elif r < 0.27:
            serial += 1
            locks.append(f"h{serial}")
            ops.append({"op": "lock", "node": "last_match", "as": locks[-1]})
        elif r < 0.32 and locks:
            h = locks.pop(rng.randrange(len(locks)))
            if rng.random() < 0.5:
                ops.append({"op": "release_swa", "handle": h})
            ops.append({"op": "unlock", "handle": h})
        elif r < 0.40:
            ops.append({"op": "evict", "full": rng.randrange(0, 16), "swa": rng.randrange(0, 16)})
        elif r < 0.50 and len(live) < 4:
            serial += 1
            live.append(f"r{serial}")
            toks = rng.choice(prefixes) + [tok() for _ in range(rng.randrange(1, 2 * ps + 3))]
            length[live[-1]] = len(toks)
            ops.append({"op": "req_open", "as": live[-1], "tokens": toks})
        elif r < 0.68 and live:
            h = rng.choice(live)
            toks = [tok() for _ in range(rng.randrange(1, 7))]
            length[h] += len(toks)
            ops.append({"op": "req_extend", "req": h, "tokens": toks, "slide_window": rng.random() < 0.6})
        elif r < 0.74 and live:
            h = rng.choice(live)
            op = {"op": "req_evict_swa", "req": h}
            if rng.random() < 0.5:
                op["pre_len"] = rng.randrange(0, length[h])
            ops.append(op)
        elif r < 0.80 and live:
            ops.append({"op": "req_release_swa", "req": rng.choice(live)})
        elif r < 0.90 and live:
            ops.append({"op": "req_checkpoint", "req": rng.choice(live)})
        elif live:
            h = live.pop(rng.randrange(len(live)))
            ops.append({"op": "req_finish", "req": h, "insert": rng.random() < 0.8})
    ops += [{"op": "unlock", "handle": h} for h in locks]
    ops += [{"op": "req_finish", "req": h} for h in live]
    ops += [{"op": "evict", "full": 10**6, "swa": 10**6}, {"op": "dump"}]
    return ops


def main() -> int:
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    args = [int(a) for a in sys.argv[1:7]]
    for op in generate(*args):
        print(json.dumps(op))
    return 0


if __name__ == "__main__":
    sys.exit(main())
