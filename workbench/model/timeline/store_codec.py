"""How every value in a store is written and read: msgpack with declared types, never pickle.

A store travels (attached to a bug report) and is opened by someone else, so reading
one must not run code, nor take more than a bounded amount of memory. Each value is
msgpack; what msgpack lacks (a tuple, a read-only mapping, an enum member, or a record:
a named tuple or dataclass of the snapshot, under its declared name in ``RECORDS``) is
an array whose first item is a type mark, an empty extension value whose code says the
type. So the whole value is one msgpack pass each way (a mark is a shared constant, and
nothing is packed inside another packing). Reading builds only the declared types, fills
them field by field without calling their code, checks each field against its
annotation, refuses a mark anywhere but at the head of an array, and refuses a blob
whose inflated bytes or decoded objects pass the limits below. Any refusal is a
``BlobError``: the store's reader turns it into one line naming the store.

Node records, most of what a run writes, have a second form (``encode_plain``): plain
data, every tuple written by msgpack itself, no type marks (a tuple's mark costs a
Python call, and a node record holds about ten tuples). Read back, every array is a
tuple; the reader that knows the record's shape (``store_file.StoreFile.unpack``) names
the records in it again.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import sys
import typing
import zlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Callable, Optional, Union

import msgpack
import numpy as np

from cache.observe.events import Cause, Event, EventKind
from cache.basics.keys import Namespace
from cache.observe.views import (ComponentRecord, GlobalRecord, NodeRecord, PoolView, RequestView, SessionsView,
                            SessionView, SlotView, StorageView, StreamingSessionsView)
from cache.basics.violation import Violation

from .states import StateShape
from .timeline import Failure

MAX_INFLATED = 32 << 20  # bytes one blob may hold once inflated
MAX_DECODED = 160 << 20  # what one blob's objects may cost in memory, bounded before any is built
_DICT_ENTRY_COST = 64  # what a dict holds per entry, beyond its key and value objects


def _header_costs() -> np.ndarray:
    """What the object a msgpack header byte starts can cost at most, in bytes of Python
    memory (its slot in a container included): every byte of a body is taken as a
    header, so ``costs[body].sum()`` bounds what decoding the body builds, whatever it
    holds. Strings' and bytes' contents are counted once more, as the body's length."""
    costs = np.full(256, 56, dtype=np.int64)  # ints past the small-int cache, int8 to uint64
    costs[0x00:0x80] = 28  # positive fixint: a cached int, only its slot (and a dict entry's share)
    costs[0x80:0x90] = costs[0xDE:0xE0] = 240  # maps (their entries are charged as they are built)
    costs[0x90:0xA0] = costs[0xDC:0xDE] = 84  # arrays
    costs[0xA0:0xC0] = costs[0xD9:0xDC] = 108  # strings
    costs[[0xC0, 0xC2, 0xC3, 0xCC]] = 28  # nil, booleans, uint8: shared objects
    costs[0xC4:0xC7] = 68  # bytes
    costs[0xC7:0xCA] = costs[0xD4:0xD9] = 420  # extensions: a type mark (the tuple, mapping or record it makes)
    costs[[0xCA, 0xCB]] = 52  # floats
    costs[0xE0:0x100] = 56  # negative fixint: not cached
    return costs


_HEADER_COSTS = _header_costs()
_CHUNK = 1 << 20


def _bound(body: bytes) -> tuple[int, bool]:
    """What decoding ``body`` can cost at most, and whether its dicts' entries must be
    charged as they are built: a small body at the costliest byte's price, a larger one
    by its bytes (``_header_costs``), counted a chunk at a time (a few MB held)."""
    worst = int(_HEADER_COSTS.max()) * len(body) + len(body)
    if worst <= MAX_DECODED:  # small: within the limit whatever it holds (a dict entry too)
        return worst, False
    counts = np.zeros(256, dtype=np.int64)
    raw = np.frombuffer(body, dtype=np.uint8)
    for start in range(0, len(raw), _CHUNK):
        counts += np.bincount(raw[start:start + _CHUNK], minlength=256)
    return int(counts @ _HEADER_COSTS) + len(body), True
_RAW, _ZLIB = b"m", b"z"  # a blob's first byte: msgpack with type marks, or zlib over it
_PLAIN, _PLAIN_ZLIB = b"p", b"q"  # plain data, arrays read as tuples (node records), or zlib over it

# Extension codes, part of the format: append only (a new order is a new FORMAT).
_TUPLE, _MAPPING, _BIG_INT = 1, 2, 3
_BIG_INT_DIGITS = 64  # an int past 64 bits (a sort key) travels as its digits
ENUMS: tuple[type[enum.Enum], ...] = (EventKind, Cause)  # codes 8, 9, ...
RECORDS: tuple[type, ...] = (  # codes 16, 17, ...
    NodeRecord, ComponentRecord, GlobalRecord, PoolView, RequestView, SessionsView, SessionView, SlotView,
    StorageView, StreamingSessionsView, Event, Namespace, Violation, StateShape, Failure)
_FIRST_ENUM, _FIRST_RECORD = 8, 16
_ENUM_CODES = {kind: _FIRST_ENUM + n for n, kind in enumerate(ENUMS)}
_RECORD_CODES = {kind: _FIRST_RECORD + n for n, kind in enumerate(RECORDS)}
_ENUM_MEMBERS = {_FIRST_ENUM + n: {m.value: m for m in kind} for n, kind in enumerate(ENUMS)}


class BlobError(ValueError):
    """A blob this codec will not read: damaged, too large, or of an undeclared type."""


# ---- writing ---------------------------------------------------------------------------------------------


class _Packers:
    """Packers kept for reuse (a fresh one per value costs a third of a write), one per
    thread packing at the same time."""

    def __init__(self, strict: bool) -> None:
        self.free: list[msgpack.Packer] = []
        self.strict = strict  # strict: every tuple and record through ``_default``; else plain data only

    def pack(self, obj: Any) -> bytes:
        packer = self.free.pop() if self.free else msgpack.Packer(
            default=_default if self.strict else _not_plain, strict_types=self.strict, use_bin_type=True)
        try:
            return packer.pack(obj)
        except BaseException:
            packer.reset()
            raise
        finally:
            self.free.append(packer)


_PACKERS = _Packers(strict=True)
_pack = _PACKERS.pack
_PLAIN_PACKERS = _Packers(strict=False)


_MARKS = {code: msgpack.ExtType(code, b"") for code in
          (_TUPLE, _MAPPING, *_ENUM_CODES.values(), *_RECORD_CODES.values())}  # written: shared, immutable
_TUPLE_RECORDS = {kind for kind in RECORDS if issubclass(kind, tuple)}


def _default(obj: Any) -> Any:
    """What msgpack cannot write itself, as an array headed by its type's mark."""
    kind = type(obj)
    if kind is tuple:
        return [_MARKS[_TUPLE], *obj]
    code = _RECORD_CODES.get(kind)
    if code is not None:
        if kind in _TUPLE_RECORDS:
            return [_MARKS[code], *obj]
        return [_MARKS[code], *[getattr(obj, f) for f in _fields(kind)]]
    if kind is MappingProxyType:
        return [_MARKS[_MAPPING], dict(obj)]
    code = _ENUM_CODES.get(kind)
    if code is not None:
        return [_MARKS[code], obj.value]
    if kind is int:
        return msgpack.ExtType(_BIG_INT, str(obj).encode("ascii"))
    raise TypeError(f"a store cannot hold a {kind.__module__}.{kind.__qualname__}: declare it in store_codec.RECORDS")


def _not_plain(obj: Any) -> Any:
    """The plain form's one extension: an int past 64 bits (a sort key), as ``_default`` writes it."""
    kind = type(obj)
    if isinstance(obj, int):
        return msgpack.ExtType(_BIG_INT, str(int(obj)).encode("ascii"))
    raise TypeError(f"a node record cannot hold a {kind.__module__}.{kind.__qualname__}: only plain values")


COMPRESS_FROM = 1024  # bytes: below, zlib's set-up per value (~7 µs) costs more than the ~170 bytes it saves a step


def encode(obj: Any, compress: bool = True) -> bytes:
    """One value as a blob; compressed when it is large enough to be worth it, unless
    told not to (a step's record is mostly token ids, which do not compress: trying cost
    a third of a run's time)."""
    packed = _pack(obj)
    return _ZLIB + zlib.compress(packed, 1) if compress and len(packed) >= COMPRESS_FROM else _RAW + packed


def encode_plain(obj: Any) -> bytes:
    """A value of plain data (None, bools, numbers, strings, bytes, tuples, lists) as a
    blob of the plain form, compressed as ``encode`` would. A tuple's subclass (a named
    tuple) is written as a tuple, an int's or a str's as its value: the reader names
    them again from the value's known shape."""
    packed = _PLAIN_PACKERS.pack(obj)
    return _PLAIN_ZLIB + zlib.compress(packed, 1) if len(packed) >= COMPRESS_FROM else _PLAIN + packed


# ---- reading ---------------------------------------------------------------------------------------------


def decode(blob: bytes) -> Any:
    """The value ``encode`` wrote, or ``BlobError``; never more than the limits."""
    return decode_costed(blob)[0]


def decode_costed(blob: bytes) -> tuple[Any, int]:
    """``decode``, with what its objects are estimated to cost in memory (a reader's
    cache of decoded values keeps within a budget of it)."""
    blob = bytes(blob)
    head, body = blob[:1], blob[1:]
    if head in (_ZLIB, _PLAIN_ZLIB):
        body = _inflate(body)
    elif head not in (_RAW, _PLAIN):
        raise BlobError("not a value this store format writes")
    if len(body) > MAX_INFLATED:
        raise BlobError(f"a value of {len(body):,} bytes (at most {MAX_INFLATED:,})")
    bound, counted = _bound(body)
    reader = _Reader(count_dicts=counted, plain=head in (_PLAIN, _PLAIN_ZLIB))
    reader.charge(bound)
    try:
        return reader.read(body), reader.spent
    except BlobError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, OverflowError, msgpack.UnpackException) as exc:
        raise BlobError(f"damaged value ({type(exc).__name__}: {str(exc)[:120]})") from None


def _inflate(body: bytes) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, MAX_INFLATED + 1)
    except zlib.error as exc:
        raise BlobError(f"damaged compressed value ({exc})") from None
    if len(out) > MAX_INFLATED or inflater.unconsumed_tail:
        raise BlobError(f"a compressed value that inflates past {MAX_INFLATED:,} bytes")
    if not inflater.eof:
        raise BlobError("a compressed value cut short")
    return out


def _plain_extension(code: int, data: bytes) -> Any:
    if code == _BIG_INT:
        return _big_int(data)
    raise BlobError(f"a malformed plain value (an extension value, code {code})")


def _big_int(data: bytes) -> int:
    if 0 < len(data) <= _BIG_INT_DIGITS and data.lstrip(b"-").isdigit():
        return int(data)
    raise BlobError("a malformed number")


class _Mark:
    """A type mark as read: stands at the head of its array until the array is built."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        self.code = code


_READ_MARKS = {code: _Mark(code) for code in _MARKS}


class _Reader:
    """One blob's decoding: its objects' cost bounded before it starts (``spent``),
    each dict's entries charged as it is built, and every type mark read consumed by
    the array it heads (msgpack's own stack bounds how deep arrays nest)."""

    def __init__(self, count_dicts: bool, plain: bool = False) -> None:
        self.spent = 0
        self.marks = 0  # marks read and not yet consumed by their array
        hooks = {"object_hook": self._dict} if count_dicts else {}
        if plain:  # every array a tuple, built by msgpack itself; no type mark
            hooks.update(use_list=False, ext_hook=_plain_extension)
        else:
            hooks.update(ext_hook=self._ext, list_hook=self._list)
        self._unpack = functools.partial(msgpack.unpackb, strict_map_key=False, raw=False, **hooks)

    def read(self, data: bytes) -> Any:
        value = self._unpack(data)
        if self.marks:
            raise BlobError("a malformed extension value (a type mark that heads no array)")
        return value

    def charge(self, cost: int) -> None:
        self.spent += cost
        if self.spent > MAX_DECODED:
            raise BlobError(f"a value whose objects could take over {MAX_DECODED >> 20} MiB")

    def _dict(self, items: dict) -> dict:
        self.charge(_DICT_ENTRY_COST * len(items))
        return items

    def _ext(self, code: int, data: bytes) -> Any:
        if code == _BIG_INT:
            return _big_int(data)
        mark = _READ_MARKS.get(code) if not data else None
        if mark is None:
            raise BlobError(f"a malformed extension value (code {code})")
        self.marks += 1
        return mark

    def _list(self, items: list) -> Any:
        if not items or type(items[0]) is not _Mark:
            return items
        self.marks -= 1
        code = items[0].code
        if code == _TUPLE:
            return tuple(items[1:])
        if code >= _FIRST_RECORD:
            return make_record(RECORDS[code - _FIRST_RECORD], items[1:])
        if len(items) == 2:
            value = items[1]
            if code == _MAPPING and type(value) is dict:
                return MappingProxyType(value)
            if code in _ENUM_MEMBERS and type(value) is str and value in _ENUM_MEMBERS[code]:
                return _ENUM_MEMBERS[code][value]
        raise BlobError(f"a malformed extension value (code {code})")


def make_record(kind: type, values: list) -> Any:
    """A declared record from its field values, each checked against its annotation
    (a tuple's items and a mapping's values too, where it names their type)."""
    fields = _fields(kind)
    if len(values) != len(fields):
        raise BlobError(f"a {kind.__name__} of {len(values)} fields (it has {len(fields)})")
    for n, check in _checks(kind):
        if not check(values[n]):
            raise BlobError(f"a {kind.__name__} whose {fields[n]} is not as declared ({type(values[n]).__name__})")
    if issubclass(kind, tuple):
        return tuple.__new__(kind, values)
    made = object.__new__(kind)  # filled as the writer had it: no __init__, no __post_init__
    for field, value in zip(fields, values):
        object.__setattr__(made, field, value)
    return made


Check = Callable[[Any], bool]
_FIELDS: dict[type, tuple[str, ...]] = {}
_CHECKS: dict[type, list[tuple[int, Check]]] = {}


def _fields(kind: type) -> tuple[str, ...]:
    found = _FIELDS.get(kind)
    if found is None:
        found = _FIELDS[kind] = kind._fields if issubclass(kind, tuple) else tuple(
            f.name for f in dataclasses.fields(kind))
    return found


def _checks(kind: type) -> list[tuple[int, Check]]:
    """(field number, its check) for each field whose annotation says something
    checkable, made once per type."""
    found = _CHECKS.get(kind)
    if found is None:
        namespace = {**vars(typing), **vars(sys.modules[kind.__module__])}
        annotations = {}
        for klass in reversed(kind.__mro__):
            annotations.update(getattr(klass, "__annotations__", {}))
        found = []
        for n, field in enumerate(_fields(kind)):
            check = _check_for(annotations.get(field), namespace)
            if check is not None:
                found.append((n, check))
        _CHECKS[kind] = found
    return found


def _check_for(annotation: Any, namespace: dict) -> Optional[Check]:
    """A test of a value against ``annotation``: its runtime type, and for
    ``tuple[X, ...]`` and ``Mapping[K, V]`` each item's or value's; None where the
    annotation says nothing checkable (``Any``, ``object``)."""
    if isinstance(annotation, typing.ForwardRef):  # a named tuple's annotation under postponed evaluation
        annotation = annotation.__forward_arg__
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, namespace)  # our own source's annotation, never a store's bytes
        except Exception:
            return None
    if annotation is None or annotation is type(None):
        return lambda value: value is None
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Union or (origin is not None and origin.__name__ == "UnionType"):
        parts = [_check_for(a, namespace) for a in args]
        if any(p is None for p in parts):
            return None
        return lambda value: any(p(value) for p in parts)
    base = origin or annotation
    if base is float:
        return lambda value: isinstance(value, (float, int))
    if base in (Mapping, dict) or (isinstance(base, type) and issubclass(base, Mapping)):
        inner = _check_for(args[1], namespace) if len(args) == 2 else None
        if inner is None:
            return lambda value: isinstance(value, (dict, MappingProxyType))
        return lambda value: isinstance(value, (dict, MappingProxyType)) and all(map(inner, value.values()))
    if base is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = _check_for(args[0], namespace)
        if inner is not None:
            return lambda value: type(value) is tuple and all(map(inner, value))
    if base in (int, str, bytes, bool, tuple, list) or base in RECORDS or base in ENUMS:
        return lambda value: isinstance(value, base)
    return None
