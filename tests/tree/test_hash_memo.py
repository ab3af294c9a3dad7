"""The fingerprint hashes answered from what they remember (``pools/hash_memos.py``: the
last tokens hashed, the node segments continued lately): every answer equals the hash
computed afresh, whatever was hashed before, and the per-step check still catches a
wrong KV on the node it answers for."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest

from cache import InsertParams, MatchPrefixParams, RadixKey, UnifiedRadixCache, check_invariants
from cache.checks.invariants import verify_match
from cache.checks.incremental import probe
from cache.pools.kv_buffer import continue_hashes, prefix_hashes

P, B = 2**31 - 1, 1_000_003


def plain_hashes(tokens, start: int = 0) -> list[int]:
    """The fingerprint at every position after a prefix whose fingerprint is ``start``
    (0: none), one token at a time: h = h * B + (t + 1) mod p."""
    out, h = [], start
    for t in tokens:
        h = (h * B + t + 1) % P
        out.append(h)
    return out


def test_prefixes_of_the_last_tokens_and_other_tokens_hash_as_afresh():
    rng = random.Random(5)
    first = [rng.randrange(50_000) for _ in range(600)]
    other = first[:599] + [first[599] + 1]  # the same but for the last token
    for tokens in (first, first[:1], first[:300], first, other, first[:599], other, first + [7, 8], first):
        assert prefix_hashes(np.array(tokens, dtype=np.int32)).tolist() == plain_hashes(tokens)
    wide = [2**40, -(2**40), 3, 2**62]  # ids past int32 (a list, not a packed key) are reduced first
    assert prefix_hashes(wide).tolist() == plain_hashes(wide)


def test_tokens_changed_in_place_after_hashing_are_hashed_again():
    """The memo keeps a copy: a caller's buffer (a request's fill ids) may change later."""
    tokens = array("q", range(100))
    assert prefix_hashes(tokens).tolist() == plain_hashes(tokens)
    tokens[40] = 999
    assert prefix_hashes(tokens).tolist() == plain_hashes(tokens)
    assert prefix_hashes(tokens[:50]).tolist() == plain_hashes(tokens[:50])


def test_the_hashes_handed_out_are_read_only():
    tokens = list(range(1, 60))
    hashes = prefix_hashes(tokens)
    with pytest.raises(ValueError):
        hashes[3] = 0
    assert prefix_hashes(tokens[:10]).tolist() == plain_hashes(tokens[:10])


def test_segments_with_offsets_hash_as_without_them():
    """Segments of the last tokens hashed (at their offsets, after their own prefix's
    fingerprint) and segments that are not (other tokens, a wrong start, a wrong or
    negative offset) together give what hashing every segment gives."""
    rng = random.Random(11)
    request = [rng.randrange(50_000) for _ in range(500)]
    whole = plain_hashes(request)
    prefix_hashes(request)  # the step's request, hashed last
    stranger = [rng.randrange(50_000) for _ in range(40)]
    cases = [  # (tokens, offset, start)
        (request[:100], 0, 0),
        (request[100:350], 100, whole[99]),
        (request[350:], 350, whole[349]),
        (request[100:350], 100, whole[98]),  # a start that is not the prefix's
        (request[100:350], 99, whole[98]),  # the tokens are not at that offset
        (request[200:260], -1, whole[199]),  # an offset no path has (negative)
        (stranger, 0, 0),
        (request[450:], 450, whole[449]),
    ]
    keys = [array("i", tokens).tobytes() for tokens, _, _ in cases]
    starts = [start for _, _, start in cases]
    offsets = [offset for _, offset, _ in cases]
    expected = continue_hashes(keys, starts).tolist()
    assert continue_hashes(keys, starts, offsets).tolist() == expected
    assert continue_hashes(keys[:3], starts[:3], offsets[:3]).tolist() == whole  # every one from the memo
    for k in range(len(cases)):
        assert continue_hashes(keys[k:k + 1], starts[k:k + 1], offsets[k:k + 1]).tolist() == \
            continue_hashes(keys[k:k + 1], starts[k:k + 1]).tolist()
    assert continue_hashes([], [], []).tolist() == []


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("where", ["first", "last"])
def test_the_probe_still_catches_a_wrong_kv_on_the_node_just_inserted(page_size, where):
    """After an insert the memo holds the request's hashes; a slot of the new node
    holding another fingerprint still fails the probe (which then hands over to the
    sweep), and a match over it names the slot."""
    cache = UnifiedRadixCache(components=("full",), kv_size=256, page_size=page_size, device="cpu")
    shared = list(range(1, 17))
    for tokens in (shared + [20, 21, 22, 23], shared + [30, 31, 32, 33, 34, 35, 36, 37]):
        slots = cache.alloc_kv(len(tokens))
        cache.write_kv(slots, tokens)
        cache.tree.take_touched()
        cache.insert(InsertParams(RadixKey(tokens), slots))
    touched = cache.tree.take_touched()
    assert probe(cache, touched) and check_invariants(cache, touched=touched) == []
    leaf = max(cache.tree.nodes.values(), key=lambda node: node.id)  # the second insert's new node
    slot = int(leaf.data[0].value[0 if where == "first" else -1])
    cache.kv_buffer.data[slot] = (int(cache.kv_buffer.data[slot]) + 1) % P
    assert not probe(cache, touched)
    tokens = shared + [30, 31, 32, 33, 34, 35, 36, 37]
    result = cache.match_prefix(MatchPrefixParams(RadixKey(tokens)))
    assert [v.name for v in verify_match(cache, RadixKey(tokens), result)] == ["match.fingerprint"]


@pytest.mark.parametrize("start", [0, 1, P - 1, -1, 2**40])
def test_segments_of_extreme_tokens_after_any_start_hash_as_one_token_at_a_time(start):
    """The int32 extremes, after any start (a corrupt buffer may hold anything), one
    segment alone and beside others."""
    tokens = [2**31 - 1, -(2**31), 0, -1, 2**31 - 2] * 40
    key = array("i", tokens).tobytes()
    if start == 0:  # a packed key's int32 tokens, and the same ids as wide ints
        assert prefix_hashes(np.frombuffer(key, dtype=np.int32)).tolist() == plain_hashes(tokens)
        assert prefix_hashes([t + 1 for t in tokens]).tolist() != plain_hashes(tokens)  # another key: not the memo's
        assert prefix_hashes(array("q", tokens)).tolist() == plain_hashes(tokens)
    assert continue_hashes([key], [start]).tolist() == plain_hashes(tokens, start % P)
    assert continue_hashes([key, key], [start, 0]).tolist() == plain_hashes(tokens, start % P) + plain_hashes(tokens)


def test_kept_segments_stay_within_their_bound_oldest_out():
    from cache.pools.hash_memos import SegmentHashes

    kept = SegmentHashes(max_tokens=100)
    keys = [array("i", [k] * 30).tobytes() for k in range(5)]
    for k, key in enumerate(keys):
        kept.keep(key, k, np.arange(30, dtype=np.int64))
        assert kept.tokens <= 100
    assert [kept.get(key, k) is not None for k, key in enumerate(keys)] == [False, False, True, True, True]
    assert kept.get(keys[4], 0) is None  # another start: another segment
    kept.keep(b"", 0, np.zeros(0, dtype=np.int64))
    kept.keep(bytearray(keys[0]), 0, np.arange(30, dtype=np.int64))  # a buffer that may change: not kept
    kept.keep(array("i", [9] * 101).tobytes(), 0, np.arange(101, dtype=np.int64))  # over the bound alone
    assert kept.tokens == 90 and kept.get(bytearray(keys[0]), 0) is None
    base = np.arange(60, dtype=np.int64)
    kept.keep(keys[0], 7, base[:30])
    assert kept.get(keys[0], 7).base is not base and not kept.get(keys[0], 7).flags.writeable


def test_a_node_key_seen_before_is_answered_with_the_same_hashes():
    """The probe re-reads a node (the parent of an evicted leaf, an ancestor of the next
    insert) by its key and its parent's fingerprint: the same answer, whatever was
    hashed between, and a changed start is hashed afresh."""
    rng = random.Random(3)
    key = array("i", [rng.randrange(50_000) for _ in range(200)]).tobytes()
    first = continue_hashes([key], [12345]).tolist()
    prefix_hashes([rng.randrange(50_000) for _ in range(300)])  # something else hashed meanwhile
    assert continue_hashes([key], [12345]).tolist() == first
    assert continue_hashes([key, key], [12345, 54321]).tolist() == first + continue_hashes([key], [54321]).tolist()
    assert first == plain_hashes(np.frombuffer(key, dtype=np.int32).tolist(), 12345)


def test_threads_hashing_different_requests_each_get_their_own_hashes():
    """A workbench checks chapters in threads: each thread's answers stay its own
    tokens' hashes while the other replaces what was hashed last."""
    import threading

    rng = random.Random(8)
    requests = [[rng.randrange(50_000) for _ in range(rng.randrange(200, 900))] for _ in range(2)]
    expected = [plain_hashes(tokens) for tokens in requests]
    keys = [array("i", tokens[100:]).tobytes() for tokens in requests]
    wrong = []

    def work(k: int) -> None:
        tokens = np.array(requests[k], dtype=np.int32)
        for n in range(300):
            cut = 50 + n % 150
            if prefix_hashes(tokens[:cut]).tolist() != expected[k][:cut]:
                wrong.append((k, "prefix", n))
            start = (expected[k][99] + (n % 3 == 0)) % P  # every third: not the prefix's fingerprint
            got = continue_hashes([keys[k]], [start], [100]).tolist()
            want = expected[k][100:] if n % 3 else plain_hashes(requests[k][100:], start)
            if got != want:
                wrong.append((k, "segment", n))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
