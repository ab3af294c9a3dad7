"""What CI runs: every test file that needs SGLang itself is named by ``make
bridge-test`` (``make test`` skips it, having no SGLang), so none is skipped in both."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bridge_test_files() -> set[str]:
    """The test files named in the Makefile's ``bridge-test`` recipe."""
    text = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^bridge-test:.*\n((?:\t.*\n)+)", text, re.MULTILINE)
    assert recipe, "the Makefile has no bridge-test recipe"
    return set(re.findall(r"tests/\S+\.py", recipe.group(1)))


def test_every_test_file_that_needs_sglang_runs_in_the_bridge_job():
    needing = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
               if re.search(r"^pytestmark = requires_sglang\(\)", path.read_text(), re.MULTILINE)}
    assert needing, "no test file marks itself with requires_sglang(): the check reads nothing"
    assert needing <= bridge_test_files(), sorted(needing - bridge_test_files())
    assert all((ROOT / name).is_file() for name in bridge_test_files())
