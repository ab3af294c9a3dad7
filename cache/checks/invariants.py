"""The invariant checker's entry points: named violations, never an exception.

``check_invariants(cache)`` (the full sweep) recomputes every counter and index from
the nodes and compares. It visits each node a constant number of times in Python and
hands everything per slot (pool pages, SWA translations, state fingerprints) to torch
in a few batched calls: per-node tensor calls are what made it slow.

``check_invariants(cache, touched=ids)`` is the per-step mode: cheap probes around the
nodes a step touched plus O(1) balances (``incremental.py``). When every probe
passes it returns []; when any fails it runs the full sweep and returns exactly what
the sweep returns, so both modes always name a problem the same way.

``verify_match`` proves a match handed out the right KV slots via their fingerprints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Optional

import torch

from ..basics.keys import RadixKey, token_array
from ..basics.page_hash import chain_violations
from ..basics.violation import Violation
from ..sessions.streaming import check_streaming
from ..tree.leaf_policies import check_tlru_lens
from ..tree.locks import one_fresh_grouping
from . import component_checks
from .host import check_host_tier
from .incremental import probe
from .locks import check_lock_counts, check_receipts
from .pools import check_full_pool
from .sessions import check_sessions
from .structure import check_counters, check_leaf_set, check_lru_lists, check_structure

if TYPE_CHECKING:
    from ..basics.params import MatchResult
    from ..controller.unified_radix_cache import UnifiedRadixCache

__all__ = ["Violation", "check_invariants", "one_thread", "verify_match"]


def check_invariants(cache: UnifiedRadixCache, touched: Optional[Iterable[int]] = None,
                     data_touched: Optional[Iterable[int]] = None) -> list[Violation]:
    """Every invariant over the whole tree; or, with ``touched`` (node ids a step
    changed, e.g. from ``cache.tree.take_touched()`` or the step's event node ids; ids
    no longer in the tree are skipped), the incremental probes first and the full sweep
    only when one of them fails (or when half the tree was touched: the sweep is then
    cheaper). ``data_touched``: those of them whose data (slots, KV, states, children)
    the step may have changed, the rest only their locks or LRU places (default: all);
    only they get the content probes. Either way the answer is [] or exactly the
    sweep's. See ``incremental.py`` for what the probes cover and what only
    the sweep sees."""
    audit = cache.tree.eviction_audit  # the victims Full took out of its policy's order (tree/core.py)
    if audit:
        found = [Violation(name, msg) for name, msg in audit]
        audit.clear()
        return found + check_invariants(cache, touched, data_touched)
    with one_thread():
        if touched is not None:
            touched = set(touched)
        if touched is not None and _probe_is_cheaper(cache.tree, touched, data_touched):
            try:
                if probe(cache, touched, data_touched):
                    return []
            except Exception:  # a probe that trips over corrupt state found something: the sweep names it
                pass
        return _sweep(cache)


SMALL_TREE = 64  # nodes: below this the sweep's fixed cost (a few dozen tensor calls) exceeds any probe


def _probe_is_cheaper(tree, touched: set, data_touched) -> bool:
    """Probe rather than sweep: a content probe costs about the sweep's per node, and the
    sweep also walks every held receipt (the probe: each group once), so sweep when half
    of that has its content touched, unless the tree is small (measured, fuzzer-sized
    trees: a sweep 1.3 ms, a probe of every node 0.25 ms; 212 nodes: both about 6 ms)."""
    content = len(touched) if data_touched is None else len(set(data_touched) & touched)
    return len(tree.nodes) < SMALL_TREE or 2 * content < len(tree.nodes) + len(tree.live_receipts)


@contextlib.contextmanager
def one_thread():
    """Run the checker's tensor ops on one intra-op thread: they are small (an entry per
    node or slot), so more threads only add a hand-off per op, and on a busy 2-core
    machine each hand-off can stall for milliseconds (measured: 0.1 ms -> 6 ms). Free
    when already on one thread: a loop of checked steps holds it once around the loop
    (switching back and forth per step cost 0.12 ms a step: the pool restarts)."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _sweep(cache: UnifiedRadixCache) -> list[Violation]:
    """The full sweep: the tree's, the pools', the locks', each tier's and each
    component's invariants, in that order; a crash is reported, never raised."""
    out: list[Violation] = []
    try:
        with one_fresh_grouping(cache.tree):  # the receipts filed afresh once, for every lock check
            cols = check_structure(cache, out)
            check_counters(cache, cols, out)
            check_leaf_set(cache, cols, out)
            check_lru_lists(cache, cols, out)
            check_full_pool(cache, cols, out)
            check_receipts(cache, out)
            check_lock_counts(cache, cols, out)
            if cache.session_slots or cache.session_controller.sessions:
                out.extend(Violation(name, msg) for name, msg in check_streaming(cache))
            if cache.host is not None:
                check_host_tier(cache, cols, out)
            if cache.tree.tlru_bookkeeping:
                out.extend(Violation(name, msg) for name, msg in check_tlru_lens(cache.tree))
            if cache.tree.page_hashing:
                out.extend(Violation(name, msg) for name, msg in chain_violations(cache.tree, cache.tree.nodes.values()))
            if cache.tree.session_radix_cache:
                check_sessions(cache, out)
            # the components read every registered node: share the columns when that is the same set
            shared = cols if cols.registered else None
            for component in cache.components:
                out.extend(Violation(name, msg) for name, msg in component_checks.check(component, shared))
    except Exception as exc:  # a corrupt tree must still yield a report
        out.append(Violation("checker.crashed", f"{type(exc).__name__}: {exc}"))
    return out


def verify_match(cache: UnifiedRadixCache, key: RadixKey | list[int], result: MatchResult) -> list[Violation]:
    """The slots a match returned must hold the fingerprints of the key's prefix."""
    tokens = token_array(key.data) if isinstance(key, RadixKey) else list(key)
    indices = result.device_indices
    n = int(indices.shape[0])
    if n > len(tokens):
        return [Violation("match.too_long", f"match returned {n} slots for a {len(tokens)}-token key")]
    if n % cache.page_size:
        return [Violation("match.page_aligned", f"match length {n} is not a multiple of page {cache.page_size}")]
    bad = cache.kv_buffer.mismatches(indices, tokens)
    if bad:
        return [Violation("match.fingerprint", f"{len(bad)} slot(s) hold the wrong KV, first at position {bad[0]}")]
    return [v for c in cache.components for v in component_checks.verify_match(c, tokens, result)]
