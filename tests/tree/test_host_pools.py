"""The host tier's pools (issue 17's first part): a copy to the host and back lands the
same fingerprints on fresh device slots, so a load-back verifies like a match; a
short host pool refuses whole and changes nothing; host slots come back on free."""

from __future__ import annotations

import pytest
import torch

from cache import InsertParams, RadixKey, UnifiedRadixCache, verify_match
from cache.basics.errors import DoubleFreeError, PoolExhaustedError
from cache.pools.host_pool import HostKVPool, HostMambaPool
from cache.pools.kv_buffer import prefix_fingerprints


@pytest.mark.parametrize("page_size", [1, 4])
def test_kv_backed_up_and_loaded_into_fresh_slots_verifies_like_the_original(page_size):
    cache = UnifiedRadixCache(kv_size=64, page_size=page_size, device="cpu")
    tokens = list(range(10, 26))
    slots = cache.alloc_kv(len(tokens))
    cache.write_kv(slots, tokens)
    host = HostKVPool(32, page_size)
    copy = host.backup(cache.kv_buffer, slots)
    assert copy.shape == slots.shape and host.available_size() == 32 - 16
    assert torch.equal(host.buffer.data[copy], prefix_fingerprints(tokens))
    fresh = cache.alloc_kv(len(tokens))  # new device slots: nothing written there yet
    assert not torch.equal(cache.kv_buffer.data[fresh], cache.kv_buffer.data[slots])
    host.load(cache.kv_buffer, copy, fresh)
    assert torch.equal(cache.kv_buffer.data[fresh], prefix_fingerprints(tokens))
    # the loaded slots pass the same check a match's slots do
    cache.free_kv([slots])
    cache.insert(InsertParams(RadixKey(tokens), fresh))
    match = cache.match_prefix(RadixKey(tokens))
    assert torch.equal(match.device_indices, fresh) and verify_match(cache, tokens, match) == []
    assert host.free(copy) == 16 and host.available_size() == 32


def test_a_short_host_pool_refuses_the_whole_backup_and_changes_nothing():
    cache = UnifiedRadixCache(kv_size=64, page_size=4, device="cpu")
    slots = cache.alloc_kv(12)
    cache.write_kv(slots, list(range(12)))
    host = HostKVPool(8, 4)
    before = host.buffer.data.clone()
    with pytest.raises(PoolExhaustedError, match="full_host pool exhausted: need 12 slots, 8 free"):
        host.backup(cache.kv_buffer, slots)
    assert host.available_size() == 8 and torch.equal(host.buffer.data, before)
    copy = host.backup(cache.kv_buffer, slots[:8])
    host.free(copy)
    with pytest.raises(DoubleFreeError):
        host.free(copy)
    with pytest.raises(ValueError, match="load of 8 host slot"):
        host.load(cache.kv_buffer, copy, slots)


def test_a_mamba_state_round_trips_through_the_host():
    cache = UnifiedRadixCache(kv_size=64, components=("full", "mamba"), mamba_size=4, device="cpu")
    device = cache.by_name["mamba"].pool
    slot = device.alloc(1)
    device.write(slot, 123_456)
    host = HostMambaPool(2, "mamba")
    copy = host.backup(device, slot)
    assert host.available_size() == 1 and host.fingerprint_of(copy) == 123_456 and host.consistent(copy)
    other = device.alloc(1)
    host.load(device, copy, other)
    assert device.fingerprint_of(other) == 123_456 and device.consistent(other)
    with pytest.raises(PoolExhaustedError, match="mamba_host pool exhausted"):
        host.backup(device, slot), host.backup(device, slot)
    assert host.available_size() == 0  # the first of the two went through, the second was refused


@pytest.mark.parametrize("form", ["tensor", "0-d tensor", "int"])
def test_a_state_written_on_the_cpu_fills_only_its_own_slot(form):
    """A state write goes through numpy views on the CPU: the slot's conv and SSM
    tensors and fingerprint, whatever form the slot comes in, and no other slot's."""
    cache = UnifiedRadixCache(kv_size=64, components=("full", "mamba"), mamba_size=4, device="cpu")
    pool = cache.by_name["mamba"].pool
    slot = pool.alloc(1)
    pool.write({"tensor": slot, "0-d tensor": slot[0], "int": int(slot[0])}[form], 2_000_017)
    s = int(slot[0])
    assert pool.fingerprint_of(slot) == 2_000_017 and pool.consistent(slot)
    assert bool((pool.conv[s] == 2_000_017 % 1_000_003).all()) and bool((pool.ssm[s] == -(2_000_017 % 1_000_003)).all())
    others = [k for k in range(pool.size) if k != s]
    assert bool((pool.conv[others] == 0).all()) and bool((pool.fingerprint[others] == -1).all())


def test_host_memory_is_pinned_only_where_cuda_can_use_it():
    host = HostKVPool(8, 1)
    assert host.buffer.data.device.type == "cpu"
    assert host.pinned == torch.cuda.is_available()
    assert HostMambaPool(1, "mamba").conv.is_pinned() == torch.cuda.is_available()
