"""The suite's own schedule: the longest test files first (tests/conftest.py), which the test command keeps."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import LONGEST_FIRST, REPO, pytest_collection_modifyitems


def test_the_longest_files_are_test_files_of_the_suite() -> None:
    """A renamed or removed file would drop out of the order without a word."""
    names = {p.name for p in (REPO / "tests").glob("test_*.py")}
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST) and set(LONGEST_FIRST) <= names


def test_the_longest_files_go_first_and_each_files_tests_keep_their_order() -> None:
    def item(name: str, test: str) -> SimpleNamespace:
        return SimpleNamespace(path=Path("tests") / name, name=test)

    items = [item("test_a.py", "one"), item(LONGEST_FIRST[1], "x"), item("test_a.py", "two"),
             item(LONGEST_FIRST[0], "y"), item(LONGEST_FIRST[1], "z"), item("test_b.py", "three")]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [(i.path.name, i.name) for i in items] == [
        (LONGEST_FIRST[0], "y"), (LONGEST_FIRST[1], "x"), (LONGEST_FIRST[1], "z"),
        ("test_a.py", "one"), ("test_a.py", "two"), ("test_b.py", "three")]


def test_the_test_command_hands_out_files_in_that_order() -> None:
    """xdist's loadfile reorders files by their number of tests unless told not to, which put the few-test long files
    last."""
    command = (REPO / "scripts" / "test.sh").read_text()
    assert "--dist loadfile --no-loadscope-reorder" in command
