"""Run by `make wheel-test` with an installed wheel's Python, outside the checkout: the
workbench `urc tui` opens on the bundled tour, driven headless (Textual's Pilot), shows
its first screen with the stylesheet applied. Exit 0 when it does; one line otherwise."""

import asyncio
import sys
from pathlib import Path

import workbench
from workbench.cli.common import load_chapters
from workbench.model.scenarios.bundled import TOUR, tour_files
from workbench.tui.app import WorkbenchApp
from workbench.tui.widgets.step_panel import StepPanel

CHECKOUT = Path(__file__).resolve().parents[1]


async def first_screen() -> str:
    app = WorkbenchApp(load_chapters(tour_files()), background=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        title = str(app.query_one(StepPanel).border_title)
        await pilot.press("n")
        assert app.cursor.step == 1, "n did not step"
        assert len(app.cursor.chapters) == len(TOUR), "the tour's chapters are not all open"
        assert app.stylesheet.rules, "no stylesheet rules: workbench.tcss is missing"
        await pilot.press("q")
    return title


def main() -> int:
    where = Path(workbench.__file__).resolve()
    if where.is_relative_to(CHECKOUT):
        print(f"workbench imported from the checkout ({where}), not from the installed wheel")
        return 1
    title = asyncio.run(first_screen())
    if "tour" not in title:
        print(f"the first screen's step panel says {title!r}, not the tour")
        return 1
    print(f"first screen: {title} (workbench from {where.parent})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
