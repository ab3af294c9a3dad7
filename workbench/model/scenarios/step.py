"""One step of a scenario, checked: its op, its fields, what it expects and what it
needs of the config, so a bad step fails with one message naming its line and field.
A file's steps, a live op and a fuzzer's next step all pass through ``check_step``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

from .. import ops
from ..ops import OPS
from .errors import ScenarioError, elide, shown
from .fields import COMMON_FIELDS, COMPONENT_COUNTERS, STATE_FIELDS, host_state_field, metric_field
from .names import Names
from .node_fields import check_node_expect, is_node_field, table_component
from .request_fields import REQUEST_STATE, check_request_expect
from .session_fields import SESSION_TABLES, check_session_expect, is_session_field
from ..ops.spec import BASE
from cache.basics.errors import InvalidKeyError
from cache.basics.token_lists import MAX_TOKEN_ID, pack_token_list  # no numpy: the loader stays light
from cache.components import COMPONENT_REGISTRY  # names and folder facts only: no torch

MAX_KEY_TOKENS = 1 << 20  # tokens in one key: a 1M-token context is the largest in use


def component_field(key: str, components) -> Optional[tuple[str, str]]:
    """(component, suffix) when ``key`` is a per-component field of a listed component
    other than Full ("sidecar_evictable", "sidecar_lru", "sidecar_lock_ref"), else None."""
    for component in components:
        if component != BASE and key.startswith(f"{component}_"):
            return component, key[len(component) + 1 :]
    return None


@dataclasses.dataclass(frozen=True)
class Step:
    index: int  # 1-based
    line: int
    op: str
    fields: dict[str, Any]  # the op's own fields
    expect: dict[str, Any]
    expect_error: Optional[str]
    description: str
    raw: dict[str, Any]  # the step exactly as written (for recordings)
    # each token field as ``check_step`` packed it (``token_lists.pack_token_list``), with the
    # very list it packed: a reader trusts the bytes only while the field is still that list
    # (a list changed in place would not be noticed: a step's lists are never changed, the
    # timeline's records share them)
    packed: dict[str, tuple[list, bytes]] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def packed_tokens(self, name: str) -> Optional[bytes]:
        """The field's token ids as packed when checked, or None (not a token field, or
        no longer the list that was checked)."""
        found = self.packed.get(name)
        return found[1] if found is not None and found[0] is self.fields.get(name) else None


def check_step(i: int, raw: dict, name: str, line_of, config: dict, names: Names) -> Step:
    op = raw.get("op")
    if op is None:
        raise ScenarioError(f"step {i + 1} has no op", name, line_of(), "op")
    spec = ops.get(op)
    if spec is None:
        raise ScenarioError(f"unknown op {shown(op)}; known: {', '.join(OPS)}", name, line_of("op"), "op")
    components = [c for c in config.get("components", []) if isinstance(c, str)]
    per_component = _component_fields(spec, components)
    for key in raw:
        if spec.field(key) is None and key not in per_component and key not in COMMON_FIELDS:
            raise ScenarioError(f"unknown field {shown(key)} for op {op!r}", name, line_of(key), key)
    for field in spec.fields:
        if field.required and field.name not in raw:
            raise ScenarioError(f"op {op!r} needs {field.name!r}", name, line_of(), field.name)
    fields = {k: raw[k] for k in raw if k not in COMMON_FIELDS}
    packed = {}
    for key, value in fields.items():
        data = _check_field(spec.field(key), key, value, name, line_of(key))
        if data is not None:
            packed[key] = (value, data)
    error = raw.get("expect_error")
    names.track(spec, fields, error is not None, name, line_of)  # a match may expect its own name
    expect = raw.get("expect", {})
    if not isinstance(expect, dict):
        raise ScenarioError("expect must be a table of field = value", name, line_of("expect"), "expect")
    results = spec.results_for(per_component, per_component)
    exact = _check_exact(expect, names.components, name, line_of("expect"))
    for key, value in expect.items():
        if key != EXACT:
            _check_expect(spec, results, key, value, name, line_of("expect"), names, key in exact)
    if error is not None and not isinstance(error, str):
        raise ScenarioError("expect_error must be a string (a substring of the error)", name, line_of("expect_error"), "expect_error")
    if error is not None and expect:
        raise ScenarioError("a step carries expect or expect_error, not both", name, line_of("expect_error"), "expect_error")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ScenarioError("description must be a string", name, line_of("description"), "description")
    _check_needs(spec, fields, config, name, line_of)
    return Step(i + 1, line_of() or 0, op, fields, dict(expect), error, description, dict(raw), packed)


def _component_fields(spec, components: list[str]) -> tuple[str, ...]:
    """An op's ``<component>=N`` fields: every known component may be named (one not
    listed is refused by ``_check_needs`` with the reason), plus the listed ones."""
    if not spec.per_component:
        return ()
    if spec.per_component == ops.HOST_PARTS:
        return spec.component_fields((), ops.host_parts())
    return spec.component_fields(tuple(COMPONENT_REGISTRY) + tuple(c for c in components if c not in COMPONENT_REGISTRY))


def _check_field(field, key: str, value, name: str, line: Optional[int]) -> Optional[bytes]:
    """Refuse a bad value; a token field's ids come back packed."""
    kind = field.kind if field is not None else ops.COUNT  # a <component>=N field
    if kind == ops.TOKENS:
        if not isinstance(value, list):
            raise ScenarioError("must be a list of token ids", name, line, key)
        if len(value) > MAX_KEY_TOKENS:
            raise ScenarioError(f"{len(value):,} tokens is more than the {MAX_KEY_TOKENS:,} a key may hold", name, line, key)
        data = _check_tokens(value, name, line, key)
        if field.nonempty and not value:
            raise ScenarioError("needs at least one token", name, line, key)
        return data
    if kind == ops.NAME:
        if not isinstance(value, str) or not value:
            raise ScenarioError("must be a non-empty string (a name)", name, line, key)
    elif kind == ops.COUNT:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ScenarioError("must be a non-negative int", name, line, key)
    elif kind == ops.FLAG:
        if not isinstance(value, bool):
            raise ScenarioError("must be true or false", name, line, key)
    return None


def _check_tokens(value: list, name: str, line: Optional[int], key: str) -> bytes:
    """The ids packed as the cache packs them, in one C pass when every id is valid;
    the culprit is looked for only when one is not."""
    try:
        return pack_token_list(value)
    except InvalidKeyError:
        pass
    for tok in value:
        if type(tok) is not int or not 0 <= tok <= MAX_TOKEN_ID:
            what = elide(json.dumps(tok)) if isinstance(tok, (bool, int, float, str, type(None))) else f"a {type(tok).__name__}"
            raise ScenarioError(f"token ids must be non-negative ints below 2**31 (got {what})", name, line, key)
    raise ScenarioError("token ids must be non-negative ints below 2**31", name, line, key)


EXACT = "exact"  # expect.exact: the tables whose listed keys are all there are


def is_table_field(key: str, components) -> bool:
    """A field whose expected value is a table that ``exact`` can close."""
    return key in SESSION_TABLES or key == REQUEST_STATE or table_component(key, components) is not None


def _check_exact(expect: dict, components, name: str, line: Optional[int]) -> frozenset[str]:
    """The tables ``expect.exact`` names, each one this step expects."""
    exact = expect.get(EXACT, [])
    if not isinstance(exact, list) or not all(isinstance(key, str) for key in exact):
        raise ScenarioError("exact must be a list of the table fields whose listed keys are all there are"
                            " (exact = [\"full_lock_ref\"])", name, line, f"expect.{EXACT}")
    for key in exact:
        if not is_table_field(key, components):
            raise ScenarioError(f"{shown(key)} is not a table field this cache has (a node, session or request"
                                " table)", name, line, f"expect.{EXACT}")
        if key not in expect:
            raise ScenarioError(f"exact names {key}, which this step does not expect", name, line, f"expect.{EXACT}")
    return frozenset(exact)


def _check_expect(spec, results: tuple, key: str, value, name: str, line: Optional[int], names: Names,
                  exact: bool = False) -> None:
    op, owner = spec.name, ops.owner(key)
    if owner is not None and owner not in names.components and key in results and not spec.reports_all_results:
        raise ScenarioError(f"{key} is only reported with the {owner} component", name, line, f"expect.{key}")
    if key in results:
        if value is not None and (isinstance(value, bool) != (key in ops.FLAG_RESULTS) or not isinstance(value, int)):
            kind = "true or false" if key in ops.FLAG_RESULTS else "an int"
            raise ScenarioError(f"expected value must be {kind}", name, line, f"expect.{key}")
        return
    if host_state_field(key):
        if owner is not None and owner not in names.components:
            raise ScenarioError(f"{key} is only reported with the {owner} component", name, line, f"expect.{key}")
        if not names.host:
            raise ScenarioError(f"{key} needs the host tier ([config] hicache)", name, line, f"expect.{key}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError("expected value must be an int", name, line, f"expect.{key}")
        return
    if is_node_field(key, names.components):
        check_node_expect(key, value, names, exact, name, line)
        return
    if key == REQUEST_STATE:
        check_request_expect(value, names, exact, name, line)
        return
    if key in STATE_FIELDS or metric_field(key, names.components):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError("expected value must be an int", name, line, f"expect.{key}")
        return
    own = component_field(key, names.components)
    if own is not None and own[1] in COMPONENT_COUNTERS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError("expected value must be an int", name, line, f"expect.{key}")
        return
    missing = next((c for c in COMPONENT_REGISTRY if c not in names.components and is_node_field(key, [c])), None)
    if missing is not None:
        raise ScenarioError(f"{key} needs the {missing} component", name, line, f"expect.{key}")
    if is_session_field(key):
        check_session_expect(key, value, names.components, names.session_radix, name, line, exact)
        return
    other = [spec.name for spec in ops.all_ops() if key in spec.results]
    hint = f" (a result of {', '.join(other)})" if other else ""
    raise ScenarioError(f"cannot expect {shown(key)} on op {op!r}{hint}", name, line, f"expect.{key}")


def _check_needs(spec, fields: dict, config: dict, name: str, line_of) -> None:
    """Components and the host tier an op, or a field as written, needs."""
    comps = config.get("components", [])
    for key, value in fields.items():
        field = spec.field(key)
        if field is None and key not in comps:  # a <component>=N field names a component the config lacks
            raise ScenarioError(f"op {spec.name!r} as written needs the {key} component", name, line_of(key), key)
        if field is not None and field.needs == ops.HOST and value and not config.get("hicache"):
            raise ScenarioError(f"op {spec.name!r} as written needs the host tier ([config] hicache = {{ … }})",
                                name, line_of(key), key)
        if field is not None and field.needs and field.needs != ops.HOST and value and field.needs not in comps:
            raise ScenarioError(f"op {spec.name!r} as written needs the {field.needs} component", name, line_of(), "op")
    for need in spec.needs:
        if need == ops.HOST and not config.get("hicache"):
            raise ScenarioError(f"op {spec.name!r} needs the host tier ([config] hicache = {{ write_policy = … }})",
                                name, line_of(), "op")
        hicache = config.get("hicache")
        if need == ops.STORAGE and not (isinstance(hicache, dict) and hicache.get("storage")):
            raise ScenarioError(f"op {spec.name!r} needs the storage tier ([config] hicache = {{ storage = {{ … }} }})",
                                name, line_of(), "op")
        if need not in (ops.HOST, ops.STORAGE) and need not in comps:
            raise ScenarioError(f"op {spec.name!r} as written needs the {need} component", name, line_of(), "op")
