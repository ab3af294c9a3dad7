"""Interrupts that land between steps, never inside one.

A Ctrl-C or SIGTERM raised in the middle of a step can leave it half done: an insert
whose slots the tree already took, a stored row without its record. Undoing such a step
is not reliable (the op's own clean-up may then free slots twice and raise an error
that replaces the interrupt, so the run went on and reported a failure nobody made).
So while a step runs, the command's signal handlers hand their exception to
``HOLD.deliver``, which keeps the first one until the step is whole; a second one
during the same step raises at once, so a step that never ends can still be stopped.
Outside a step it raises, as the default handlers do. Knows no CLI: the handlers are
the command's, the ``with HOLD:`` the runner's and the bridge's."""

from __future__ import annotations

from typing import Optional


class StepHold:
    """``with HOLD:`` around one step. Counts the steps running (nested: the bridge's
    step runs ours) and keeps the interrupt that arrived during them, raised when the
    outermost one ends."""

    __slots__ = ("depth", "held")

    def __init__(self) -> None:
        self.depth = 0
        self.held: Optional[BaseException] = None

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc_info) -> None:
        self.depth -= 1
        if not self.depth and self.held is not None:
            held, self.held = self.held, None
            raise held

    def deliver(self, interrupt: BaseException) -> None:
        """For a signal handler: hold ``interrupt`` while a step runs (the first one
        only), else raise it here."""
        if self.depth and self.held is None:
            self.held = interrupt
            return
        raise interrupt


HOLD = StepHold()


def interrupt_behind(error: BaseException) -> Optional[BaseException]:
    """The interrupt an error replaced, if any: an op's clean-up that ran for a Ctrl-C
    (freeing what it had taken) can fail on a half-done step, and its error must not
    pass for the step's outcome."""
    seen = 0
    cause = error.__context__
    while cause is not None and seen < 50:  # a chain is short; the bound guards a cycle
        if isinstance(cause, KeyboardInterrupt):
            return cause
        cause, seen = cause.__context__, seen + 1
    return None


def raise_interrupt_behind(error: BaseException) -> None:
    """Where a step's error becomes its outcome: raise the interrupt it replaced instead."""
    interrupt = interrupt_behind(error)
    if interrupt is not None:
        raise interrupt from None
