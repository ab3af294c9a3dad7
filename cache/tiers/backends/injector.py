"""Scripted storage failures and delays, wrapped around any backend.

SGLang 0.5.23's ``HiCacheStorageFailureInjector`` fails calls at random (an env-set
probability, unseeded) and sleeps a random time before each. A scenario needs to say
*which* call fails or is slow, so ours takes rules, each firing a bounded number of times.

A rule (``Rule`` or its dict form, ``Rule.from_dict``)::

    {"call": "set" | "get" | "exists",   # which backend call
     "outcome": "fail" | "delay",
     # which keys; at most one of these three, none = every key of the call
     "prefix": "ab12",        # keys starting with it
     "nth_call": 3,           # every key of the 3rd such call (1-based)
     "nth_page": 5,           # the 5th page of such calls, counted across calls (1-based)
     "steps": 2,              # delay only: flushes to hold the transfer (default 1)
     "times": 1,              # calls it fires on before it is spent (default 1)
     "probability": 0.3, "seed": 7}   # optional seeded gate, drawn once per matching call

"fail" answers as SGLang's injector does, for the selected keys only: ``exists_prefix``
stops before the first selected key (0 when the first is selected), ``get`` gives None
for them (the backend is not asked, so their recency is untouched), ``set`` gives False
for them (not written). The other keys of the call go to the backend as usual.

"delay" never sleeps. The delay contract, for the storage tier:
- before it issues a transfer (a backup ``set``, a prefetch ``get``, a hit query
  ``exists``) the tier asks ``delay_of(call, keys)`` (or ``transfer_delay(backend, call,
  keys)``, which answers 0 for a backend without an injector) exactly once;
- the answer N >= 0 is how many flushes the tier holds that transfer in flight before it
  performs the backend call and applies the result (0: no delay, as usual);
- delay rules are matched only by ``delay_of`` (their ``nth_call``/``nth_page`` count the
  ``delay_of`` questions of that call), fail rules only by the backend calls themselves
  (counting those calls), so a delayed call can still fail when it is finally made;
- several delay rules hitting the same transfer: the longest wins.
Every firing is appended to ``log`` (``Fired``) so a view can say what was injected.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Optional

from .backend import check_batch

CALLS = ("set", "get", "exists")
OUTCOMES = ("fail", "delay")


@dataclass
class Rule:
    """One scripted outcome; see the module docstring for the fields' meaning."""

    call: str
    outcome: str
    prefix: Optional[str] = None
    nth_call: Optional[int] = None
    nth_page: Optional[int] = None
    steps: int = 1
    times: int = 1
    probability: Optional[float] = None
    seed: int = 0
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.call not in CALLS:
            raise ValueError(f"rule call {self.call!r}: choose one of {', '.join(CALLS)}")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"rule outcome {self.outcome!r}: choose one of {', '.join(OUTCOMES)}")
        chosen = [name for name in ("prefix", "nth_call", "nth_page") if getattr(self, name) is not None]
        if len(chosen) > 1:
            raise ValueError(f"a rule selects keys by one of prefix, nth_call, nth_page, not {' and '.join(chosen)}")
        for name in ("nth_call", "nth_page", "steps", "times"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"rule {name} must be a whole number >= 1, not {value!r}")
        if self.outcome == "fail" and self.steps != 1:
            raise ValueError("steps is for a delay rule; a fail rule has none")
        if self.prefix is not None and not isinstance(self.prefix, str):
            raise ValueError(f"rule prefix must be a string, not {self.prefix!r}")
        if self.probability is not None and not (isinstance(self.probability, (int, float))
                                                 and 0.0 < self.probability <= 1.0):
            raise ValueError(f"rule probability must be in (0, 1], not {self.probability!r}")
        self._random = random.Random(self.seed)

    @classmethod
    def from_dict(cls, spec: dict) -> "Rule":
        names = [f.name for f in fields(cls) if f.init]
        unknown = sorted(set(spec) - set(names))
        if unknown:
            raise ValueError(f"unknown rule field(s) {', '.join(unknown)}; a rule has {', '.join(names)}")
        missing = [name for name in ("call", "outcome") if name not in spec]
        if missing:
            raise ValueError(f"a rule needs {' and '.join(missing)}")
        return cls(**spec)

    @property
    def spent(self) -> bool:
        return self.fired >= self.times

    def select(self, call_number: int, first_page: int, keys: Sequence[str]) -> list[int]:
        """Indices of ``keys`` this rule hits in this call (firing it), or [] if none."""
        if self.spent:
            return []
        if self.prefix is not None:
            hit = [i for i, key in enumerate(keys) if key.startswith(self.prefix)]
        elif self.nth_call is not None:
            hit = list(range(len(keys))) if call_number == self.nth_call else []
        elif self.nth_page is not None:
            index = self.nth_page - first_page
            hit = [index] if 0 <= index < len(keys) else []
        else:
            hit = list(range(len(keys)))
        if not hit or (self.probability is not None and self._random.random() >= self.probability):
            return []
        self.fired += 1
        return hit


@dataclass(frozen=True)
class Fired:
    """One firing: which rule (its index), on which call and keys, and for a delay how long."""

    rule: int
    call: str
    outcome: str
    keys: tuple[str, ...]
    steps: int = 0


class StorageInjector:
    """A backend that answers as ``inner`` except where a rule fires."""

    def __init__(self, inner, rules: Sequence = ()) -> None:
        self.inner = inner
        self.name = inner.name
        self.rules: list[Rule] = []
        self.log: list[Fired] = []
        self._calls: Counter = Counter()  # (outcome, call) -> calls (or delay questions) so far
        self._pages: Counter = Counter()  # (outcome, call) -> pages so far
        for rule in rules:
            self.add(rule)

    def add(self, rule) -> Rule:
        """Add a rule (a Rule or its dict form); a scenario may script one mid-run."""
        rule = rule if isinstance(rule, Rule) else Rule.from_dict(dict(rule))
        self.rules.append(rule)
        return rule

    def _fire(self, outcome: str, call: str, keys: Sequence[str]) -> tuple[set[int], int]:
        """Selected key indices over every rule of this outcome and call, and the longest delay."""
        counter = (outcome, call)
        self._calls[counter] += 1
        first_page = self._pages[counter] + 1
        self._pages[counter] += len(keys)
        hit: set[int] = set()
        steps = 0
        for number, rule in enumerate(self.rules):
            if rule.call != call or rule.outcome != outcome:
                continue
            chosen = rule.select(self._calls[counter], first_page, keys)
            if chosen:
                hit.update(chosen)
                steps = max(steps, rule.steps if outcome == "delay" else 0)
                self.log.append(Fired(number, call, outcome, tuple(keys[i] for i in chosen),
                                      rule.steps if outcome == "delay" else 0))
        return hit, steps

    def delay_of(self, call: str, keys: Sequence[str]) -> int:
        """Flushes to hold the transfer of ``call`` on ``keys`` before making the call
        (the contract is in the module docstring); asked once per transfer."""
        if call not in CALLS:
            raise ValueError(f"delay_of call {call!r}: choose one of {', '.join(CALLS)}")
        return self._fire("delay", call, list(keys))[1]

    def exists_prefix(self, keys: Sequence[str]) -> int:
        failed, _ = self._fire("fail", "exists", list(keys))
        stop = min(failed, default=len(keys))
        return self.inner.exists_prefix(list(keys)[:stop])

    def exists_each(self, keys: Sequence[str]) -> list[bool]:
        return self.inner.exists_each(keys)  # the rules script the KV chain's calls

    def get(self, keys: Sequence[str]) -> list[Optional[bytes]]:
        keys = list(keys)
        failed, _ = self._fire("fail", "get", keys)
        asked = [key for i, key in enumerate(keys) if i not in failed]
        answers = iter(self.inner.get(asked))
        return [None if i in failed else next(answers) for i in range(len(keys))]

    def set(self, keys: Sequence[str], pages: Sequence[bytes]) -> list[bool]:
        keys, pages = list(keys), list(pages)
        check_batch(keys, pages)
        failed, _ = self._fire("fail", "set", keys)
        kept = [i for i in range(len(keys)) if i not in failed]
        answers = iter(self.inner.set([keys[i] for i in kept], [pages[i] for i in kept]))
        return [False if i in failed else next(answers) for i in range(len(keys))]

    def stored_keys(self) -> list[str]:
        return self.inner.stored_keys()

    def clear(self) -> None:
        self.inner.clear()

    def stats(self) -> dict:
        fired = Counter(f"{f.call} {f.outcome}" for f in self.log)
        return {**self.inner.stats(), "injected": dict(sorted(fired.items()))}


def transfer_delay(backend, call: str, keys: Sequence[str]) -> int:
    """The delay contract's one question, for any backend: 0 unless an injector delays it."""
    delay_of = getattr(backend, "delay_of", None)
    return delay_of(call, keys) if delay_of is not None else 0
