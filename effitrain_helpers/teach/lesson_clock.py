"""How long did this lesson's cells run? (lesson 5.3's closing line)

A notebook's wall clock from its first cell to its last counts the time a learner spent reading and thinking
between cells. :class:`LessonClock` counts execution only: started in a lesson's set-up cell, it adds up the
time from each cell's start to its end, through IPython's ``pre_run_cell`` and ``post_run_cell`` events. Outside
IPython (a script, a test) there are no cells, and it falls back to the wall clock since it started, saying so.
"""

from __future__ import annotations

import time

from effitrain_helpers.core.language import tr


class LessonClock:
    """Sums the execution time of the cells run after it was started (the cell that starts it counts from
    that moment); :meth:`describe` says what it measured."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.cells = 0
        self._executing = 0.0
        self._cell_began: float | None = self.started  # the starting cell is running now
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover - IPython comes with Jupyter
            get_ipython = None
        self._shell = get_ipython() if get_ipython else None
        if self._shell is not None:
            self._shell.events.register("pre_run_cell", self._pre)
            self._shell.events.register("post_run_cell", self._post)

    def _pre(self, *args) -> None:
        self._cell_began = time.perf_counter()

    def _post(self, *args) -> None:
        if self._cell_began is not None:
            self._executing += time.perf_counter() - self._cell_began
            self.cells += 1
        self._cell_began = None

    @property
    def in_cells(self) -> bool:
        """Whether cells are being counted (in IPython), or only the wall clock."""
        return self._shell is not None

    def seconds(self) -> float:
        """Seconds of execution so far: the finished cells plus the one running now (the wall clock since the
        start outside IPython)."""
        if not self.in_cells:
            return time.perf_counter() - self.started
        running = time.perf_counter() - self._cell_began if self._cell_began is not None else 0.0
        return self._executing + running

    def stop(self) -> float:
        """Stop counting (unregister the events) and return :meth:`seconds`."""
        seconds = self.seconds()
        if self._shell is not None:
            for event, callback in (("pre_run_cell", self._pre), ("post_run_cell", self._post)):
                try:
                    self._shell.events.unregister(event, callback)
                except ValueError:  # already stopped
                    pass
        return seconds

    def describe(self) -> str:
        """One line: the seconds counted, and what they count, in the learner's language (stops the clock)."""
        cells, seconds = self.cells + 1, self.stop()
        if self.in_cells:
            return tr("this lesson's cells ran for {seconds:.0f} s in all ({cells} cells since the set-up cell, "
                      "counting execution only, not the time between cells)", seconds=seconds, cells=cells)
        return tr("this lesson ran for {seconds:.0f} s (wall clock since the set-up cell: no notebook cells to "
                  "count here)", seconds=seconds)
