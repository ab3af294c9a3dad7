"""``c`` / ``C`` (run to the next or previous step where a breakpoint holds) and ``l``
(the charts, with the breakpoints marked). A mixin of ``WorkbenchApp``: the binding
table's ``continue``, ``timeline`` and ``cancel_scan`` land here.

Breakpoints the model answers at once (a short chapter, counters read off the series,
failures off a stored run's index) act straight away. Any other scan reads step after
step, so it runs in a worker thread, a chunk of steps per hold of the cursor's lock:
the screen stays live, a progress bar shows how far it got, and Esc calls it off. The
charts' markers, once read, are kept until the breakpoints change."""

from __future__ import annotations

from textual import work
from textual.widgets import ProgressBar
from textual.worker import get_current_worker

from ..model.scenarios.errors import one_line
from .screens.charts import ChartsScreen


class ScanAction:
    """Needs the app's ``cursor``, ``notify``, ``refresh_view``, ``query_one`` and ``call_from_thread``."""

    _scan_running = False

    def action_continue(self, forward: bool) -> None:
        """Run to the next (previous) step where a breakpoint holds."""
        if self._scan_running:
            self.notify("a breakpoint scan is running: esc calls it off", severity="warning")
            return
        if self.cursor.breakpoints_quick():
            self._scan_done(forward, self.cursor.find_breakpoint(forward), False)
            return
        self._start_scan_bar()
        self.scan_in_background(lambda stop, progress: self.cursor.find_breakpoint(forward, stop, progress),
                                lambda hit, cancelled: self._scan_done(forward, hit, cancelled))

    def _start_scan_bar(self) -> None:
        self._scan_running = True
        bar = self.query_one("#scanning", ProgressBar)
        bar.update(total=None, progress=0)
        bar.display = True

    def action_timeline(self) -> None:
        """The whole run as charts (pools, hit rate, tree): enter goes to the step chosen."""
        if self._scan_running:
            self.notify("a breakpoint scan is running: esc calls it off", severity="warning")
            return
        series, conditions = self.cursor.series(), tuple(self.cursor.active_breakpoints)
        if series.breakpoints == conditions or self.cursor.breakpoints_quick():
            series.set_breakpoints(conditions)
            self._show_charts(series)
            return
        self._start_scan_bar()
        self.scan_in_background(lambda stop, progress: series.find_hits(conditions, stop, progress, self.cursor.lock),
                                lambda hits, cancelled: self._marks_done(series, conditions, hits))

    def _show_charts(self, series) -> None:
        def go(step: int | None) -> None:
            if step is not None:
                self._move(step)

        self.push_screen(ChartsScreen(series, self.cursor.step), go)

    def _marks_done(self, series, conditions: tuple, hits) -> None:
        self._scan_finished()
        if hits is None:
            self.notify("marking the breakpoints called off: no charts opened", markup=False)
            return
        series.set_breakpoints(conditions, hits)
        self._show_charts(series)

    def action_cancel_scan(self) -> None:
        """Esc: call off a running breakpoint scan (the cursor stays where it was)."""
        if self._scan_running:
            self.workers.cancel_group(self, "scan")

    @work(thread=True, exclusive=True, group="scan")
    def scan_in_background(self, scan, done) -> None:
        """``scan(should_stop, progress)`` off the UI thread, then ``done(result,
        cancelled)`` on it; the progress bar follows and Esc sets ``should_stop``."""
        worker = get_current_worker()

        def progress(steps: int, total: int) -> None:
            if not worker.is_cancelled:
                self.call_from_thread(self._scan_progress, steps, total)

        try:
            result = scan(lambda: worker.is_cancelled, progress)
        except Exception as exc:  # a damaged store's step: said, and the workbench stays open
            self.call_from_thread(self._scan_failed, exc)
            return
        self.call_from_thread(done, result, worker.is_cancelled)

    def _scan_progress(self, done: int, total: int) -> None:
        self.query_one("#scanning", ProgressBar).update(total=max(total, 1), progress=done)

    def _scan_finished(self) -> None:
        self._scan_running = False
        self.query_one("#scanning", ProgressBar).display = False

    def _scan_failed(self, exc: Exception) -> None:
        self._scan_finished()
        self.notify(one_line(f"the scan stopped: {exc}"), severity="error", markup=False)

    def _scan_done(self, forward: bool, hit, cancelled: bool) -> None:
        self._scan_finished()
        if cancelled:
            self.notify(f"scan called off; still at step {self.cursor.step:,}", markup=False)
            return
        if hit is None:
            where = "after" if forward else "before"
            conditions = " or ".join(c.text for c in self.cursor.active_breakpoints)
            self.notify(f"no step {where} this one where {conditions} holds", severity="warning", markup=False)
            return
        self.cursor.go(hit[0])
        self.refresh_view()
        self.notify(f"step {hit[0]:,}: {one_line(hit[1].text)}", markup=False)
