"""The live view of `autotune run` in a terminal: the trials bar and, while a trial runs, a line saying where it is.

Shown only on a terminal (rich draws nothing live into a pipe or a file) and never with --json.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rich.console import RenderableType
from rich.progress import Progress
from rich.text import Text

from autotune.runners.progress import TrialProgress


class RunProgress(Progress):
    """rich's progress bar with one more line under it: the running trial's progress."""

    live_line: str = ""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.live_line:
            yield Text(self.live_line, no_wrap=True, overflow="ellipsis")

    def show(self, line: str) -> None:
        self.live_line = line
        self.refresh()


def progress_view(bar: RunProgress, label_of: Callable[[int], str]) -> Callable[[TrialProgress], None]:
    """The tuner's progress callback drawing into `bar`; `label_of(trial number)` gives the trial's label."""
    labels: dict[int, str] = {}

    def show(p: TrialProgress) -> None:
        if p.trial not in labels:
            labels[p.trial] = label_of(p.trial)
        bar.show(p.line(labels[p.trial]))

    return show
