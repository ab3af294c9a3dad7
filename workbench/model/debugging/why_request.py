"""``why`` about a request: how its prefix, lock and row came to be as they are after
a step — which step changed its prefix and why (a checkpoint moved its lock to node N,
an op reset it), and which step freed its tail and why (the event's cause).

Built from the request diff (``timeline.request_diff``: the steps' ``RequestView``s
compared) and the events each step stamped with the request's id; nothing is guessed.
Reading a request's story costs one pass over the steps' globals (kept per step) and
the events of the steps that touched it, never a tree.
"""

from __future__ import annotations

from typing import Optional

from cache.observe.events import Cause

from ..timeline.fmt import plural
from ..timeline.request_diff import ADDED, ENDED, RequestChange, request_diff
from ..timeline.timeline import Timeline
from .why_text import CAUSE_TEXT, Explanation, _at, _check_step, _record
from ..ops.spec import BASE

ABOUT = ("prefix", "tail")  # what a question may narrow to; None: the whole story
TAIL_CAUSE_TEXT = {
    Cause.TAIL.value: "committed KV past what it cached (an unaligned tail): nothing could match it",
    Cause.STOP.value: "KV past its stop (stop_at, SGLang's finished_len), freed from the stop's next page: no one "
                      "ever sees those tokens, so nothing could match them",
    Cause.WINDOW.value: "it slid out of the sliding window",
    Cause.DUPLICATE.value: "the tree already held those tokens, so its own copies went back to the pool",
    Cause.RETRACT.value: "the request was retracted: its row went back uncached (a backup, if any, on the host)",
    Cause.REQUEST.value: "the op asked for it directly (released without caching)",
}


def parse_request_question(text: str) -> tuple[str, Optional[str]]:
    """``r1``, ``r1 prefix``, ``r1 tail`` -> (request id, what about)."""
    words = text.split()
    if not 1 <= len(words) <= 2 or (len(words) == 2 and words[1] not in ABOUT):
        raise ValueError(f"ask about a request as 'RID', 'RID prefix' or 'RID tail' (got {text!r})")
    return words[0], words[1] if len(words) == 2 else None


def request_history(timeline: Timeline, step: int, rid: str) -> list[tuple[int, RequestChange]]:
    """(step, change) for every step up to ``step`` that touched request ``rid``, from
    its latest admission on (a name may be reused once a request ends)."""
    store_globals = timeline.store.globals
    out: list[tuple[int, RequestChange]] = []
    before = _view(store_globals[0].requests, rid)
    for s in range(1, step + 1):
        after_globals = store_globals[s]
        after = before if after_globals is store_globals[s - 1] else _view(after_globals.requests, rid)
        events = [e for e in timeline.records[s - 1].events if e.request == rid]
        if after != before or events:
            change = request_diff(() if before is None else (before,), () if after is None else (after,), events).get(rid)
            if change is not None:
                if change.status == ADDED:
                    out = []
                out.append((s, change))
        before = after
    return out


def _view(requests, rid: str):
    return next((v for v in requests if v.rid == rid), None)


def why_request(timeline: Timeline, step: int, rid: str, about: Optional[str] = None) -> Explanation:
    """Request ``rid`` after ``step``: its state, then every step that changed it (or,
    ``about="prefix"``, only what moved its prefix and lock; ``about="tail"``, only
    what freed or cut its row), each with the op and the cause."""
    _check_step(timeline, step)
    if about not in (None, *ABOUT):
        raise ValueError(f"about must be one of {', '.join(ABOUT)} (got {about!r})")
    history = request_history(timeline, step, rid)
    if not history:
        known = sorted({v.rid for g in timeline.store.globals[: step + 1] for v in g.requests})
        names = f"; requests so far: {', '.join(known)}" if known else "; no request has run yet"
        raise ValueError(f"no request {rid!r} up to step {step}{names}")
    title = f"request {rid} after step {step}" + (f": its {about}" if about else "")
    lines = [_now_line(timeline, history)]
    if about is None:
        told = [(s, f"{_at(_record(timeline, s))}: " + "; ".join(change.lines)) for s, change in history]
    elif about == "prefix":
        told = _prefix_lines(timeline, history)
    else:
        told = _tail_lines(timeline, history)
    lines += [line for _, line in told]
    return Explanation(title, tuple(lines), tuple(sorted({s for s, _ in told if s})))


def _now_line(timeline: Timeline, history) -> str:
    s, last = history[-1]
    if last.status == ENDED:
        return f"ended at {_at(_record(timeline, s))}"
    v = last.after
    lock = f"lock on #{v.lock_node} (receipt {v.lock_receipt})" if v.lock_node is not None else "no lock"
    stop = f", stop after {plural(v.finished_len, 'output token')} (owns {v.owned_len})" if v.finished_len is not None else ""
    chunked = ", still in chunked prefill" if v.is_chunked else ""
    return (f"running: prefix {v.cache_protected_len} of {v.tokens} committed ({v.prompt_len}-token prompt), "
            f"inserted {v.inserted_len}, {lock}{stop}{chunked}")


def _prefix_lines(timeline: Timeline, history) -> list[tuple[int, str]]:
    out = []
    for s, change in history:
        at = _at(_record(timeline, s))
        if change.status == ADDED:
            v = change.after
            found = (f"its match found {plural(v.cache_protected_len, 'token')} cached and it locked node "
                     f"#{v.lock_node}" if v.cache_protected_len else "its match found nothing cached")
            out.append((s, f"{at}: admitted with prefix {v.cache_protected_len}: {found} (why the match stopped "
                           f"there: why at step {s})"))
            continue
        if change.status == ENDED:
            v = change.before
            out.append((s, f"{at}: it ended; its lock on #{v.lock_node} went with it" if v.lock_node is not None
                           else f"{at}: it ended"))
            continue
        prefix, lock = change.field("prefix"), change.field("locked")
        if prefix is None and lock is None:
            continue
        reasons = []
        if lock is not None:
            reasons.append("its " + lock.text)
        inserted = change.field("inserted")
        if inserted is not None:
            reasons.append(f"it had inserted {inserted.before} tokens, now {inserted.after}")
        if prefix is None:
            out.append((s, f"{at}: prefix unchanged at {change.after.cache_protected_len}; " + "; ".join(reasons)))
            continue
        verb = "grew" if prefix.after > prefix.before else "shrank"
        op = _record(timeline, s).step.op
        if verb == "shrank":
            what = f"the {op} reset it" if prefix.after == 0 else f"the {op} cut it"
        else:
            what = f"the {op} cached {plural(prefix.after - prefix.before, 'more token')} in the tree"
        out.append((s, f"{at}: prefix {verb} {prefix.before} → {prefix.after}: {what}" +
                    (f"; {'; '.join(reasons)}" if reasons else "")))
    if len(out) == 1 and history[0][1].status == ADDED:
        out.append((0, "no later step changed its prefix or moved its lock"))
    return out


def _tail_lines(timeline: Timeline, history) -> list[tuple[int, str]]:
    out = []
    for s, change in history:
        at = _at(_record(timeline, s))
        before = change.before
        full_tail = change.freed.get((BASE, Cause.TAIL.value), 0)
        for (component, cause), n in change.freed.items():
            text = f"{at}: {_verb(timeline, s)} freed {plural(n, component + ' slot')} [cause {cause}]"
            why = TAIL_CAUSE_TEXT.get(cause, CAUSE_TEXT.get(Cause(cause), cause) if cause in Cause._value2member_map_
                                      else cause)
            if cause == Cause.TAIL.value and component == BASE and before is not None:
                if (BASE, Cause.STOP.value) in change.freed:  # the row's end is not what it owned
                    why = (f"its tail of {plural(n, 'slot')} past the whole pages it cached, up to its stop "
                           f"({before.tokens} committed) — nothing could match them")
                else:
                    why = (f"its tail of {plural(n, 'slot')}: the committed tokens past the {before.tokens - n} it "
                           f"cached ({before.tokens} committed) — nothing could match them")
            out.append((s, f"{text}: {why}"))
        row = change.field("row")
        if row is not None and change.field("committed") is not None and row.after < row.before and not full_tail:
            out.append((s, f"{at}: {_verb(timeline, s)} cut its row {row.before} → {row.after}: {row.text}"))
    if not out:
        last = history[-1][1]
        v = last.after or last.before
        out.append((0, f"its tail was not freed up to this step: it holds {plural(v.own_len, 'own slot')} past its "
                       f"prefix of {v.cache_protected_len}"))
    return out


def _verb(timeline: Timeline, step: int) -> str:
    return {"release": "release", "req_finish": "release"}.get(_record(timeline, step).step.op,
                                                              f"the {_record(timeline, step).step.op}")
