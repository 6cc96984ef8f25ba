"""`plt.show()` in a job: the figures are saved into gpu.output_dir(), never lost.

A job runs where no one looks at a screen: matplotlib falls back to its non-interactive Agg
backend, and there `plt.show()` does nothing but warn, so every figure a script "shows" is
gone when the process ends. The job's sitecustomize (core/runtime/jobsite) calls `follow`
right after `matplotlib.pyplot` is imported; from then on, a `plt.show()` under a backend that
has no window saves each open figure as `figures/figure-NNN.png` in the job's output folder
(which comes home to runs/<id>/), says so once per save in the log with how to name them, and
closes them, as closing the windows of an interactive `show()` would: a loop that shows a new
figure every epoch saves each once, not all of them again at every call.

An interactive backend (a person running the same script on a desktop) is left alone.
Standard library only (matplotlib is the job's, handed in); a failure here is said once in
the log and never stops the job.
"""

from __future__ import annotations

import functools
import itertools
import os
from pathlib import Path
from typing import Any

# matplotlib's backends that draw into files or memory only: a show() there shows nothing
NO_WINDOW = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}
_numbers = itertools.count(1)


def follow(pyplot: Any) -> None:
    """Wrap `pyplot.show` (once) so that a show with no window saves the figures."""
    if getattr(pyplot.show, "_gpu_router_saves", False):
        return
    real = pyplot.show

    @functools.wraps(real)
    def show(*args: Any, **kwargs: Any) -> Any:
        try:
            if str(pyplot.get_backend()).lower() in NO_WINDOW:
                _save_open_figures(pyplot)
        except Exception as exc:  # noqa: BLE001 - the job goes on; only the copy is lost
            from gpu import _warn

            _warn(f"plt.show() could not save the figures ({type(exc).__name__}: {exc}); "
                  "save them with plt.savefig(gpu.output_dir() / 'name.png')")
        return real(*args, **kwargs)

    show._gpu_router_saves = True  # type: ignore[attr-defined]
    pyplot.show = show


def _save_open_figures(pyplot: Any) -> list[Path]:
    """Each open figure to a new file in output_dir()/figures/, then closed."""
    from gpu import _warn, output_dir

    nums = list(pyplot.get_fignums())
    if not nums:
        return []
    folder = output_dir() / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    saved = []
    for num in nums:
        path = _free_name(folder)
        pyplot.figure(num).savefig(path)
        saved.append(path)
    pyplot.close("all")
    names = ", ".join(p.name for p in saved)
    _warn(f"plt.show() has no screen here: saved {len(saved)} figure{'s' * (len(saved) != 1)} to "
          f"{folder} ({names}); it comes home with the outputs. To name a figure, call "
          f"plt.savefig(gpu.output_dir() / 'loss.png') before plt.show()")
    return saved


def _free_name(folder: Path) -> Path:
    """The next `figure-NNN.png` no process of the job has taken (several may show at once)."""
    while True:
        path = folder / f"figure-{next(_numbers):03d}.png"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return path
        except FileExistsError:
            continue
