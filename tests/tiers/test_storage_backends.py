"""The storage backends (issue 29): the protocol on memory and on files, the byte budget
with SGLang's LRU watermark eviction, a restart of the file store, the factory, and a
differential run against SGLang 0.5.23's own file backend."""

from __future__ import annotations

import os

import pytest

from cache.tiers.backends import FileBackend, Fired, LruBudget, MemoryBackend, Rule, StorageInjector, make_backend, transfer_delay

PAGE = 64  # bytes per page in the budget tests


def page(n: int, size: int = PAGE) -> bytes:
    return bytes([n % 256]) * size


def make(kind: str, tmp_path, **kwargs):
    return MemoryBackend(**kwargs) if kind == "memory" else FileBackend(str(tmp_path / "store"), **kwargs)


@pytest.fixture
def store_dir(tmp_path):
    """The file backend's directory: absent, so the backend creates it with its marker."""
    return tmp_path / "store"


@pytest.fixture(params=["memory", "file"])
def kind(request):
    return request.param


# -- the protocol ------------------------------------------------------------------


def test_set_get_and_a_missing_key(kind, tmp_path):
    store = make(kind, tmp_path)
    assert store.set(["a", "b"], [b"one", b"two"]) == [True, True]
    assert store.get(["b", "zz", "a"]) == [b"two", None, b"one"]
    assert store.name == kind


def test_exists_prefix_stops_at_the_first_missing_key(kind, tmp_path):
    store = make(kind, tmp_path)
    store.set(["a", "b", "d"], [b"1", b"2", b"4"])
    assert store.exists_prefix(["a", "b", "c", "d"]) == 2
    assert store.exists_prefix(["c", "a"]) == 0
    assert store.exists_prefix(["a", "b", "d"]) == 3
    assert store.exists_prefix([]) == 0


def test_a_set_of_a_stored_key_keeps_the_first_page(kind, tmp_path):
    """Content-addressed: the same key is the same page, so it is never rewritten."""
    store = make(kind, tmp_path)
    store.set(["a"], [b"first"])
    assert store.set(["a"], [b"second"]) == [True]
    assert store.get(["a"]) == [b"first"]


def test_stored_keys_are_sorted_and_clear_empties(kind, tmp_path):
    store = make(kind, tmp_path, budget=1000)
    store.set(["c", "a", "b"], [b"3", b"1", b"2"])
    assert store.stored_keys() == ["a", "b", "c"]
    store.clear()
    assert store.stored_keys() == [] and store.get(["a"]) == [None]
    assert store.stats()["pages"] == 0 and store.stats()["bytes"] == 0


def test_mismatched_keys_and_pages_are_a_caller_bug(kind, tmp_path):
    with pytest.raises(ValueError, match="2 keys for 1 pages"):
        make(kind, tmp_path).set(["a", "b"], [b"x"])


# -- the byte budget ------------------------------------------------------------------


def test_one_overflow_evicts_to_the_watermark(kind, tmp_path):
    """Budget 10 pages, ratio 0.9: the 11th page evicts down to int(640*0.9) - 64 = 512
    bytes, i.e. the two oldest pages go at once, not one."""
    store = make(kind, tmp_path, budget=10 * PAGE)
    keys = [f"k{i:02}" for i in range(11)]
    for i, key in enumerate(keys[:10]):
        assert store.set([key], [page(i)]) == [True]
    assert store.stats()["evicted"] == 0
    assert store.set([keys[10]], [page(10)]) == [True]
    assert store.stored_keys() == keys[2:]
    assert store.stats()["bytes"] == 9 * PAGE and store.stats()["evicted"] == 2


def test_a_lower_ratio_evicts_more(kind, tmp_path):
    store = make(kind, tmp_path, budget=10 * PAGE, eviction_ratio=0.5)
    for i in range(11):
        store.set([f"k{i:02}"], [page(i)])
    assert store.stored_keys() == [f"k{i:02}" for i in range(6, 11)]  # 320 - 64 bytes kept, then the new page


def test_a_read_hit_and_a_reset_refresh_recency(kind, tmp_path):
    store = make(kind, tmp_path, budget=4 * PAGE, eviction_ratio=1.0)
    for key in "abcd":
        store.set([key], [page(ord(key))])
    store.get(["a"])  # a read hit: a is now the most recent
    store.set(["b"], [page(0)])  # a set of a stored key: b too
    assert store.set(["e"], [page(5)]) == [True]  # evicts the least recent: c
    assert store.stored_keys() == ["a", "b", "d", "e"]
    assert store.lru.order() == ["d", "a", "b", "e"]


def test_a_missing_key_read_does_not_refresh(kind, tmp_path):
    store = make(kind, tmp_path, budget=2 * PAGE, eviction_ratio=1.0)
    store.set(["a", "b"], [page(1), page(2)])
    store.get(["zz"])
    store.set(["c"], [page(3)])
    assert store.stored_keys() == ["b", "c"]


def test_a_page_bigger_than_the_budget_is_refused_and_nothing_is_evicted(kind, tmp_path):
    store = make(kind, tmp_path, budget=3 * PAGE)
    store.set(["a", "b"], [page(1), page(2)])
    assert store.set(["big", "c"], [page(9, 3 * PAGE + 1), page(3)]) == [False, True]
    assert store.stored_keys() == ["a", "b", "c"]
    assert store.stats()["refused"] == 1 and store.stats()["evicted"] == 0
    assert store.get(["big"]) == [None]


def test_a_page_exactly_the_budget_fits_alone(kind, tmp_path):
    store = make(kind, tmp_path, budget=2 * PAGE)
    store.set(["a"], [page(1)])
    assert store.set(["whole"], [page(2, 2 * PAGE)]) == [True]
    assert store.stored_keys() == ["whole"]


def test_budget_counts_payload_bytes_not_the_file_header(store_dir):
    """Three 64-byte pages fill a 192-byte budget exactly, although each file is bigger."""
    store = FileBackend(str(store_dir), budget=3 * PAGE)
    assert store.set(["a", "b", "c"], [page(1), page(2), page(3)]) == [True] * 3
    assert all(os.path.getsize(store_dir / f"{k}.bin") > PAGE for k in "abc")
    assert store.stats()["bytes"] == 3 * PAGE and store.stats()["evicted"] == 0


def test_still_over_after_evicting_is_refused():
    """Pages whose write is in flight (reserved, not committed) cannot be evicted, as in
    SGLang's evictor; when they alone fill the budget a new page is refused."""
    dropped = []
    lru = LruBudget(budget=3 * PAGE, drop=dropped.append)
    assert lru.reserve("a", PAGE) and lru.reserve("b", PAGE) and lru.reserve("c", PAGE)
    assert lru.reserve("d", PAGE) is False  # nothing evictable: still over
    assert dropped == [] and lru.order() == ["a", "b", "c"] and lru.refused == 1
    lru.commit("a")
    assert lru.reserve("d", PAGE) is True  # a goes; b and c stay although older than d
    assert dropped == ["a"] and lru.order() == ["b", "c", "d"]


def test_a_drop_that_fails_keeps_the_page_and_refuses():
    def stuck(key):
        raise PermissionError(key)

    lru = LruBudget(budget=2 * PAGE, drop=stuck)
    for key in "ab":
        lru.reserve(key, PAGE)
        lru.commit(key)
    assert lru.reserve("c", PAGE) is False
    assert lru.order() == ["a", "b"] and lru.total == 2 * PAGE


def test_a_memory_store_without_budget_never_evicts():
    store = MemoryBackend()
    store.set([f"k{i}" for i in range(500)], [page(i, 1000) for i in range(500)])
    assert len(store.stored_keys()) == 500 and store.stats()["evicted"] == 0


@pytest.mark.parametrize("budget, ratio", [(0, 0.9), (-5, 0.9), (1.5, 0.9), (True, 0.9), (100, 0), (100, 1.5)])
def test_bad_budget_or_ratio_is_refused_by_name(budget, ratio):
    with pytest.raises(ValueError, match="budget|eviction_ratio"):
        LruBudget(budget, ratio)


# -- a restart of the file store ----------------------------------------------------


def test_a_restart_keeps_the_store_and_orders_it_by_mtime(store_dir):
    first = FileBackend(str(store_dir))
    first.set(["a", "b", "c"], [page(1), page(2), page(3)])
    for age, key in enumerate(["b", "c", "a"]):  # b oldest, then c, then a
        os.utime(store_dir / f"{key}.bin", ns=(1_000_000_000 * (age + 1),) * 2)
    again = FileBackend(str(store_dir), budget=3 * PAGE, eviction_ratio=1.0)
    assert again.stored_keys() == ["a", "b", "c"] and again.get(["c"]) == [page(3)]
    assert again.lru.order() == ["b", "a", "c"]
    again.set(["d"], [page(4)])  # evicts the oldest mtime: b
    assert again.stored_keys() == ["a", "c", "d"]


def test_a_restart_with_a_smaller_budget_evicts_to_the_watermark(store_dir):
    first = FileBackend(str(store_dir))
    keys = [f"k{i}" for i in range(10)]
    first.set(keys, [page(i) for i in range(10)])
    for i, key in enumerate(keys):
        os.utime(store_dir / f"{key}.bin", ns=(1_000_000_000 * (i + 1),) * 2)
    again = FileBackend(str(store_dir), budget=5 * PAGE)  # over: down to int(320*0.9) = 288 bytes
    assert again.stored_keys() == keys[6:]


# -- the factory --------------------------------------------------------------------


def test_make_backend_builds_each_kind(tmp_path):
    memory = make_backend("memory", budget=100)
    assert isinstance(memory, MemoryBackend) and memory.lru.budget == 100
    files = make_backend("file", str(tmp_path / "new"), budget=200, eviction_ratio=0.5)
    assert isinstance(files, FileBackend) and (tmp_path / "new" / ".urc-storage").is_file()
    assert files.lru.ratio == 0.5


def test_make_backend_names_the_choices():
    with pytest.raises(ValueError, match="'mooncake'.*memory, file"):
        make_backend("mooncake")


def test_make_backend_refuses_bad_paths_and_options(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("not a directory")
    with pytest.raises(ValueError, match="not a directory"):
        make_backend("file", str(plain))
    with pytest.raises(ValueError, match="needs a path"):
        make_backend("file")
    with pytest.raises(ValueError, match="no path"):
        make_backend("memory", str(tmp_path))
    with pytest.raises(ValueError, match="no option max_size"):
        make_backend("memory", max_size=5)


@pytest.mark.parametrize("key", ["", ".hidden", "a/b", "..", "x" * 300])
def test_the_file_backend_refuses_a_key_that_is_no_file_name(store_dir, key):
    with pytest.raises(ValueError, match="not a storage key"):
        FileBackend(str(store_dir)).set([key], [b"x"])


# -- the scripted injector ------------------------------------------------------------


def injected(kind, tmp_path, *rules):
    store = StorageInjector(make(kind, tmp_path), rules)
    return store


def test_a_failed_set_stores_only_the_keys_not_selected(kind, tmp_path):
    store = injected(kind, tmp_path, {"call": "set", "outcome": "fail", "prefix": "b"})
    assert store.set(["a1", "b1", "a2", "b2"], [b"1", b"2", b"3", b"4"]) == [True, False, True, False]
    assert store.stored_keys() == ["a1", "a2"]
    assert store.set(["b1"], [b"2"]) == [True]  # fired once: spent
    assert store.log == [Fired(0, "set", "fail", ("b1", "b2"))]


def test_a_failed_get_is_none_for_its_keys_and_does_not_touch_them(kind, tmp_path):
    store = StorageInjector(make(kind, tmp_path, budget=2 * PAGE, eviction_ratio=1.0),
                            [Rule("get", "fail", nth_page=2)])
    store.set(["a", "b"], [page(1), page(2)])
    assert store.get(["b", "a"]) == [page(2), None]  # the 2nd page read fails: a stays least recent
    store.set(["c"], [page(3)])
    assert store.stored_keys() == ["b", "c"]
    assert store.get(["b", "c"]) == [page(2), page(3)]


def test_a_failed_exists_is_zero_or_a_shorter_prefix(kind, tmp_path):
    store = injected(kind, tmp_path, {"call": "exists", "outcome": "fail", "nth_call": 2},
                     {"call": "exists", "outcome": "fail", "prefix": "c", "times": 2})
    store.set(list("abcd"), [b"1", b"2", b"3", b"4"])
    assert store.exists_prefix(list("abd")) == 3  # first call: nothing fires
    assert store.exists_prefix(list("abd")) == 0  # the 2nd call fails whole: SGLang's shape
    assert store.exists_prefix(list("abcd")) == 2  # stops before the failed key c
    assert store.exists_prefix(list("abcd")) == 2
    assert store.exists_prefix(list("abcd")) == 4  # the prefix rule is spent after twice


def test_nth_page_counts_across_calls(tmp_path):
    store = StorageInjector(MemoryBackend(), [Rule("set", "fail", nth_page=4)])
    assert store.set(["a", "b"], [b"1", b"2"]) == [True, True]
    assert store.set(["c", "d", "e"], [b"3", b"4", b"5"]) == [True, False, True]


def test_the_delay_contract(kind, tmp_path):
    """delay_of answers how many flushes to hold a transfer; it changes no data, and a
    delayed call can still fail when the tier finally makes it."""
    store = injected(kind, tmp_path, {"call": "set", "outcome": "delay", "prefix": "slow", "steps": 3},
                     {"call": "set", "outcome": "delay", "nth_call": 1, "steps": 1},
                     {"call": "set", "outcome": "fail", "prefix": "slow"})
    assert store.delay_of("set", ["slow1", "x"]) == 3  # both rules fire: the longest wins
    assert store.delay_of("set", ["slow1"]) == 0  # each fired once: spent
    assert store.delay_of("get", ["slow1"]) == 0
    assert store.set(["slow1", "x"], [b"1", b"2"]) == [False, True]
    assert [(f.outcome, f.steps) for f in store.log] == [("delay", 3), ("delay", 1), ("fail", 0)]
    assert transfer_delay(store, "set", ["slow2"]) == 0
    assert transfer_delay(MemoryBackend(), "set", ["slow2"]) == 0  # no injector: never delayed
    assert store.stats()["injected"] == {"set delay": 2, "set fail": 1}


def test_delay_rules_count_their_own_questions():
    store = StorageInjector(MemoryBackend(), [Rule("get", "delay", nth_call=2, steps=5)])
    store.get(["a"])  # a call is not a question
    assert store.delay_of("get", ["a"]) == 0
    assert store.delay_of("get", ["a"]) == 5


def test_times_bounds_a_rule():
    store = StorageInjector(MemoryBackend(), [Rule("set", "fail", times=3)])
    answers = [store.set([f"k{i}"], [b"x"])[0] for i in range(5)]
    assert answers == [False, False, False, True, True]


def test_a_seeded_random_rule_repeats_itself():
    def run(seed):
        store = StorageInjector(MemoryBackend(), [Rule("set", "fail", probability=0.5, seed=seed, times=1000)])
        return [store.set([f"k{i}"], [b"x"])[0] for i in range(40)]

    first = run(7)
    assert run(7) == first
    assert 5 < first.count(False) < 35 and run(8) != first


@pytest.mark.parametrize("spec, message", [
    ({"call": "put", "outcome": "fail"}, "choose one of set, get, exists"),
    ({"call": "set", "outcome": "crash"}, "choose one of fail, delay"),
    ({"call": "set"}, "needs outcome"),
    ({"call": "set", "outcome": "fail", "prefix": "a", "nth_call": 1}, "not prefix and nth_call"),
    ({"call": "set", "outcome": "fail", "steps": 2}, "steps is for a delay"),
    ({"call": "set", "outcome": "delay", "steps": 0}, "steps must be"),
    ({"call": "set", "outcome": "fail", "times": 0}, "times must be"),
    ({"call": "set", "outcome": "fail", "probability": 1.5}, "probability"),
    ({"call": "set", "outcome": "fail", "key": "a"}, "unknown rule field"),
])
def test_a_bad_rule_is_refused_by_name(spec, message):
    with pytest.raises(ValueError, match=message):
        StorageInjector(MemoryBackend(), [spec])


# -- against SGLang 0.5.23's own file backend -------------------------------------------


def _sglang_file_backend():
    """SGLang's HiCacheFile class, or None (the test skips, or fails under URC_REQUIRE_SGLANG)."""
    from workbench.bridge.sglang_env import SGLANG_VERSION, installed_version

    found = None
    if installed_version() == SGLANG_VERSION:
        try:
            from sglang.srt.mem_cache.hicache_storage import HiCacheFile, HiCacheStorageConfig

            found = HiCacheFile, HiCacheStorageConfig
        except Exception:
            found = None
    if found is None and os.environ.get("URC_REQUIRE_SGLANG"):
        raise RuntimeError(f"URC_REQUIRE_SGLANG is set but SGLang {SGLANG_VERSION} cannot be imported")
    return found


class SGLangFiles:
    """SGLang's file backend with its LRU evictor, on the CPU, spoken to in our terms."""

    def __init__(self, path, budget, ratio):
        import torch

        self.torch = torch
        HiCacheFile, HiCacheStorageConfig = _sglang_file_backend()
        config = HiCacheStorageConfig(
            tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1, is_mla_model=False,
            enable_storage_metrics=False, is_page_first_layout=False, model_name=None,
            extra_config={"file_storage_path": str(path), "max_size": budget, "eviction_ratio": ratio})
        self.path = path
        self.store = HiCacheFile(config)
        self.suffix = self.store.tp_config_suffix + ".bin"  # "__0_1.bin" for one rank

    def set(self, key, data):
        return self.store.set(key, self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8))

    def get(self, key, size):
        out = self.store.get(key, self.torch.empty(size, dtype=self.torch.uint8))
        return None if out is None else bytes(out.numpy())

    def keys(self):
        return sorted(name[:-len(self.suffix)] for name in os.listdir(self.path) if name.endswith(self.suffix))


def _workload(seed, count=300):
    import random

    rng = random.Random(seed)
    for _ in range(count):
        key = f"p{rng.randrange(24):02}"
        roll = rng.random()
        if roll < 0.55:
            yield "set", key, PAGE
        elif roll < 0.95:
            yield "get", key, PAGE
        else:
            yield "set", f"big{rng.randrange(3)}", 20 * PAGE  # bigger than the smaller budgets


@pytest.mark.parametrize("budget, ratio, seed", [(10 * PAGE, 0.9, 1), (6 * PAGE, 0.9, 2), (15 * PAGE, 0.5, 3),
                                                 (8 * PAGE + 20, 0.75, 4), (40 * PAGE, 0.9, 5)])
def test_the_same_ops_leave_the_same_pages_as_sglangs_file_backend(tmp_path, monkeypatch, budget, ratio, seed):
    """After every set or get of a seeded workload (64-byte pages over 24 keys, reads
    that refresh, an occasional page bigger than the budget), our file backend holds the
    same set of keys as SGLang 0.5.23's ``HiCacheFile`` with ``max_size`` and
    ``eviction_ratio``, and every call answers the same (stored or refused, hit or miss,
    the same bytes). Both count the page's payload bytes (SGLang's ``.bin`` is the raw
    page; our header is not counted), so the same byte budget is compared, including
    one that is not a whole number of pages. Then both restart with half the budget over
    the same mtimes and keep the same keys."""
    if _sglang_file_backend() is None:
        pytest.skip("needs SGLang 0.5.23 importable (make bridge-setup: the sglang venv)")
    monkeypatch.delenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", raising=False)
    theirs = SGLangFiles(tmp_path / "sglang", budget, ratio)
    ours = FileBackend(str(tmp_path / "ours"), budget=budget, eviction_ratio=ratio)
    for step, (op, key, size) in enumerate(_workload(seed)):
        data = bytes([step % 256]) * size
        if op == "set":
            assert ours.set([key], [data]) == [theirs.set(key, data)], (step, op, key)
        else:
            assert ours.get([key]) == [theirs.get(key, size)], (step, op, key)
        assert ours.stored_keys() == theirs.keys(), (step, op, key)
    assert 0 < len(ours.stored_keys()) and ours.stats()["evicted"] > 0

    for i, key in enumerate(ours.stored_keys()[::-1]):  # the same, reversed, mtimes on both sides
        stamp = (1_000_000_000 * (i + 1),) * 2
        os.utime(tmp_path / "ours" / f"{key}.bin", ns=stamp)
        os.utime(tmp_path / "sglang" / f"{key}{theirs.suffix}", ns=stamp)
    reopened = FileBackend(str(tmp_path / "ours"), budget=budget // 2, eviction_ratio=ratio)
    assert reopened.stored_keys() == SGLangFiles(tmp_path / "sglang", budget // 2, ratio).keys()
