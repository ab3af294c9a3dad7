"""Building a ``RadixKey`` from what callers hold: lists, tuples, arrays, tensors and
ranges give the same key; bad ids get the same clear error whatever the container."""

from __future__ import annotations

from array import array

import numpy as np
import pytest
import torch

from cache import InsertParams, RadixKey, UnifiedRadixCache
from cache.basics.errors import InvalidKeyError
from cache.basics import keys
from cache.basics.keys import MAX_TOKEN_ID, unpack_tokens

TOKENS = [0, 1, 2, 255, 256, 257, 65535, 65536, 31999, MAX_TOKEN_ID]


@pytest.mark.parametrize("make", [
    list, tuple, lambda t: array("i", t), lambda t: array("I", t), lambda t: array("q", t), lambda t: array("L", t),
    lambda t: array("l", t), lambda t: array("Q", t),
    lambda t: torch.tensor(t), lambda t: torch.tensor(t, dtype=torch.int32), lambda t: np.array(t),
    lambda t: np.array(t, dtype=np.uint32), lambda t: np.array(t, dtype=np.uint64),
    lambda t: np.array([x for x in t for _ in (0, 1)], dtype=np.int64)[::2], lambda t: iter(t),
], ids=["list", "tuple", "array-i", "array-I", "array-q", "array-L", "array-l", "array-Q", "tensor64", "tensor32",
        "numpy", "numpy-u4", "numpy-u8", "numpy-strided", "iter"])
def test_every_container_packs_to_the_same_key(make):
    key = RadixKey(make(TOKENS))
    assert key == RadixKey(TOKENS) and key.token_ids == TOKENS and len(key) == len(TOKENS)


def test_a_range_and_empty_containers():
    assert RadixKey(range(3, 9)).token_ids == [3, 4, 5, 6, 7, 8]
    for empty in ([], (), array("I"), torch.empty(0, dtype=torch.int64), np.array([], dtype=np.int64), range(0)):
        assert len(RadixKey(empty)) == 0


def test_a_packed_key_round_trips_through_bytes():
    key = RadixKey(TOKENS, extra_key="lora-1")
    assert unpack_tokens(key.data) == TOKENS and RadixKey.from_bytes(key.data, "lora-1") == key
    assert key != RadixKey(TOKENS)  # the namespace is part of the key


@pytest.mark.parametrize("bad, named", [
    ([1, -2, 3], "non-negative (got -2)"),
    ([2**31], "below 2**31 (got 2147483648)"),
    ([2**32], "below 2**31 (got 4294967296)"),
    ([2**64], "below 2**31 (got 18446744073709551616)"),
    ([True], "(got True)"),
    ([5, 256, False], "(got False)"),
    ((1, True), "(got True)"),
    ([1.0], "(got 1.0)"),
    ([1, "2"], "(got '2')"),
    ([None], "(got None)"),
    (array("i", [3, -1]), "non-negative (got -1)"),
    (array("q", [3, -1]), "non-negative (got -1)"),  # 64-bit ids: checked and narrowed on the buffer
    (array("q", [5, -(2**33)]), "non-negative (got -8589934592)"),
    (array("q", [2**31]), "below 2**31 (got 2147483648)"),
    (array("q", [1, 2**40 + 5]), "below 2**31 (got 1099511627781)"),
    (array("Q", [2**63 + 1]), "below 2**31 (got 9223372036854775809)"),
    (np.array([3, -1], dtype=np.int64), "non-negative (got -1)"),
    (torch.tensor([2**32 + 1]), "below 2**31 (got 4294967297)"),
    (torch.tensor([4, -7]), "non-negative (got -7)"),
    (np.array([2**31]), "(got 2147483648)"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_bad_ids_are_named_whatever_the_container(bad, named):
    with pytest.raises(InvalidKeyError, match=r"token ids must be non-negative") as info:
        RadixKey(bad)
    assert named in str(info.value)


@pytest.mark.parametrize("checked_cast", [True, False], ids=["value-checking-cast", "max-then-cast"])
def test_both_ways_of_narrowing_64_bit_ids_agree(monkeypatch, checked_cast):
    """numpy 2.4+ checks and narrows 64-bit ids in one cast; older numpy takes a max first."""
    if checked_cast and not keys._casts_check_values():
        pytest.skip("this numpy has no value-checking cast")
    monkeypatch.setattr(keys, "_CHECKED_CAST", checked_cast)
    for wide in (array("q", TOKENS), array("Q", TOKENS), np.array(TOKENS, dtype=np.int64), torch.tensor(TOKENS)):
        assert RadixKey(wide).data == RadixKey(TOKENS).data
    for bad, named in [(array("q", [3, -1]), "non-negative (got -1)"), (array("q", [7, 2**31]), "(got 2147483648)"),
                       (array("q", [2**32]), "(got 4294967296)"), (array("Q", [2**63 + 1]), "(got 9223372036854775809)"),
                       (torch.tensor([4, -7]), "non-negative (got -7)")]:
        with pytest.raises(InvalidKeyError, match=r"token ids must be non-negative") as info:
            RadixKey(bad)
        assert named in str(info.value)


@pytest.mark.parametrize("bad, message", [
    ("abc", "not a string or bytes"), (b"ab", "not a string or bytes"), (bytearray(b"a"), "not a string or bytes"),
    (array("d", [1.0]), "array of type 'd'"), (torch.tensor([1.0]), "integer tensor"),
    (torch.tensor([True]), "integer tensor"), (torch.tensor([[1, 2]]), "2-D"), (np.array([0.5]), "integer"),
])
def test_containers_that_cannot_hold_token_ids_are_refused(bad, message):
    with pytest.raises(InvalidKeyError, match=message):
        RadixKey(bad)


def test_ones_and_zeros_that_are_ints_are_not_mistaken_for_bools():
    ids = [0, 1] * 300 + [256, 257, 512, 513]  # many tokens whose low byte is 0 or 1
    assert RadixKey(ids).token_ids == ids


def test_the_cache_calls_accept_any_container_and_refuse_bad_ids_unchanged():
    cache = UnifiedRadixCache(components=("full",), kv_size=32, device="cpu")
    slots = cache.alloc_kv(6)
    cache.insert(InsertParams(torch.arange(1, 7), slots))
    assert cache.match_prefix(np.arange(1, 5)).prefix_len == 4
    assert cache.match_prefix(range(1, 7)).prefix_len == 6
    before = cache.snapshot()
    with pytest.raises(InvalidKeyError):
        cache.match_prefix([1, 2, True])
    assert cache.snapshot() == before


def test_a_request_keeps_one_key_that_grows_with_its_tokens():
    cache = UnifiedRadixCache(components=("full",), kv_size=64, device="cpu")
    req = cache.new_request([5, 6, 7, 8], rid="r1")
    cache.extend_request(req, [9, 10])
    cache.extend_request(req, np.array([11]))
    assert bytes(req.token_bytes) == RadixKey(req.fill_ids).data
    with pytest.raises(InvalidKeyError):
        cache.extend_request(req, [12, -1])
    assert bytes(req.token_bytes) == RadixKey([5, 6, 7, 8, 9, 10, 11]).data  # a refused decode adds nothing
    cache.release_kv_cache(req)
    assert cache.match_prefix([5, 6, 7, 8, 9, 10, 11]).prefix_len == 7
