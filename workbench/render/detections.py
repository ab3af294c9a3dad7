"""The fault detection table of ``urc fuzz --faults all``: one row per fault (flagged
or not, where, by which check, shrunk to how many steps), written as the README's
Markdown table; a row read back from a detections.json is checked before it is shown."""

from __future__ import annotations

ROW_FIELDS = ("fault", "flagged", "runs", "first_faulty_step")
FLAGGED_FIELDS = ("config", "seed", "flagged_step", "check", "shrunk_steps", "sanity_check_catches")


def check_detection_row(row) -> bool:
    """A kept row as ``detection_text`` reads it (a hand-edited file fails here, in one line)."""
    if not isinstance(row, dict) or any(name not in row for name in ROW_FIELDS
                                        + (FLAGGED_FIELDS if row.get("flagged") else ())):
        raise ValueError(f"a row without one of {', '.join(ROW_FIELDS + FLAGGED_FIELDS)}")
    return True


def detection_text(rows: list[dict]) -> str:
    """The README's table: one row per fault."""
    lines = ["| fault | config (seed) | first faulty step | flagged at | by | shrunk to | counters+LRU check |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["flagged"]:
            lines.append(f"| `{r['fault']}` | not flagged in {r['runs']} runs | {r['first_faulty_step'] or '—'} "
                         "| — | — | — | — |")
            continue
        lines.append(f"| `{r['fault']}` | {r['config']} ({r['seed']}) | {r['first_faulty_step'] or '—'} | "
                     f"{r['flagged_step']} | {r['check']} | {r['shrunk_steps']} steps | "
                     f"{'yes' if r['sanity_check_catches'] else 'no'} |")
    flagged = sum(r["flagged"] for r in rows)
    first = sum(1 for r in rows if r["flagged"] and r["first_faulty_step"] == r["flagged_step"])
    small = sum(1 for r in rows if r["flagged"] and r["shrunk_steps"] is not None and r["shrunk_steps"] <= 10)
    sanity = sum(1 for r in rows if r.get("sanity_check_catches"))
    lines.append("")
    lines.append(f"{flagged}/{len(rows)} flagged, {first} at their first faulty step, {small} shrunk to ≤ 10 steps; "
                 f"a counters-and-LRU check alone catches {sanity}.")
    return "\n".join(lines)
