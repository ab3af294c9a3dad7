"""SWA's part in the host tier (HiCache): a node's live sliding-window KV gets a host
copy in a host SWA pool. Host-only SWA counts for a match like live SWA (a load-back
restores it first); a backup copies the live SWA within one window of the node that
has no host copy yet, a load-back the host-only SWA within one window of the best
match; a load host-locks one window, like a device window lock. In the storage tier a node's
host SWA is stored page by page under the node's last page hashes, and a prefetch
stages one window of it, placed on the fetched path's tail (all or nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..base_host import HostPart, hicache_ratio_size

if TYPE_CHECKING:
    import torch

    from ..cache_view import ConfigView
    from ...basics.params import MatchResult
    from ...tree.node import ComponentData, TreeNode


class SWAHostMixin(HostPart):
    index: int
    window: int
    host_paged = True  # SWA tokens, page-granular like the device SWA pool
    storage_pool = "swa"

    @staticmethod
    def default_host_size(config: ConfigView) -> int:
        return hicache_ratio_size(config.swa_pool_size, config.page_size)

    def make_host_pool(self, size: int):
        from ...pools.host_pool import HostKVPool

        return HostKVPool(size, self.page_size, "swa_host")

    def create_host_match_validator(self):
        i, window = self.index, self.window
        run = [float("inf")]

        def validate(node: TreeNode, length: int) -> bool:
            cd = node.data[i]
            if cd.value is None and cd.host_value is None:
                run[0] = 0
                return self.ungated_tombstone(node)
            run[0] += length
            return run[0] >= window

        return validate

    @property
    def device_store(self):
        return self.pool.buffer

    def _window_up(self, node: TreeNode):
        """``node`` and its ancestors until one window of SWA (either tier) is covered;
        stops at a node with SWA on neither."""
        i, root, covered = self.index, self.tree.root, 0
        while node is not root and covered < self.window:
            cd = node.data[i]
            if cd.value is None and cd.host_value is None:
                return
            yield node, cd
            covered += node.length
            node = node.parent

    def backup_nodes(self, node: TreeNode) -> list[TreeNode]:
        """Live SWA without a host copy within one window up from ``node`` (stopping at
        a node whose backup is still in flight: a load in flight does not stop it, as
        v0.5.23's walk stops only at write_through_pending_id), root side first."""
        out = []
        for cur, cd in self._window_up(node):
            if cur.data[0].metadata.get("transfer", ("",))[0] == "backup":
                break
            if cd.value is not None and cd.host_value is None:
                out.append(cur)
        out.reverse()
        return out

    def load_back_nodes(self, best: TreeNode) -> list[TreeNode]:
        """Host-only SWA within one window up from the best match, root side first."""
        out = [cur for cur, cd in self._window_up(best) if cd.value is None]
        out.reverse()
        return out

    def load_shortfall(self, nodes: list[TreeNode], req=None) -> int:
        need = sum(n.length for n in nodes)
        return self.pool.allocator.pages_for(need) * self.page_size - self.pool.available_size()

    def alloc_for_load(self, nodes: list[TreeNode], req=None) -> torch.Tensor:
        return self.pool.allocator.alloc(sum(n.length for n in nodes))

    def free_load(self, slots: torch.Tensor) -> None:
        self.pool.allocator.free(slots, trusted=True)

    def commit_load(self, nodes: list[TreeNode], slots: torch.Tensor, req=None) -> list[torch.Tensor]:
        """Map the loaded nodes' Full slots (restored just before) to the SWA slots."""
        values, start = [], 0
        for node in nodes:
            part = slots[start : start + node.length]
            self.pool.mapping[node.data[0].value] = part
            values.append(part)
            start += node.length
        return values

    # ---- match ------------------------------------------------------------
    def finalize_host_match(self, result: MatchResult, best: TreeNode) -> MatchResult:
        """The SWA the best match's window needs from the host (host-only SWA within
        one window up from it, whole nodes, as v0.5.23 counts it)."""
        host_hit = sum(cur.length for cur, cd in self._window_up(best) if cd.value is None)
        return result._replace(swa_host_hit_length=host_hit) if host_hit else result

    # ---- insert -----------------------------------------------------------
    def recover_after_unevict(self, node: TreeNode, start: int, end: int, value, params, actions) -> None:
        """An insert brought a host-only node's Full KV back: its in-window part gets
        the incoming SWA (the host copy stays)."""
        from .actions import RebuildSWA

        live = self._clip_to_window(node, start, end, params.swa_evicted_seqlen)
        if live is not None:
            node, live_start = live
            actions.append(RebuildSWA(node.id, value[live_start:end]))

    # ---- split ------------------------------------------------------------
    def split_host_data(self, new_parent: TreeNode, child: TreeNode) -> None:
        """A host copy is cut like the value; a half left host-only joins the host
        LRU (the upper one just behind the lower), and the host window lock's boundary
        moves up with the older edge."""
        i, tree = self.index, self.tree
        upper, lower = new_parent.data[i], child.data[i]
        upper.host_lock_ref = lower.host_lock_ref
        if lower.host_value is not None:
            cut = new_parent.length
            host = lower.host_value
            upper.host_value, lower.host_value = host[:cut], host[cut:]
            lru = tree.host_lru[self.name]
            if upper.value is None and upper.host_lock_ref == 0:
                if child in lru:
                    lru.insert_after(child, new_parent)
                else:
                    lru.insert_mru(new_parent)
            if lower.value is None and lower.host_lock_ref == 0 and child not in lru:
                lru.insert_mru(child)
        boundary = lower.metadata.pop("host_uuid", None)
        if boundary is not None:
            upper.metadata["host_uuid"] = boundary

    # ---- host window lock (load-back) ------------------------------------------------
    def lock_host_copies(self, anchor: TreeNode) -> Optional[int]:
        """Host-lock one window up from ``anchor`` (tombstones included) and stamp the
        node where it was covered; returns that boundary (None: the root)."""
        tree, covered, node = self.tree, 0, anchor
        while node is not tree.root and covered < self.window:
            cd = node.data[self.index]
            tree.host_lock(node, self, +1)
            covered += node.length
            if covered >= self.window:
                if cd.metadata.get("host_uuid") is None:
                    cd.metadata["host_uuid"] = tree.new_uuid()
                return cd.metadata["host_uuid"]
            node = node.parent
        return None

    def unlock_host_copies(self, anchor: TreeNode, boundary: Optional[int]) -> None:
        tree, node = self.tree, anchor
        while node is not tree.root:
            cd: ComponentData = node.data[self.index]
            tree.host_lock(node, self, -1)
            tree.update_host_leaf_state(node)
            if boundary is not None and cd.metadata.get("host_uuid") == boundary:
                return
            node = node.parent

    # ---- the storage tier ------------------------------------------------------------
    @property
    def window_pages(self) -> int:
        return -(-self.window // self.page_size)

    def storage_backup(self, node: TreeNode):
        """Its host SWA's whole pages, keyed by the node's last page hashes."""
        host = node.data[self.index].host_value
        if host is None or not node.page_hashes:
            return None
        pages = int(host.shape[0]) // self.page_size
        return (node.page_hashes[-pages:], host[-pages * self.page_size :]) if pages else None

    def prefetch_trailing_pages(self, anchor: TreeNode, span_pages: int) -> int:
        """One window; a shorter span only at the root (there it is the whole sequence's
        SWA). Mid-tree a short span's window would start in the device prefix: none."""
        if span_pages >= self.window_pages:
            return self.window_pages
        return span_pages if span_pages and anchor is self.tree.root else 0

    def commit_prefetch(self, anchor: TreeNode, target: TreeNode, total_len: int, slots):
        """The staged window covers the last tokens placed: walk up from ``target``,
        giving each node without host SWA its part (the node split where the window
        starts inside it); a part over a node that has host SWA is not kept. Mid-tree, a
        window cut short by the hit is missing its head: none of it is kept."""
        tree, ps = self.tree, self.page_size
        pages = int(slots.shape[0]) // ps
        if target is None or not pages or (anchor is not tree.root and pages < self.window_pages):
            return [slots]
        start = total_len - pages * ps  # where the window begins, in tokens below the anchor
        pos, node, unused = total_len, target, []
        while node is not anchor and pos > start:
            node_start = pos - node.length
            fill = max(node_start, start)
            part = slots[fill - start : pos - start]
            if node.data[self.index].host_value is None and pos > fill:
                if fill > node_start:
                    tree._split_node(node, fill - node_start)
                tree.attach_fetched_host(node, self, part)
            else:
                unused.append(part)
            pos, node = node_start, node.parent
        if pos > start:
            unused.append(slots[: pos - start])
        return unused
