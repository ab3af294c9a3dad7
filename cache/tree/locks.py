"""The tree core's lock protocol: receipts anchored to a node, released exactly once.

``inc_lock_ref`` asks every component to lock its share (Full: the path to the root;
SWA: one window; Mamba: one node) and returns a receipt that records what was taken.
A release replays that receipt on the same node; every check runs before any count
changes, so a refused release leaves the tree as it was.

Held receipts are also filed by ``lock_group_key`` in ``lock_groups``: receipts with
one anchor and one signature lock exactly the same nodes, so the per-step checker
works once per group instead of once per receipt (thousands of locks on one match).
A lock only notes its receipt as unfiled; the filing is done when the groups are read
(``held_lock_groups``), so a run nobody checks never pays for it.
``TreeLocks`` owns the receipts; the tree core holds one (``tree.locks``) and answers
the lock calls through it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Optional

from ..basics.base_component import FULL
from ..basics.errors import LockError, UnknownNodeError
from ..basics.params import DecLockRefParams, IncLockRefResult
from .hooks import overriding

if TYPE_CHECKING:
    from ..observe.eviction_batch import EvictionBatch
    from .component_api import TreeAPI, TreeComponentAPI, WindowLockAPI


def lock_group_key(receipt) -> tuple:
    """Receipts with equal keys lock the same nodes: one anchor, the same components
    skipped, the same window part released, the same segment boundaries."""
    uuids = receipt.component_lock_uuids
    ordered = tuple(uuids.items()) if len(uuids) < 2 else tuple(sorted(uuids.items()))
    return receipt.node_id, receipt.skipped_lock_components, receipt.swa_released, ordered


def group_receipts(receipts) -> dict[tuple, dict[int, object]]:
    """``lock_group_key`` -> {receipt id: receipt}, for receipts in the order given."""
    groups: dict[tuple, dict[int, object]] = {}
    for receipt in receipts:
        groups.setdefault(lock_group_key(receipt), {})[receipt.receipt_id] = receipt
    return groups


_SWEEP_GROUPS: dict[int, dict] = {}  # id(tree) -> its receipts filed afresh, while a full sweep runs


@contextlib.contextmanager
def one_fresh_grouping(tree):
    """During a full sweep, the receipts are filed afresh once and every lock check of
    the sweep reads that filing (three re-filings of 10,000 receipts cost ~60 ms)."""
    _SWEEP_GROUPS[id(tree)] = group_receipts(tree.live_receipts.values())
    try:
        yield
    finally:
        del _SWEEP_GROUPS[id(tree)]


def fresh_groups(tree) -> dict[tuple, dict[int, object]]:
    """The held receipts filed afresh (not the tree's own filing, which the sweep checks)."""
    return _SWEEP_GROUPS.get(id(tree)) or group_receipts(tree.live_receipts.values())


class TreeLocks:
    """The held receipts of one tree (``live_receipts``, filed again in ``lock_groups``)
    and the lock calls that take and release them on the tree's components."""

    def __init__(self, tree: TreeAPI) -> None:
        self.tree = tree
        self._release_order = list(reversed(tree.components))  # auxiliaries first, Full last
        self._checked_releases = overriding(tree.components, "check_release")
        self.reset()

    def reset(self) -> None:
        self._next_receipt = 0
        self.live_receipts: dict[int, IncLockRefResult] = {}  # receipt id -> receipt
        self.lock_groups: dict[tuple, dict[int, IncLockRefResult]] = {}  # the same, filed by lock_group_key
        self._filed_under: dict[int, tuple] = {}  # receipt id -> the key it is filed under
        self._unfiled: dict[int, IncLockRefResult] = {}  # taken since the groups were last read

    def inc_lock_ref(self, node_id: int, skip: tuple[str, ...] = (), host_only: bool = False) -> IncLockRefResult:
        """``host_only``: the node may be host-only (a load-back locks its best match
        before loading it, as v0.5.23 does; its device-less nodes are locked without
        moving any count, and a value restored under the lock counts as protected)."""
        tree = self.tree
        node = tree.nodes.get(node_id)
        if node is None:
            raise UnknownNodeError(f"node {node_id} is not in the tree (evicted or never existed)")
        if node.data[0].value is None and not host_only:  # the host tier's host-only nodes: nothing on the device to lock
            raise LockError(f"node {node_id} is host-only: lock the match's last_device_node, or load it back first")
        if skip:
            unknown = [name for name in skip if name not in tree.by_name or name == FULL]
            if unknown:
                raise LockError(f"cannot skip {unknown}: skip only auxiliary components of this cache {list(tree.by_name)[1:]}")
        self._next_receipt += 1
        receipt = IncLockRefResult(0, node_id, self._next_receipt, skip)
        if node is tree.root:  # the root holds no component's data: a lock there takes nothing (a miss's lock)
            taking = ()
        elif skip:
            taking = [c for c in tree.components if c.name not in skip]
        else:
            taking = tree.components
        for component in taking:
            component.acquire_lock(node, receipt)
        if node.in_leaf_set:
            tree.leaves.discard(node)
        self.live_receipts[self._next_receipt] = receipt
        self._unfiled[self._next_receipt] = receipt
        if tree._touched is not None:
            tree._touched.add(node_id)
        return receipt

    def dec_lock_ref(self, node_id: int, params: DecLockRefParams | IncLockRefResult, skip_swa: bool = False) -> None:
        """Release exactly what the receipt acquired. Every check runs before any
        count changes, so a refused release leaves the tree as it was."""
        tree = self.tree
        held = self.live_receipts.get(params.receipt_id)
        if held is None:
            raise LockError(
                f"lock receipt {params.receipt_id} is not held: released twice, or never taken"
                if params.receipt_id
                else "unlock without a lock: this receipt was never returned by inc_lock_ref"
            )
        if held.node_id != node_id or params.node_id != node_id:
            raise LockError(f"lock receipt anchored on node {held.node_id} released on node {node_id}")
        node = tree.node_by_id(node_id)
        params = held  # the tree's own copy is authoritative (window release, boundary)
        if skip_swa and not params.swa_released:
            raise LockError(
                f"skip_swa on lock receipt {params.receipt_id} whose window part is still held: "
                "release_window first (or release the whole lock without skip_swa)"
            )
        skip_swa = params.swa_released
        if node is tree.root:  # its lock took nothing (inc_lock_ref), and the root is never a leaf
            self._forget(params)
            return
        if params.skipped_lock_components or skip_swa:
            releasing = [c for c in self._release_order if self.releases(c, params, skip_swa)]
        else:
            releasing = self._release_order
        for component in self._checked_releases:
            if releasing is self._release_order or component in releasing:
                problem = component.check_release(node, params)
                if problem:
                    raise LockError(problem)
        for component in releasing:
            component.release_lock(node, params)
        self._forget(params)
        if not node.in_leaf_set:
            tree.update_leaf_state(node)

    def _forget(self, receipt) -> None:
        """A released receipt is held no more."""
        del self.live_receipts[receipt.receipt_id]
        if self._unfiled.pop(receipt.receipt_id, None) is None:
            self._unfile_receipt(receipt)
        if self.tree._touched is not None:
            self.tree._touched.add(receipt.node_id)

    def dec_window_lock(self, node_id: int, params, batch: EvictionBatch) -> None:
        """Early release of a lock's SWA window part (decode moved past the window),
        plus every component ranked below SWA (Mamba); Full stays locked."""
        tree = self.tree
        held = self.live_receipts.get(params.receipt_id)
        if held is None or held.node_id != node_id or params.node_id != node_id:
            raise LockError(f"lock receipt {params.receipt_id} is not held on node {node_id}")
        params = held
        if params.swa_released:
            raise LockError(f"the window part of lock receipt {params.receipt_id} was already released")
        swa = self.window_component
        if swa is None:
            raise LockError("release_window needs the swa component")
        node = tree.node_by_id(node_id)
        below = [
            c for c in self._release_order
            if c.eviction_priority(False) < swa.eviction_priority(False) and c.name not in params.skipped_lock_components
        ]
        releasing = ([swa] if swa.name not in params.skipped_lock_components else []) + below
        for component in releasing:
            problem = component.check_release(node, params)
            if problem:
                raise LockError(problem)
        if swa in releasing:
            swa.release_window_lock(node, params, batch)
        for component in below:
            component.release_lock(node, params)
        filed = params.receipt_id not in self._unfiled  # (an unfiled one is filed later, under its new key)
        if filed:
            self._unfile_receipt(params)
        params.swa_released = True
        if filed:
            self._file_receipt(params)
        if tree._touched is not None:
            tree._touched.add(node_id)

    def _file_receipt(self, receipt) -> None:
        key = self._filed_under[receipt.receipt_id] = lock_group_key(receipt)
        group = self.lock_groups.get(key)
        if group is None:
            group = self.lock_groups[key] = {}
        group[receipt.receipt_id] = receipt

    def _unfile_receipt(self, receipt) -> None:
        key = self._filed_under.pop(receipt.receipt_id, None)
        if key is None:  # filed behind the lock calls' back (held_lock_groups refiled it)
            key = lock_group_key(receipt)
        group = self.lock_groups.get(key)
        if group is not None and group.pop(receipt.receipt_id, None) is not None and not group:
            del self.lock_groups[key]

    def held_lock_groups(self) -> dict[tuple, dict[int, object]]:
        """``lock_groups`` with the receipts taken since they were last read filed, and
        refiled from ``live_receipts`` if the two disagree in size (receipts added or
        dropped behind the lock calls' back)."""
        if self._unfiled:
            for receipt in self._unfiled.values():
                self._file_receipt(receipt)
            self._unfiled.clear()
        if sum(map(len, self.lock_groups.values())) != len(self.live_receipts):
            self.lock_groups = group_receipts(self.live_receipts.values())
            self._filed_under = {r.receipt_id: key for key, group in self.lock_groups.items() for r in group.values()}
        return self.lock_groups

    @property
    def window_component(self) -> Optional[WindowLockAPI]:
        """The component whose lock part release_window lets go early (SWA), or None."""
        return next((c for c in self.tree.components if c.has_window_lock), None)

    def releases(self, component: TreeComponentAPI, params, skip_swa: bool) -> bool:
        """Whether releasing ``params`` (its window part already gone when ``skip_swa``)
        still has ``component`` release its share."""
        if component.name in params.skipped_lock_components:
            return False
        window = self.window_component if skip_swa else None
        if window is not None:
            if component is window or component.eviction_priority(False) < window.eviction_priority(False):
                return False
        return True
