"""``urc demo``: a small built-in sequence that shows splits, duplicate freeing, a path
lock and LRU eviction, printing the tree after each step. The cache (torch) and rich are
imported only when it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def add_parser(command) -> None:
    command("demo", "run a small built-in sequence and print the tree after each step",
            "A tiny built-in sequence on the Full component; needs no file.")


def run(args) -> int:
    from ..render.report import make_console

    return run_demo(make_console())


def run_demo(console: Console | None = None) -> int:
    from rich.console import Console
    from rich.rule import Rule
    from rich.text import Text

    from cache import EventLog, EvictParams, InsertParams, RadixKey, UnifiedRadixCache, check_invariants

    from ..model.timeline.fmt import event_text
    from ..render.tree_view import render_state

    console = console or Console()
    cache = UnifiedRadixCache(kv_size=64, page_size=1, device="auto")
    log = EventLog(cache.events)
    receipts = {}

    def insert(tokens):
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        return cache.insert(InsertParams(RadixKey(tokens), slots))

    def lock(tokens):
        match = cache.match_prefix(RadixKey(tokens))
        receipts[tuple(tokens)] = (match.last_device_node, cache.inc_lock_ref(match.last_device_node))
        return match

    def unlock(tokens):
        node, receipt = receipts.pop(tuple(tokens))
        cache.dec_lock_ref(node, receipt)

    steps = [
        ("insert a 6-token prompt", lambda: insert([1, 2, 3, 4, 5, 6])),
        ("a second prompt shares 3 tokens: the node splits, duplicates are freed", lambda: insert([1, 2, 3, 7, 8])),
        ("a third branch", lambda: insert([9, 9, 9, 9])),
        ("match + lock [1 2 3 7 8]: a path lock up to the root", lambda: lock([1, 2, 3, 7, 8])),
        ("evict 8 tokens: the oldest unlocked leaves go first", lambda: cache.evict(EvictParams(num_tokens=8))),
        ("unlock: the path becomes evictable again", lambda: unlock([1, 2, 3, 7, 8])),
        ("evict everything", lambda: cache.evict(EvictParams(num_tokens=64))),
    ]
    console.print(Rule(f"Unified Radix Cache demo — pools on {cache.device}"))
    for i, (title, action) in enumerate(steps, 1):
        result = action()
        console.print(Rule(f"step {i}: {title}", style="blue"))
        if result is not None:
            console.print(Text(f"result: {_summary(result)}", style="dim"))
        for event in log.take():
            console.print(Text(f"  {event_text(event)}", style="dim"))
        snap = cache.snapshot()
        console.print(render_state(snap))
        violations = check_invariants(cache)
        if violations:
            console.print(f"[bold red]invariant violations:[/] {violations}")
            return 1
    return 0


def _summary(result) -> str:
    """A one-line view of an op's result (MatchResult's tensor would swamp the screen)."""
    if hasattr(result, "device_indices"):
        return f"prefix_len={result.prefix_len}, last node #{result.last_device_node}"
    if hasattr(result, "prefix_len"):
        return f"prefix_len={result.prefix_len}"
    fields = ("num_tokens_evicted", "swa_num_tokens_evicted", "mamba_num_evicted")
    return ", ".join(f"{f}={getattr(result, f)}" for f in fields if hasattr(result, f))
