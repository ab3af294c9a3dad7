"""SGLang 0.5.23's eight eviction strategies for Full's leaves (``--radix-eviction-policy``).

Each policy maps a node to a sort key; the smallest key is evicted first. Only Full
reads it (SWA and Mamba keep their LRU lists). Keys are read when a node enters an
eviction walk's heap, never kept across walks: hit counts and priorities change
without a node being touched, so a persistent heap would hold stale keys. TLRU's
per-node depths, which the tree keeps only for a policy that reads them, are set and
checked here too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # checking a config must not import torch
    from .node import TreeNode


class EvictionPolicy:
    """Smaller key = evicted earlier; ties fall to last_access_time (SGLang's node order)."""

    name = "lru"
    reason = "least recently used"
    reads_branch_depth = False  # the tree keeps each node's prefix and branch depths only for a policy that reads them
    # the key is last_access_time alone: Full's walk may follow its access order without a heap,
    # and no eviction audit is needed; a subclass (its own key) is not, unless it says so
    plain_lru = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "plain_lru" not in vars(cls):
            cls.plain_lru = False

    def key(self, node: TreeNode) -> Any:
        return node.last_access_time

    def describe(self, node: TreeNode) -> str:
        """The part of the key a user reads, e.g. ``"1 hit"`` or ``"priority 3"``."""
        return f"last used at {node.last_access_time:g}"

    def kwargs(self) -> dict[str, Any]:
        return {}

    def label(self) -> str:
        """The name, with the arguments that differ from the defaults: ``slru(protected_threshold=1)``."""
        args = ", ".join(f"{k}={v:g}" for k, v in self.kwargs().items() if v != _default_args(type(self))[k])
        return f"{self.name}({args})" if args else self.name


def hits_text(count: int) -> str:
    """``1 hit``, ``2 hits``: a node's hit count as every view says it."""
    return f"{count} hit{'s' if count != 1 else ''}"


class LFUPolicy(EvictionPolicy):
    name, reason = "lfu", "fewest hits, then least recently used"

    def key(self, node):
        return node.hit_count, node.last_access_time

    def describe(self, node):
        return hits_text(node.hit_count)


class FIFOPolicy(EvictionPolicy):
    name, reason = "fifo", "created first"

    def key(self, node):
        return node.creation_time

    def describe(self, node):
        return f"created at {node.creation_time:g}"


class MRUPolicy(EvictionPolicy):
    name, reason = "mru", "most recently used"

    def key(self, node):
        return -node.last_access_time


class FILOPolicy(EvictionPolicy):
    name, reason = "filo", "created last"

    def key(self, node):
        return -node.creation_time

    describe = FIFOPolicy.describe


class PriorityPolicy(EvictionPolicy):
    name, reason = "priority", "lowest request priority, then least recently used"

    def key(self, node):
        return node.priority, node.last_access_time

    def describe(self, node):
        return f"priority {node.priority}"


class SLRUPolicy(EvictionPolicy):
    """Probationary (hit_count < protected_threshold) leaves go before protected ones."""

    name, reason = "slru", "probationary before protected, then least recently used"

    def __init__(self, protected_threshold: int = 2):
        self.protected_threshold = protected_threshold

    def key(self, node):
        return (1 if node.hit_count >= self.protected_threshold else 0), node.last_access_time

    def describe(self, node):
        segment = "protected" if node.hit_count >= self.protected_threshold else "probationary"
        return f"{segment} ({hits_text(node.hit_count)})"

    def kwargs(self):
        return {"protected_threshold": self.protected_threshold}


class TLRUPolicy(EvictionPolicy):
    """Tail-optimised LRU: a node whose tokens lie past what its branch needs cached to
    keep the next prefill under budget is "TEL-safe" and goes first. The branch's
    history is its high-water depth (it never shrinks); lengths are in key units."""

    name, reason = "tlru", "TEL-safe tail first, then least recently used"
    reads_branch_depth = True

    def __init__(self, threshold: int = 0, next_prompt_estimate: int = 0):
        self.threshold = threshold
        self.next_prompt_estimate = next_prompt_estimate

    def tel_safe(self, node: TreeNode) -> bool:
        budget = max(node.tlru_history_len + self.next_prompt_estimate - self.threshold, 0)
        return node.tlru_prefix_len - node.length >= budget

    def key(self, node):
        return (-1 if self.tel_safe(node) else 0), node.last_access_time

    def describe(self, node):
        return "TEL-safe" if self.tel_safe(node) else "within budget"

    def kwargs(self):
        return {"threshold": self.threshold, "next_prompt_estimate": self.next_prompt_estimate}


POLICIES: dict[str, Callable[..., EvictionPolicy]] = {
    "lru": EvictionPolicy, "lfu": LFUPolicy, "fifo": FIFOPolicy, "mru": MRUPolicy,
    "filo": FILOPolicy, "priority": PriorityPolicy, "slru": SLRUPolicy, "tlru": TLRUPolicy,
}


def _default_args(cls) -> dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(cls).parameters.values()}


def make_policy(name: str, config: Optional[Mapping[str, Any]] = None) -> EvictionPolicy:
    """The policy named (case-insensitive), built with ``config`` as keyword arguments.
    Unknown names and unknown, non-numeric, negative or non-finite arguments raise
    ValueError (SGLang raises a TypeError for a bad argument, when the cache is built;
    it takes -1 or NaN silently, which no hit count or token length means)."""
    if not isinstance(name, str):
        raise ValueError(f"eviction_policy must be a string (got {name!r})")
    factory = POLICIES.get(name.lower())
    if factory is None:
        supported = "', '".join(POLICIES)
        raise ValueError(f"Unknown eviction policy: {name.lower()}. Supported policies: '{supported}'.")
    config = dict(config or {})
    accepted = [p for p in inspect.signature(factory).parameters]
    for arg, value in config.items():
        if arg not in accepted:
            takes = ", ".join(accepted) if accepted else "no options"
            raise ValueError(f"eviction_policy_config: {name.lower()} does not take {arg!r} (it takes {takes})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"eviction_policy_config.{arg} must be a number (got {value!r})")
        if (isinstance(value, float) and not math.isfinite(value)) or value < 0:  # hits and tokens: counts
            raise ValueError(f"eviction_policy_config.{arg} must be a finite number, 0 or more (got {value!r})")
    return factory(**config)


def raise_tlru_history(node: TreeNode) -> None:
    """A new node's depth, and the branch's high-water mark raised up to the first
    ancestor that already reached it (TLRU's history length)."""
    depth = node.parent.tlru_prefix_len + node.length
    node.tlru_prefix_len = depth
    node.tlru_history_len = max(node.tlru_history_len, depth)
    up = node.parent
    while up is not None and up.tlru_history_len < depth:
        up.tlru_history_len = depth
        up = up.parent


def check_tlru_lens(tree) -> list[tuple[str, str]]:
    """TLRU's per-node lengths: a node's depth is its parent's plus its own edge; its
    history (the branch's high-water depth) reaches at least its depth and at most its
    parent's history."""
    out = []
    for node in tree.nodes.values():
        parent = node.parent
        if parent is None:
            continue
        if node.tlru_prefix_len != parent.tlru_prefix_len + node.length:
            out.append(("tlru.depth", f"node {node.id} depth {node.tlru_prefix_len} != parent's "
                                      f"{parent.tlru_prefix_len} + {node.length}"))
        if node.tlru_history_len < node.tlru_prefix_len:
            out.append(("tlru.history", f"node {node.id} history {node.tlru_history_len} < depth {node.tlru_prefix_len}"))
        if parent is not tree.root and parent.tlru_history_len < node.tlru_history_len:
            out.append(("tlru.history", f"node {node.id} history {node.tlru_history_len} > its parent's "
                                        f"{parent.tlru_history_len}"))
    return out
