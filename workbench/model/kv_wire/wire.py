"""The wire format of SGLang 0.5.23's KV events, written from its documented shape.

A message is three frames: the topic (UTF-8, "" by default), the batch's sequence
number (8 bytes, big-endian, from 0) and a msgpack ``KVEventBatch``. The batch is a
positional array ``[ts, events, attn_dp_rank]``; each event a map tagged by its class
name under ``type``, optional fields left out when None. Our structs declare the same
options, so both sides' bytes decode the same way. The replay socket is a ROUTER: a
request is ``[empty, start seq]``, answered by every buffered message from that
sequence on and an end marker whose sequence is -1.
"""

from __future__ import annotations

from typing import Optional, Union

import msgspec

from cache.observe import kv_events as ours

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class EventBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list
    attn_dp_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Tagged by class name: the ``type`` key says which event a map is."""


Token = Union[int, tuple[int, int]]  # an EAGLE bigram key's pages carry (previous, token) pairs


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[Token]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = None
    cache_salt: Optional[str] = None
    session_id: Optional[str] = None
    lora_name: Optional[str] = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: Optional[str] = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]


WireEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(KVEventBatch)  # strict: a value of another type is a DecodeError


def to_wire(event: ours.KVEvent) -> WireEvent:
    """One of our cache's events as the struct SGLang sends."""
    if isinstance(event, ours.BlockStored):
        return BlockStored(list(event.block_hashes), event.parent_block_hash, list(event.token_ids), event.block_size,
                           event.lora_id, event.medium, event.cache_salt, event.session_id, event.lora_name)
    if isinstance(event, ours.BlockRemoved):
        return BlockRemoved(list(event.block_hashes), event.medium)
    return AllBlocksCleared()


def from_wire(event: WireEvent) -> ours.KVEvent:
    """A received event as our cache's dataclass (a missing medium is the GPU, as SGLang's
    default publisher means it)."""
    if isinstance(event, BlockStored):
        return ours.BlockStored(event.block_hashes, event.parent_block_hash, event.token_ids, event.block_size,
                                event.lora_id, event.medium or ours.GPU, event.cache_salt, event.session_id,
                                event.lora_name)
    if isinstance(event, BlockRemoved):
        return ours.BlockRemoved(event.block_hashes, event.medium or ours.GPU)
    return ours.AllBlocksCleared()


def encode_batch(events, ts: float, attn_dp_rank: Optional[int] = 0) -> bytes:
    """The payload frame of a batch of our events."""
    return _encoder.encode(KVEventBatch(ts, [to_wire(e) for e in events], attn_dp_rank))


def decode_batch(payload: bytes) -> KVEventBatch:
    """A payload frame decoded strictly; anything else raises ``msgspec.DecodeError``
    (a ``ValueError``)."""
    return _decoder.decode(payload)


def seq_bytes(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def seq_of(frame: bytes) -> int:
    """A sequence frame's number; a frame of another length raises ValueError."""
    if len(frame) != 8:
        raise ValueError(f"a sequence frame has 8 bytes, this one {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)
