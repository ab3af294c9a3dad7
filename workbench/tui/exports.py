"""The workbench's exports, each to a path the user confirms (a free name beside the
scenario suggested, never an existing file): the current step as SVG, the chapter as
a scenario file (live ops included), and the steps so far as a pytest regression test.
A mixin of ``WorkbenchApp``: the binding table's ``export_svg``, ``save_session`` and
``export_test`` actions land here."""

from __future__ import annotations

import os
from pathlib import Path

from ..model.scenarios.errors import one_line
from ..model.scenarios.scenario import ScenarioError
from .screens.choice import ChoiceScreen
from .screens.prompt import PromptScreen


class ExportActions:
    """Needs the app's ``cursor``, ``notify`` and ``push_screen``."""

    def action_export_svg(self) -> None:
        """Write the current step as SVG (what it changed highlighted) where the user says."""
        from ..render.dot import render_svg
        from ..render.picture import picture

        step = self.cursor.step
        self._export(f"export step {step} as SVG (an existing file is never overwritten):",
                     f"{self._output_stem()}-step{step}.svg",
                     lambda path: render_svg(picture(self.cursor.timeline, step, step - 1 if step else None)))

    def _output_stem(self) -> str:
        path = self.cursor.chapter.scenario.path
        return "stdin" if path.startswith("<") else Path(path).stem

    def _beside_scenario(self, name: str) -> str:
        """An export's default path: the first free ``name`` beside the chapter's scenario
        file (from standard input or a bundled scenario: in the current directory), never
        an existing file."""
        from ..model.scenarios.bundled import is_bundled

        path = self.cursor.chapter.scenario.path
        folder = Path(".") if path.startswith("<") or is_bundled(path) else Path(path).parent
        stem, suffix = Path(name).stem, Path(name).suffix
        candidate, n = folder / name, 1
        while os.path.lexists(candidate):
            candidate, n = folder / f"{stem}-{n}{suffix}", n + 1
        return str(candidate)

    def action_save_session(self) -> None:
        """Save this chapter (with live ops) as a scenario: .toml or .jsonl by the name."""
        from ..model.scenarios.writer import scenario_jsonl, scenario_toml

        def text(path: str) -> str:
            if not path.endswith((".toml", ".jsonl")):
                raise ValueError("a scenario file ends in .toml or .jsonl")
            scenario = self.cursor.chapter.scenario
            return scenario_toml(scenario) if path.endswith(".toml") else scenario_jsonl(scenario)

        self._export("save the session as (.toml or .jsonl; an existing file is never overwritten):",
                     f"{self._output_stem()}-session.toml", text, written=self.cursor.saved)

    def action_export_test(self) -> None:
        """Save the timeline up to this step as a pytest regression test. Where a step up
        to here departs from the scenario, ask first: keep its expectations (a test that
        fails until the bug is fixed) or pin today's results (one that passes on it)."""
        from ..model.debugging.regression_test import departures

        step = self.cursor.step
        if step == 0:
            self.notify("nothing to export yet: step 0 is the empty cache before any step (n steps forward)",
                        severity="warning")
            return
        with self.cursor.lock:
            found = departures(self.cursor.timeline, step)
        if not found:
            self._export_test(step, keep_expectations=False)
            return
        more = f" (and {len(found) - 1:,} more)" if len(found) > 1 else ""
        question = (f"steps 1–{step} do not all do what the scenario expects: {found[0]}{more}. "
                    "Which test should the export be?")
        answers = {"keep": "k  keep the scenario's expectations: a test that fails until the bug is fixed",
                   "pin": "p  pin today's results: a test that passes now and fails when the behaviour changes",
                   "no": "n / esc  cancel"}
        self.push_screen(ChoiceScreen(question, answers),
                         lambda choice: choice in ("keep", "pin") and self._export_test(step, choice == "keep"))

    def _export_test(self, step: int, keep_expectations: bool) -> None:
        from ..model.debugging.regression_test import regression_test_source

        kind = "keeping the scenario's expectations" if keep_expectations else "pinned to today's results"
        self._export(f"export steps 1–{step} as a pytest test, {kind}:",
                     f"test_{self._output_stem().replace('-', '_')}_step{step}.py",
                     lambda path: regression_test_source(self.cursor.timeline, step, keep_expectations))

    def _export(self, question: str, name: str, make_text, written=None) -> None:
        """Ask where (a free ``name`` beside the scenario suggested), make the text for
        that path and write it, then call ``written``; a refusal (a bad suffix, an
        existing file) is said in the dialog, which stays open with the typed path."""
        def accept(path: str) -> bool:
            try:
                with self.cursor.lock:
                    text = make_text(path)
            except Exception as exc:  # no dot, a timeline a test cannot replay, a bad suffix …
                said = getattr(exc, "brief", None) or (str(exc).splitlines() or [""])[0]
                self.notify(f"not exported: {one_line(said)}", severity="error", timeout=10, markup=False)
                return False
            if not self._write(path, lambda stream: stream.write(text)):
                return False
            if written is not None:
                written()
            return True

        self.push_screen(PromptScreen(question, self._beside_scenario(name), accept))

    def _write(self, path: str, write) -> bool:
        """Write through ``outputs``: never over a file, a link, a pipe or a device, nor
        over any chapter's scenario; say what happened in the TUI's words. True: written."""
        from ..model.scenarios.outputs import open_output

        inputs = [chapter.scenario.path for chapter in self.cursor.chapters]
        try:
            with open_output(path, inputs, option="", forcible=False) as stream:
                write(stream)
        except ScenarioError as exc:
            self.notify(exc.brief.strip(), title="not saved", severity="error", timeout=10, markup=False)
            return False
        except OSError as exc:
            self.notify(f"{one_line(path)}: {exc.strerror or exc}", title="not saved", severity="error", timeout=10,
                        markup=False)
            return False
        self.notify(f"wrote {one_line(path)}", markup=False)
        return True
