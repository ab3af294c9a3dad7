"""Page hashes: the content address of each page on a node, as SGLang 0.5.23 computes them.

A page's hash is sha256(previous page's digest || the page's tokens as little-endian
uint32). The chain runs from the root, so a hash names a page *and* everything before
it: the storage tier keys pages by it and KV events publish it. Our keys are already
little-endian uint32 bytes (keys.py), so a page hashes straight from ``node.key``.
A chain that starts at the root is seeded by the key's namespace (extra_key and
cache_salt); KV events seed namespaced chains from the salt alone (SGLang's "legacy"
event seed), which is why a node can carry two chains.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Optional

from .keys import TOKEN_BYTES, namespace_parts

_STORAGE_TAG = b"sglang-cache-namespace-v1"
_EVENT_SALT_TAG = b"sglang-cache-salt-v1\0"
_LITTLE = sys.byteorder == "little"


def storage_seed(extra_key: Optional[str], cache_salt: Optional[str]) -> Optional[str]:
    """The digest a root-level storage chain starts from (None: no namespace). Each part
    is written with a presence byte and its UTF-8 length, so "" and None and ("a","b") vs
    ("ab",None) all differ."""
    if extra_key is None and cache_salt is None:
        return None
    digest = hashlib.sha256(_STORAGE_TAG)
    for part in (extra_key, cache_salt):
        if part is None:
            digest.update(b"\x00")
        else:
            raw = part.encode("utf-8")
            digest.update(b"\x01" + len(raw).to_bytes(8, "little") + raw)
    return digest.hexdigest()


def event_seed(cache_salt: Optional[str]) -> Optional[str]:
    """The digest a namespaced KV-event chain starts from: the salt only, never the
    extra_key (two LoRA adapters with the same tokens publish the same blocks)."""
    if cache_salt is None:
        return None
    return hashlib.sha256(_EVENT_SALT_TAG + cache_salt.encode("utf-8")).hexdigest()


def chain(data: bytes, page_size: int, prior: Optional[str], bigram_prev: Optional[int] = None) -> list[str]:
    """Hex digests of the whole pages of ``data`` (packed tokens), chained from ``prior``.

    ``bigram_prev``: the raw token before ``data`` in an EAGLE bigram key; each unit then
    hashes as the pair (previous token, token)."""
    if not _LITTLE:  # pragma: no cover - the packed keys are native-endian
        raise RuntimeError("page hashes need a little-endian machine")
    page_bytes = page_size * TOKEN_BYTES
    whole = len(data) - len(data) % page_bytes
    if bigram_prev is not None:
        data = _bigram_words(data[:whole], bigram_prev)
        page_bytes *= 2
        whole *= 2
    digest = bytes.fromhex(prior) if prior else b""
    out = []
    for start in range(0, whole, page_bytes):
        digest = hashlib.sha256(digest + data[start : start + page_bytes]).digest()
        out.append(digest.hex())
    return out


def _bigram_words(data: bytes, prev: int) -> bytes:
    """Each token of ``data`` preceded by the token before it: (t-1, t) uint32 pairs."""
    out = bytearray()
    before = prev.to_bytes(TOKEN_BYTES, "little")
    for at in range(0, len(data), TOKEN_BYTES):
        token = data[at : at + TOKEN_BYTES]
        out += before + token
        before = token
    return bytes(out)


def node_chain(node, page_size: int, for_events: bool = False) -> list[str]:
    """A node's page hashes from its parent's last one (or the namespace seed under the
    root). ``for_events``: the KV-event chain (salt seed; the same as the storage chain
    for a node without extra_key or cache_salt)."""
    extra_key, salt, head = namespace_parts(node.namespace)
    parent = node.parent
    namespaced = extra_key is not None or salt is not None
    parent_hashes = parent.event_hashes if for_events and namespaced else parent.page_hashes
    if parent.length and parent_hashes:
        prior = parent_hashes[-1]
    elif for_events:
        prior = event_seed(salt)
    else:
        prior = storage_seed(extra_key, salt)
    prev = None
    if head is not None:
        prev = head if not parent.length else int.from_bytes(parent.key[-TOKEN_BYTES:], "little")
    return chain(node.key, page_size, prior, prev)


def split_hashes(hashes: Optional[list[str]], split_len: int, page_size: int) -> tuple:
    """(upper, lower) halves of a node's chain cut ``split_len`` tokens in."""
    if hashes is None:
        return None, None
    cut = split_len // page_size
    return hashes[:cut], hashes[cut:]


def as_int64(hash_hex: str) -> int:
    """A hash as a KV event's block id: its first 64 bits, signed."""
    value = int(hash_hex[:16], 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def chain_violations(tree, nodes) -> list[tuple[str, str]]:
    """While the tree hashes pages: each of ``nodes`` carries one hash per page, and they
    are the chain its parent's last hash and its key make (so a split, a backfill or a
    re-keyed node left no stale hash). (name, message) pairs; O(pages of ``nodes``)."""
    out = []
    ps = tree.page_size
    for node in nodes:
        if node is tree.root:
            continue
        hashes, events = node.page_hashes, node.event_hashes
        if hashes is None or events is None:
            out.append(("page_hash.chain", f"node #{node.id} has no page hashes while the tree hashes pages"))
        elif len(hashes) != node.length // ps or hashes != node_chain(node, ps):
            out.append(("page_hash.chain", f"node #{node.id}: {len(hashes)} page hash(es) for {node.length // ps} "
                                           "page(s), not the chain from its parent's last hash and its key"))
        elif events is not hashes and events != node_chain(node, ps, for_events=True):
            out.append(("page_hash.chain", f"node #{node.id}: its KV-event hashes are not its event chain"))
    return out
