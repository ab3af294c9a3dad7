"""The tree room's contracts: what the tree core asks of a component (``TreeComponentAPI``
and its role extensions), what a component and the tree's own collaborators may ask
of the tree core (``TreeAPI``), and the ``default_hook`` mark that tells a no-op default
hook from an override.

They live here, below the components, so every tree module can name them without
importing the component classes (components/base.py implements them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional, Protocol, TypeVar

if TYPE_CHECKING:
    import torch

    from ..basics.params import DecLockRefParams, IncLockRefResult, InsertParams, InsertResult, MatchResult
    from ..observe.events import EventBus
    from ..observe.eviction_batch import EvictionBatch
    from .leaf_set import EvictableLeafSet
    from .lru import LRUList
    from .node import TreeNode

_DEFAULT_HOOK = "__default_hook__"
F = TypeVar("F", bound=Callable[..., Any])


def default_hook(fn: F) -> F:
    """Mark a base class's no-op default of a hook: a component whose class still has
    this function has no opinion there, and the tree leaves it out of that hook's calls."""
    setattr(fn, _DEFAULT_HOOK, True)
    return fn


def is_default_hook(fn: object) -> bool:
    """Whether ``fn`` is a hook default marked with ``default_hook``."""
    return getattr(fn, _DEFAULT_HOOK, False)


class TreeAPI(Protocol):
    """The tree core as its collaborators (locks, session refs, match verdicts) and the
    components' tree-side helpers see it."""

    root: TreeNode
    nodes: dict[int, TreeNode]
    components: list[TreeComponentAPI]
    by_name: dict[str, TreeComponentAPI]
    page_size: int
    events: EventBus
    leaves: EvictableLeafSet  # Full's evictable device leaves
    lru: dict[str, LRUList]
    host_policy: Optional[str]
    _touched: Optional[set[int]]  # ids changed since the last take_touched (None: not recording)

    def node_by_id(self, node_id: int) -> TreeNode: ...

    def update_leaf_state(self, node: TreeNode) -> None: ...

    def tombstone(self, node: TreeNode, component: TreeComponentAPI, batch: EvictionBatch,
                  cascade: bool = True) -> None: ...


class TreeComponentAPI(Protocol):
    """What the tree core reads and calls on every component, in the phase order of
    components/base.py (which documents each hook)."""

    name: str
    index: int  # its position in the registry order: node.data[index] is its data (Full: 0)
    tree: TreeAPI  # set by the tree core
    uses_lru: bool  # the tree keeps an LRU list for it
    kv_peer: bool  # allocated and freed along with Full KV slots
    has_window_lock: bool  # a lock part release_window lets go early
    internal_priority: int
    session_coverage: str  # "path", "window" or "node" (session_refs.py)
    branching_field: Optional[str]  # its MatchResult *_branching_seqlen field, if any
    branching_grid: int  # the tokens that field is rounded down to

    def value_len(self, node: TreeNode) -> int: ...

    # match
    def create_match_validator(self) -> Optional[Callable[[TreeNode, int], bool]]: ...

    def create_host_match_validator(self) -> Optional[Callable[[TreeNode, int], bool]]: ...

    def match_verdict(self, path: list[TreeNode]) -> Optional[tuple[int, str]]: ...

    def finalize_match_result(self, result: MatchResult, best: TreeNode, walked: int, boundary: int) -> MatchResult: ...

    def finalize_host_match(self, result: MatchResult, best: TreeNode) -> MatchResult: ...

    # LRU refresh
    def on_walkdown(self, node: TreeNode) -> None: ...

    def on_match_end(self, node: TreeNode) -> None: ...

    def on_insert_end(self, node: TreeNode) -> None: ...

    # insert and split
    def on_insert_overlap(self, node: TreeNode, prefix_len: int, total_prefix_len: int, value: torch.Tensor,
                          params: InsertParams, result: InsertResult, actions: list) -> int: ...

    def commit_insert(self, node: TreeNode, is_new_leaf: bool, params: InsertParams, result: InsertResult,
                      actions: list) -> None: ...

    def redistribute_on_split(self, new_parent: TreeNode, child: TreeNode) -> None: ...

    # eviction
    def eviction_priority(self, is_leaf: bool) -> int: ...

    def evict_component(self, node: TreeNode, batch: EvictionBatch) -> int: ...

    # locks
    def acquire_lock(self, node: TreeNode, receipt: IncLockRefResult) -> None: ...

    def check_release(self, node: TreeNode, receipt: DecLockRefParams) -> Optional[str]: ...

    def release_lock(self, node: TreeNode, receipt: DecLockRefParams) -> None: ...


class FullComponentAPI(TreeComponentAPI, Protocol):
    """Full (always component 0): its eviction walk's order, read by host eviction and
    the eviction audit."""

    passed: set[TreeNode]  # leaves this walk kept on the device (pass_by)

    def heap_entry(self, node: TreeNode) -> tuple: ...


class WindowLockAPI(TreeComponentAPI, Protocol):
    """A component with ``has_window_lock`` (SWA): a window of ``window`` tokens whose
    lock part goes before the rest of the lock."""

    window: int

    def release_window_lock(self, node: TreeNode, receipt, batch: EvictionBatch) -> None: ...


class HostCopyAPI(TreeComponentAPI, Protocol):
    """An auxiliary component with ``keeps_host_copy`` (Mamba, SWA under a host tier)."""

    keeps_host_copy: bool

    def backup_nodes(self, node: TreeNode) -> list[TreeNode]: ...

    def lock_host_copies(self, anchor: TreeNode) -> Any: ...

    def unlock_host_copies(self, anchor: TreeNode, receipt: Any) -> None: ...
