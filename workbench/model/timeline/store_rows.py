"""The rows of a store as they are written and read back: a step's record, a tree's
records, the charts' rows, and the meta values a store is opened with.

``store_codec`` builds only declared types; this module checks that each row has the
shape its reader takes, so a damaged or crafted store is one line naming it rather
than an error deep in a viewer.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import numpy as np

from cache.basics.token_lists import MAX_TOKEN_ID

from ..scenarios.scenario import Step
from ..scenarios.step import MAX_KEY_TOKENS
from .store_codec import MAX_DECODED, MAX_INFLATED, BlobError, make_record
from .store_file import StoreError
from .timeline import StepRecord

_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(StepRecord) if f.name != "store")
_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(Step) if f.name != "packed")  # a row's, in order
_RAW = _STEP_FIELDS.index("raw")
_FIELDS = _STEP_FIELDS.index("fields")
_ID_COST = 36  # bytes of Python memory an id read back takes (an int and its slot in a list)


def record_row(record: StepRecord) -> tuple:
    """A step's record as stored: its step as ``step_row``, then its other fields."""
    return (step_row(record.step), *(getattr(record, name) for name in _RECORD_FIELDS[1:]))


def step_record(value: Any, store, path: str) -> StepRecord:
    if type(value) is not tuple or len(value) != len(_RECORD_FIELDS):
        raise StoreError("damaged store: a step's record is not as written", path)
    return StepRecord(store=store, step=step_of(value[0], path), **dict(zip(_RECORD_FIELDS[1:], value[1:])))


def step_row(step: Step) -> tuple:
    """A step's fields, its ``raw`` naming the values it shares with ``fields`` (a
    prompt's tokens, written once rather than twice) instead of holding them again,
    then its token fields as the loader packed them (``tokens_blob``: bytes, where a
    list of ids costs msgpack ~25 ns an id), each left None in ``fields``."""
    fields = step.fields
    shared = [name for name, value in step.raw.items() if fields.get(name) is value and value is not None]
    raw = {name: (None if name in shared else value) for name, value in step.raw.items()}
    tokens = {}
    for name in step.packed:
        data = step.packed_tokens(name)
        if data is not None:
            tokens[name] = tokens_blob(data)
    if tokens:
        fields = {name: (None if name in tokens else value) for name, value in fields.items()}
    head = tuple(getattr(step, name) for name in _STEP_FIELDS[:_RAW])
    return (*head[:_FIELDS], fields, *head[_FIELDS + 1:], raw, shared, tokens)


def tokens_blob(data: bytes) -> bytes:
    """Packed int32 ids in the fewest bytes: a width byte, then 2 bytes an id while every
    id is below 2**16 (most vocabularies' ids), else the 4 as packed."""
    ids = np.frombuffer(data, dtype=np.uint32)
    if ids.size and int(ids.max()) >= 1 << 16:
        return b"\x04" + data
    return b"\x02" + ids.astype(np.uint16).tobytes()


def step_of(row: Any, path: str) -> Step:
    """The step ``step_row`` wrote (a store of format 4 wrote no token fields apart)."""
    plain = len(_STEP_FIELDS) + 1  # through ``shared``
    if type(row) is not tuple or len(row) not in (plain, plain + 1):
        raise StoreError("damaged store: a step is not as written", path)
    shared, tokens = row[plain - 1], row[plain] if len(row) > plain else {}
    if (type(row[_RAW]) is not dict or type(row[_FIELDS]) is not dict or type(shared) is not list
            or type(tokens) is not dict or not all(type(name) is str and name in row[_FIELDS]
                                                   for name in (*shared, *tokens))):
        raise StoreError("damaged store: a step is not as written", path)
    fields, raw = row[_FIELDS], row[_RAW]
    budget = MAX_DECODED // _ID_COST
    for name, blob in tokens.items():
        fields[name] = ids = _token_ids(blob, budget, path)
        budget -= len(ids)
    for name in shared:
        raw[name] = fields[name]
    try:
        return make_record(Step, [*row[:_RAW], raw, {}])
    except BlobError as exc:
        raise StoreError(f"damaged store: {exc}", path) from None


def _token_ids(blob: Any, budget: int, path: str) -> list[int]:
    """A token field as ``tokens_blob`` wrote it, within the ids a row may still build."""
    width = blob[0] if type(blob) is bytes and blob else 0
    if width not in (2, 4) or (len(blob) - 1) % width or (len(blob) - 1) // width > min(budget, MAX_KEY_TOKENS):
        raise StoreError("damaged store: a step's token ids are not as written", path)
    ids = np.frombuffer(blob, dtype=np.uint16 if width == 2 else np.uint32, offset=1)
    if ids.size and int(ids.max()) > MAX_TOKEN_ID:
        raise StoreError("damaged store: a step's token ids are not as written", path)
    return ids.tolist()


def rows_blob(rows: list[tuple[int, ...]]) -> bytes:
    return zlib.compress(np.array(rows, dtype=np.int64).tobytes(), 1)


def series_rows(blob: Any, width: int, path: str, limit: int = MAX_INFLATED) -> np.ndarray:
    """One batch of the charts' rows, inflated to at most ``limit`` bytes."""
    if not isinstance(blob, bytes):
        raise StoreError("damaged store: the charts' rows are not as written", path)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(blob, min(limit, MAX_INFLATED) + 1)
    except zlib.error:
        raw = b""
    if not raw or inflater.unconsumed_tail or len(raw) > min(limit, MAX_INFLATED) or len(raw) % (8 * width):
        raise StoreError("damaged store: the charts' rows are not as written", path)
    return np.frombuffer(raw, dtype=np.int64).reshape(-1, width)


def packed_records(value: Any, path: str) -> list:
    """A delta, a before or a keyframe as ``StoreFile.pack`` wrote it: (node id, fields or None) pairs
    (a list of them in the marked form, a tuple in the plain one)."""
    if type(value) not in (list, tuple) or not all(type(p) is tuple and len(p) == 2 and type(p[0]) is int
                                         and (p[1] is None or type(p[1]) is tuple) for p in value):
        raise StoreError("damaged store: a tree's records are not as written", path)
    return value


def typed(value: Any, kind: type, what: str, path: str) -> Any:
    if not isinstance(value, kind):
        raise StoreError(f"damaged store: {what} is not as written", path)
    return value


def summary_of(value: Any, path: str) -> dict[str, Any]:
    if not (isinstance(value, dict) and isinstance(value.get("ops"), list)
            and all(isinstance(op, str) for op in value["ops"])):
        raise StoreError("damaged store: its summary is not as written", path)
    return value
