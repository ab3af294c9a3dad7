"""PagedAllocator (page sizes 1 and 4) and prefix_fingerprints."""

from __future__ import annotations

import random

import pytest
import torch

from cache.basics.errors import CacheError, DoubleFreeError, ForeignIndexError, PoolError, PoolExhaustedError
from cache.pools import KVFingerprintBuffer, PagedAllocator, prefix_fingerprints

CPU = torch.device("cpu")
P_MOD = 2**31 - 1
BASE = 1_000_003


@pytest.fixture(autouse=True, params=["numpy", "torch"])
def allocator_path(request, monkeypatch):
    """Every test on both paths: numpy views (the CPU's) and torch ops (a GPU's, run here)."""
    if request.param == "torch":
        real_init = PagedAllocator.__init__

        def torch_only(self, *args, **kwargs):
            real_init(self, *args, **kwargs)
            self.on_host = False

        monkeypatch.setattr(PagedAllocator, "__init__", torch_only)
    return request.param


def test_the_cpu_works_through_numpy_views_of_the_same_tensors(allocator_path):
    pool = PagedAllocator(16, 1, CPU)
    assert pool.on_host is (allocator_path == "numpy")
    slots = pool.alloc(3)
    assert slots.tolist() == [0, 1, 2] and pool.owned_mask()[:4].tolist() == [1, 1, 1, 0]
    pool.free(slots[1:2])
    assert pool.free_pages_list()[-1] == 1 and pool.owned_mask()[:4].tolist() == [1, 0, 1, 0]


@pytest.fixture(params=[1, 4], ids=lambda ps: f"ps{ps}")
def ps(request) -> int:
    return request.param


def make(ps: int, pages: int = 8) -> PagedAllocator:
    return PagedAllocator(pages * ps, ps, CPU, "full")


def state(pool: PagedAllocator):
    return pool.available_size(), sorted(pool.free_pages_list()), pool.owned_mask().tolist()


def t(xs) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def assert_consistent(pool: PagedAllocator) -> None:
    free = pool.free_pages_list()
    assert len(set(free)) == len(free)
    owned = pool.owned_mask().tolist()
    assert all(o in (0, 1) for o in owned)
    assert {p for p, o in enumerate(owned) if o == 0} == set(free)
    assert pool.available_size() == len(free) * pool.page_size


# ---- allocator ---------------------------------------------------------------------------


def test_fresh_pool(ps):
    pool = make(ps)
    assert pool.available_size() == pool.size == 8 * ps
    assert sorted(pool.free_pages_list()) == list(range(8))
    assert_consistent(pool)


def test_alloc_and_free_roundtrip(ps):
    pool = make(ps)
    a = pool.alloc(3 * ps)
    assert a.dtype == torch.int64 and a.shape == (3 * ps,)
    assert len(set(a.tolist())) == 3 * ps
    assert all(0 <= s < pool.size for s in a.tolist())
    assert pool.available_size() == 5 * ps
    b = pool.alloc(2 * ps)
    assert not set(a.tolist()) & set(b.tolist())
    assert pool.available_size() == 3 * ps
    assert pool.free(a) == 3 * ps
    assert pool.available_size() == 6 * ps
    assert pool.free(b) == 2 * ps
    assert pool.available_size() == pool.size
    assert_consistent(pool)


def test_alloc_zero(ps):
    pool = make(ps)
    before = state(pool)
    out = pool.alloc(0)
    assert out.shape == (0,)
    assert pool.free(out) == 0
    assert state(pool) == before


def test_page_granularity(ps):
    pool = make(ps)
    slots = pool.alloc(ps + 1)  # one full page and one slot of another
    assert slots.shape == (ps + 1,)
    assert pool.available_size() == pool.size - 2 * ps
    pages = [s // ps for s in slots.tolist()]
    # whole pages are handed out: the first ps slots are one page, in order
    assert pages[:ps] == [pages[0]] * ps
    assert slots[:ps].tolist() == list(range(pages[0] * ps, pages[0] * ps + ps))
    assert slots[ps].item() % ps == 0 and pages[ps] != pages[0]
    # freeing any slot of a page returns the whole page
    assert pool.free(slots[ps:]) == ps
    assert pool.free(slots[:1]) == ps
    assert pool.available_size() == pool.size
    if ps > 1:
        # the rest of that page went back with its first slot
        with pytest.raises(DoubleFreeError):
            pool.free(slots[1:ps])
    assert_consistent(pool)


def test_pages_for(ps):
    pool = make(ps)
    assert pool.pages_for(0) == 0
    assert pool.pages_for(1) == 1
    assert pool.pages_for(ps) == 1
    assert pool.pages_for(ps + 1) == 2
    assert pool.pages_for(3 * ps) == 3


def test_exhaustion(ps):
    pool = make(ps)
    a = pool.alloc(6 * ps)
    before = state(pool)
    with pytest.raises(PoolExhaustedError, match="exhausted"):
        pool.alloc(2 * ps + 1)
    assert state(pool) == before
    b = pool.alloc(2 * ps)  # exactly what is left
    assert pool.available_size() == 0
    with pytest.raises(PoolExhaustedError):
        pool.alloc(1)
    assert pool.alloc(0).shape == (0,)
    pool.free(a)
    pool.free(b)
    assert pool.available_size() == pool.size
    assert_consistent(pool)


def test_whole_pool(ps):
    pool = make(ps)
    slots = pool.alloc(pool.size)
    assert sorted(slots.tolist()) == list(range(pool.size))
    with pytest.raises(PoolExhaustedError):
        pool.alloc(1)
    pool.free(slots)
    assert pool.available_size() == pool.size


def test_double_free_across_calls(ps):
    pool = make(ps)
    a = pool.alloc(2 * ps)
    keep = pool.alloc(ps)
    pool.free(a)
    before = state(pool)
    with pytest.raises(DoubleFreeError, match="double free"):
        pool.free(a)
    assert state(pool) == before
    # a mix of an owned page and a free one: all or nothing
    with pytest.raises(DoubleFreeError):
        pool.free(torch.cat([keep, a[:1]]))
    assert state(pool) == before
    assert pool.free(keep) == ps
    assert_consistent(pool)


def test_double_free_within_one_call(ps):
    pool = make(ps)
    a = pool.alloc(2 * ps)
    before = state(pool)
    if ps == 1:
        with pytest.raises(DoubleFreeError):
            pool.free(torch.cat([a, a[:1]]))
        assert state(pool) == before
    # an owned page together with one never allocated
    never = [p for p in range(pool.num_pages) if p in pool.free_pages_list()][0]
    with pytest.raises(DoubleFreeError):
        pool.free(torch.cat([a, t([never * ps])]))
    assert state(pool) == before
    assert pool.free(a) == 2 * ps
    assert_consistent(pool)


def test_an_empty_free_frees_nothing_and_is_checked_like_any_other(ps):
    pool = make(ps)
    before = state(pool)
    assert pool.free(t([])) == 0 and pool.free(t([]), trusted=True) == 0
    with pytest.raises(ForeignIndexError, match="1-D int64"):
        pool.free(torch.empty(0, dtype=torch.int32))
    assert state(pool) == before


def test_holds_ids_names_only_ids_in_the_pool(ps):
    pool = make(ps)
    size = pool.size
    assert pool.holds_ids(t([])) is True and pool.holds_ids(t([0, size - 1, 3])) is True
    for bad in ([-1], [size], [0, 2**40], [-(2**62), 1], [2**63 - 1]):
        assert pool.holds_ids(t(bad)) is False, bad


def test_free_never_allocated(ps):
    pool = make(ps)
    before = state(pool)
    with pytest.raises(DoubleFreeError):
        pool.free(t([0]))
    assert state(pool) == before


@pytest.mark.parametrize(
    "bad, msg",
    [
        (lambda n: t([n]), "out of range"),
        (lambda n: t([-1]), "out of range"),
        (lambda n: t([0, n + 3]), "out of range"),
        (lambda n: torch.tensor([0], dtype=torch.int32), "1-D int64"),
        (lambda n: torch.tensor([0.0]), "1-D int64"),
        (lambda n: torch.zeros((1, 1), dtype=torch.int64), "1-D int64"),
    ],
)
def test_foreign_index(ps, bad, msg):
    pool = make(ps)
    a = pool.alloc(ps)
    before = state(pool)
    with pytest.raises(ForeignIndexError, match=msg):
        pool.free(bad(pool.size))
    assert state(pool) == before
    pool.free(a)
    assert pool.available_size() == pool.size


def test_error_hierarchy():
    for cls in (DoubleFreeError, ForeignIndexError, PoolExhaustedError):
        assert issubclass(cls, PoolError) and issubclass(cls, CacheError)


def test_bad_construction():
    with pytest.raises(ValueError):
        PagedAllocator(10, 4, CPU)  # not a multiple of the page
    with pytest.raises(ValueError):
        PagedAllocator(0, 1, CPU)


def test_clear(ps):
    pool = make(ps)
    pool.alloc(5 * ps)
    pool.clear()
    assert pool.available_size() == pool.size
    assert_consistent(pool)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_alloc_free_model(ps, seed):
    rng = random.Random(seed)
    pool = make(ps, pages=16)
    held: list[torch.Tensor] = []
    free_pages = 16
    for _ in range(400):
        if held and rng.random() < 0.45:
            slots = held.pop(rng.randrange(len(held)))
            assert pool.free(slots) == pool.pages_for(slots.shape[0]) * ps
            free_pages += pool.pages_for(slots.shape[0])
        else:
            n = rng.randint(1, 3 * ps)
            need = pool.pages_for(n)
            if need > free_pages:
                with pytest.raises(PoolExhaustedError):
                    pool.alloc(n)
                continue
            slots = pool.alloc(n)
            free_pages -= need
            held.append(slots)
        assert pool.available_size() == free_pages * ps
        used = [s for h in held for s in h.tolist()]
        assert len(used) == len(set(used))
        used_pages = {s // ps for s in used}
        assert not used_pages & set(pool.free_pages_list())
        assert_consistent(pool)


# ---- fingerprints --------------------------------------------------------------------


def reference(tokens: list[int]) -> list[int]:
    out, h = [], 0
    for tok in tokens:
        h = (h * BASE + tok + 1) % P_MOD
        out.append(h)
    return out


@pytest.mark.parametrize(
    "tokens",
    [
        [0],
        [1, 2, 3, 4, 5],
        [2**31 - 1, 2**31 - 2, 0, 7],  # t + 1 == p for the first token
        list(range(1000, 0, -1)),
    ],
)
def test_fingerprints_match_reference(tokens):
    got = prefix_fingerprints(tokens, CPU)
    assert got.dtype == torch.int64
    assert got.tolist() == reference(tokens)


def test_fingerprints_long_random_sequence():
    rng = random.Random(7)
    tokens = [rng.randrange(2**31) for _ in range(10_000)]  # past the initial power table
    assert prefix_fingerprints(tokens, CPU).tolist() == reference(tokens)


def test_fingerprints_tensor_and_list_agree():
    tokens = [5, 9, 1, 0, 42]
    assert torch.equal(prefix_fingerprints(tokens, CPU), prefix_fingerprints(torch.tensor(tokens), CPU))
    assert prefix_fingerprints(torch.tensor(tokens, dtype=torch.int32)).tolist() == reference(tokens)


def test_fingerprints_empty():
    assert prefix_fingerprints([], CPU).shape == (0,)


def test_fingerprints_are_prefix_closed():
    tokens = list(range(50, 90))
    full = prefix_fingerprints(tokens, CPU)
    for n in (1, 7, 40):
        assert torch.equal(prefix_fingerprints(tokens[:n], CPU), full[:n])


def test_different_prefixes_differ():
    a = list(range(100, 164))
    for k in (0, 1, 31, 63):
        b = list(a)
        b[k] += 1
        fa, fb = prefix_fingerprints(a, CPU).tolist(), prefix_fingerprints(b, CPU).tolist()
        assert fa[:k] == fb[:k]
        # the difference (b_k - a_k) * B**(i-k) is never 0 mod a prime: every later
        # prefix differs too
        assert all(x != y for x, y in zip(fa[k:], fb[k:]))
    # same multiset, different order
    assert prefix_fingerprints([1, 2], CPU)[-1] != prefix_fingerprints([2, 1], CPU)[-1]
    # token 0 is not "nothing": [0] and [0, 0] and [] are all distinct
    assert reference([0]) == [1] and prefix_fingerprints([0, 0], CPU).tolist() == [1, BASE + 1]


def test_kv_buffer_mismatches():
    buf = KVFingerprintBuffer(16, CPU)
    tokens = [3, 1, 4, 1, 5]
    slots = t([9, 2, 7, 0, 11])
    assert buf.mismatches(slots, tokens) == [0, 1, 2, 3, 4]  # nothing written yet
    buf.write(slots, prefix_fingerprints(tokens, CPU))
    assert buf.mismatches(slots, tokens) == []
    assert buf.mismatches(slots, [3, 1, 9, 1, 5]) == [2, 3, 4]
    assert buf.mismatches(slots[:3], tokens) == []


@pytest.mark.parametrize("segments", [1, 2, 3])
def test_continued_hashes_equal_the_whole_paths_hashes(segments):
    """Segments after prefixes hash as the whole path does past the prefix: one segment
    (the probe's usual case) and several at once."""
    from array import array

    from cache.pools.kv_buffer import continue_hashes, prefix_hashes

    rng = random.Random(segments)
    keys, starts, expected = [], [], []
    for _ in range(segments):
        prefix = [rng.randrange(2**31 - 1) for _ in range(rng.choice([0, 1, 7, 300]))]
        segment = [rng.randrange(2**31 - 1) for _ in range(rng.choice([0, 1, 5, 1000]))]
        whole = prefix_hashes(torch.tensor(prefix + segment, dtype=torch.int64))
        keys.append(array("i", segment).tobytes())
        starts.append(int(whole[len(prefix) - 1]) if prefix else 0)
        expected.extend(whole[len(prefix):].tolist())
    assert continue_hashes(keys, starts).tolist() == expected
