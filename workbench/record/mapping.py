"""From a live cache's public calls to our scenario ops (schema 1), with plain values.

The recorder reads SGLang's objects and hands this module ints, lists and names, so
every mapping rule is here and testable without SGLang. A call that has no op of
ours becomes a comment with the reason: nothing is dropped silently.

Names: every recorded match and insert gets a name (``m1``, ``i2`` …) for the node
it ended on, so a later ``inc_lock_ref`` on that node becomes ``lock`` of that
name; locks are named ``L1`` … and an unlock finds its lock by node and receipt.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Hashable, Optional, Union

Line = Union[dict, str]  # a step, or a comment (written as "# …")


@dataclasses.dataclass
class _OpenLock:
    name: str
    node: Any
    receipt: Hashable  # what the release will hand back (compared by equality)


class TraceMapper:
    def __init__(self, components: list[str]) -> None:
        self.components = components
        self._count = 0
        self._node_names: dict[Any, str] = {}  # node id -> the latest match/insert name ending there
        self._open: list[_OpenLock] = []

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    # ---- tree calls ----------------------------------------------------------------
    def match(self, tokens: list[int], extra_key: Optional[str], node: Any, prefix_len: int,
              mamba_branching_seqlen: Optional[int] = None, cow: bool = False) -> dict:
        name = self._name("m")
        self._node_names[node] = name
        step = {"op": "match", "key": tokens, "as": name}
        if extra_key is not None:
            step["extra_key"] = extra_key
        expect = {"prefix_len": prefix_len}
        if "mamba" in self.components:
            expect["mamba_branching_seqlen"] = mamba_branching_seqlen
        step["expect"] = expect
        if cow:
            step["description"] = "cow_mamba: the request's own copy of the state is not part of the trace"
        return step

    def insert(self, tokens: list[int], extra_key: Optional[str], swa_evicted_seqlen: int, node: Any,
               prefix_len: int, page_size: int) -> Line:
        if swa_evicted_seqlen % page_size:
            return (f"insert of {len(tokens)} tokens with swa_evicted_seqlen {swa_evicted_seqlen}, not a multiple "
                    f"of page_size {page_size}: not expressible as an insert op")
        name = self._name("i")
        self._node_names[node] = name
        step: dict = {"op": "insert", "key": tokens, "as": name}
        if extra_key is not None:
            step["extra_key"] = extra_key
        if swa_evicted_seqlen:
            step["swa_evicted_seqlen"] = swa_evicted_seqlen
        step["expect"] = {"prefix_len": prefix_len}
        return step

    def lock(self, node: Any, receipt: Hashable, skipped: tuple[str, ...] = (), is_root: bool = False) -> Line:
        if is_root:
            return "inc_lock_ref on the root: nothing to lock"
        if skipped:
            return f"inc_lock_ref(node {node}) skipping {', '.join(skipped)}: a lock op takes every component"
        target = self._node_names.get(node)
        if target is None:
            return f"inc_lock_ref(node {node}): no recorded match or insert ended on that node"
        name = self._name("L")
        self._open.append(_OpenLock(name, node, receipt))
        return {"op": "lock", "match": target, "as": name}

    def _find_lock(self, node: Any, receipt: Hashable, keep: bool) -> Optional[str]:
        """The open lock on ``node`` with exactly this receipt (the latest such). No
        guessing: a lock taken before recording, or one whose lock op could not be
        written, must not release another lock on replay."""
        exact = [k for k, lock in enumerate(self._open) if lock.node == node and lock.receipt == receipt]
        if not exact:
            return None
        return self._open[exact[-1]].name if keep else self._open.pop(exact[-1]).name

    def unlock(self, node: Any, receipt: Hashable, is_root: bool = False) -> Line:
        if is_root:
            return "dec_lock_ref on the root: nothing to unlock"
        name = self._find_lock(node, receipt, keep=False)
        if name is None:
            return f"dec_lock_ref(node {node}): releases a lock the trace does not hold (taken before recording, or not recordable)"
        return {"op": "unlock", "lock": name}

    def release_window(self, node: Any, receipt: Hashable, is_root: bool = False, already: bool = False) -> Line:
        if is_root:
            return "release_swa on the root: nothing to release"
        if already:
            return f"release_swa(node {node}) on a lock whose window part is already released: SGLang does nothing"
        name = self._find_lock(node, receipt, keep=True)
        if name is None:
            return f"release_swa(node {node}): a lock the trace does not hold (taken before recording, or not recordable)"
        return {"op": "release_window", "lock": name}

    def evict(self, asked: dict[str, int], evicted: dict[str, int], for_alloc: bool) -> dict:
        """``evict`` replays as itself; ``evict_for_alloc`` (which evicts until the
        pools reach a target) as an evict of what it evicted: the same victims, in
        the same order, when the two trees agree."""
        amounts = evicted if for_alloc else asked
        step: dict = {"op": "evict", **{c: n for c, n in amounts.items() if c in self.components and n}}
        step["expect"] = {f"{c}_evicted": evicted.get(c, 0) for c in ("full", "swa", "mamba") if c in self.components}
        if for_alloc:
            asked_text = ", ".join(f"{c}={n}" for c, n in asked.items() if n) or "nothing"
            step["description"] = f"evict_for_alloc({asked_text}): recorded as what it evicted"
        return step


def state_expect(sizes: dict[str, tuple[int, int]]) -> dict[str, int]:
    """The periodic state check: each component's evictable and protected sizes (the
    tree's own counts; pool availability also counts what running requests hold
    outside the tree, which a replay does not recreate)."""
    out = {}
    for name, (evictable, protected) in sizes.items():
        out[f"{name}_evictable"] = evictable
        out[f"{name}_protected"] = protected
    return out
