"""What a component's part in the host tier (HiCache) declares and does.

A component takes part in the host tier by mixing a ``HostPart`` subclass (its own
``<name>/host.py``) into its class and declaring it its ``HOST_PART`` (see the registry).
The module stays free of torch at import: the config reads its declarations (the host
pool's size field ``host_<name>_size`` and its default, by ``hicache_ratio_size``)
before anything is built.

Hooks (the host tier and the tree core call them on every component with a host part):
  config    host_paged, default_host_size; make_host_pool builds the pool the cache uses
  match     create_host_match_validator (accepts data on either tier)
  backup    device_store, backup_nodes (the nodes whose data a backup of a node copies)
  load      load_back_nodes, load_shortfall, alloc_for_load, free_load, commit_load, after_load
            (each of the last three told the admitting request, None for a key-only load);
            prepare_load_back / finalize_load_back around a request's load (v0.5.23's)
  locks     lock_host_copies / unlock_host_copies (what a load reads stays on the host)
  checks    what the host copies hold: its checks module's check_host / probe_host
  storage   storage_pool, storage_backup, prefetch_trailing_pages, commit_prefetch (the
            storage tier's pages of the component: a trailing window of the chain)
A split of a node with a host copy is the component's own ``redistribute_on_split``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cache_view import ConfigView
    from ..tree.node import TreeNode


def hicache_ratio_size(units: int, page: int = 1) -> int:
    """SGLang's host pool for hicache_ratio 2: twice the device pool plus one page."""
    return (2 * units // page + 1) * page


class HostPart:
    keeps_host_copy = True  # the host tier backs this component up beside Full KV
    host_paged = False  # its host pool is page-granular (KV tokens); else one slot per unit
    storage_pool = None  # its name in storage keys (SGLang's PoolName: "<hash>.<pool>"); None: never stored

    @staticmethod
    def default_host_size(config: ConfigView) -> int:
        """The host pool's size when the config gives none (SGLang: hicache_ratio 2)."""
        raise NotImplementedError

    def make_host_pool(self, size: int):
        """The host pool: ``allocator``, ``size``, ``available_size``, ``clear`` and
        ``copy_in(device_store, slots, host)`` / ``load(device_store, host, slots)``."""
        raise NotImplementedError

    def prepare_load_back(self, best: TreeNode, req):
        """Before a load for an admitting request (``req``; None: a key-only load):
        what the component takes for it (v0.5.23 gives Mamba's request its state slot
        here). Handed back to ``finalize_load_back``."""
        return None

    def finalize_load_back(self, req, prep, success: bool) -> None:
        """After the load, done (``success``) or called off: a call-off gives back
        what ``prepare_load_back`` took."""

    def after_load(self, nodes: list[TreeNode], req) -> None:
        """The loaded nodes hold their data on the device again."""

    # ---- the storage tier (tiers/storage.py, tiers/staging.py) -----------------------
    def storage_backup(self, node: TreeNode):
        """(page hashes, host slots) a store of ``node`` writes of this component
        (v0.5.23's BACKUP_STORAGE transfer, hit policy TRAILING_PAGES); None: nothing."""
        return None

    def prefetch_trailing_pages(self, anchor: TreeNode, span_pages: int) -> int:
        """How many trailing pages of a prefetch's hit must hold this component's data
        (v0.5.23's ``prepare_prefetch``); 0: the prefetch stages none of it."""
        return 0

    def commit_prefetch(self, anchor: TreeNode, target: TreeNode, total_len: int, slots):
        """Attach staged slots fetched for a prefetch that placed ``total_len`` tokens below
        ``anchor``, ending at ``target``; returns the slots not kept (to be freed)."""
        return [slots]
