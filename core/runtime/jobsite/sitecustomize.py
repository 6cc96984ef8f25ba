"""Run by Python at the start of every process of a gpu-router job: W&B logging followed,
and `plt.show()` figures saved.

The launcher puts this folder on the job's PYTHONPATH, and Python imports `sitecustomize`
once its site-packages are on sys.path, in every interpreter the job starts (its script, a
`bash run.sh` that calls python, torchrun's workers, a venv's python). That is the one
moment at which the question "is wandb installed here?" has its true answer, in the job's own
interpreter, without starting a second one to ask:

- gpu-router's `wandb` stand-in (../shims) is appended to the END of sys.path, so `import
  wandb` finds the real package wherever it is installed and the stand-in only where not;
- an import hook waits for the real `wandb`: right after it loads, `gpu.wandb_hook.follow`
  wraps its log, summary and finish calls, so gpu-router receives every value it logs;
- the same hook waits for `matplotlib.pyplot`: `gpu.figures.follow` makes a `plt.show()` with
  no screen save the figures into gpu.output_dir() instead of dropping them;
- and for `lightning.pytorch` (loaded by `import lightning` too) and `pytorch_lightning`:
  `gpu.lightning_hook.follow` adds gpu-router's logger to every Trainer, keeps its checkpoints
  in gpu.checkpoint_dir() (a resumed fit continues from the last) and names its logs folder
  as an output.

Nothing else is imported until wandb, pyplot or Lightning is (a process that never uses them pays one
path append and one finder that answers None). A `sitecustomize` that this one hides (a distribution's,
a venv's, the project's own) is run afterwards, so it still does its work. Standard library
only; a failure here is said once on stderr and never stops the job.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_SHIMS = os.path.join(os.path.dirname(_HERE), "shims")


# the modules followed, and the `gpu` module that follows each (imported only once it loads)
FOLLOWED = {"wandb": "wandb_hook", "matplotlib.pyplot": "figures",
            "lightning.pytorch": "lightning_hook", "pytorch_lightning": "lightning_hook"}
_LOST = {  # what a follower that failed to start costs the job, said once in its log
    "wandb_hook": "wandb is not followed: its values will not show in gpu-router",
    "figures": "plt.show() figures will not be saved: call plt.savefig(gpu.output_dir() / 'name.png')",
    "lightning_hook": "Lightning is not followed: its logged values, checkpoints and logs folder "
                      "reach gpu-router only through gpu.log, gpu.checkpoint_dir() and --output",
}


class _FollowWandb(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the real `wandb` (or `matplotlib.pyplot`) to the finders
    after it, with a loader that calls its follower once the module has run."""

    def find_spec(self, name: str, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        if name not in FOLLOWED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        origin = os.path.abspath(spec.origin or "")
        if spec.loader is None or origin.startswith(_SHIMS + os.sep):
            return spec  # the stand-in reports by itself
        spec.loader = _ThenFollow(spec.loader, FOLLOWED[name])
        return spec


class _ThenFollow(importlib.abc.Loader):
    """The real loader, and then `follow`; every other attribute is the real loader's."""

    def __init__(self, loader, follower: str) -> None:  # noqa: ANN001
        self._loader = loader
        self._follower = follower

    def create_module(self, spec):  # noqa: ANN001
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001
        self._loader.exec_module(module)
        try:
            importlib.import_module(f"gpu.{self._follower}").follow(module)
        except Exception as exc:  # noqa: BLE001 - the module works; only gpu-router's part is lost
            print(f"[gpu] {_LOST[self._follower]} ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


def _run_hidden_sitecustomize() -> None:
    """The next `sitecustomize` on sys.path, which this module shadows, run as it would be."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


def _install() -> None:
    if _SHIMS not in sys.path:
        sys.path.append(_SHIMS)
    if not any(isinstance(f, _FollowWandb) for f in sys.meta_path):
        sys.meta_path.insert(0, _FollowWandb())


try:
    _install()
except Exception as _exc:  # noqa: BLE001
    print(f"[gpu] wandb logging is not set up: {_exc}", file=sys.stderr, flush=True)
try:
    _run_hidden_sitecustomize()
except Exception as _exc:  # noqa: BLE001 - as Python itself treats a failing sitecustomize
    print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(_exc).__name__}: {_exc}",
          file=sys.stderr, flush=True)
