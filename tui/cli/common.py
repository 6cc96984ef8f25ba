"""What the `gpu` commands share: the project you are in, the store, who is at the keyboard,
and the question a person is asked before a broad folder ships.

Imports stay lazy, as everywhere in the CLI, so `gpu submit --json` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable

from core.errors import UserError
from tui.show.output import ask, write


def here() -> str | None:
    """The project the command runs in, for `last`: the git work tree holding the current
    folder, or the folder itself if it has a gpu.yaml; None outside any project."""
    from core.config.gitroot import find_root

    cwd = os.getcwd()
    root, in_git = find_root(Path(cwd))
    if in_git:
        return str(root)
    return cwd if os.path.exists(os.path.join(cwd, "gpu.yaml")) else None


def project_and_script(args: argparse.Namespace) -> tuple[str, str | None]:
    """The project folder a submit, plan or bundle means, and its SCRIPT argument relative to
    it. `--project-dir` is taken as given; otherwise the project is found like git finds its
    repository (core.config.gitroot.find_project: the nearest gpu.yaml from here up to the git
    root), and a script named relative to the current folder (`gpu submit train.py` in
    `repo/src/`) is named relative to that project (`src/train.py`), as git takes paths."""
    from core.config.gitroot import find_project
    from core.config.request import PROJECT_FILE

    script = getattr(args, "script", None)
    if args.project_dir:
        return args.project_dir, script
    cwd = Path(os.getcwd())
    project = find_project(cwd, PROJECT_FILE)
    if project != cwd and script and os.path.isfile(cwd / script) \
            and not os.path.isfile(project / script):
        script = os.path.relpath(os.path.normpath(cwd.resolve() / script), project)
    return str(project), script


def open_store():
    """The store, for a command that reads jobs; live jobs that no supervisor drives (a submit
    killed after its commit, a supervisor killed) get one started on the way."""
    from core.engine.daemon import supervise_live
    from core.jobs.store import Store

    store = Store()
    supervise_live(store)
    return store


def actor_of(args: argparse.Namespace):
    """Who runs this command (core.engine.actor: a tty is not enough, an agent marker or
    --json makes it an agent's)."""
    from core.engine.actor import current

    return current(json=bool(getattr(args, "json", False)))


def interactive(args: argparse.Namespace) -> bool:
    """A person at a terminal, who may be asked; an agent never is."""
    return actor_of(args).is_person


def confirm_broad(args: argparse.Namespace, run: Callable[[bool], Any]) -> Any:
    """Run `run(allow_large)`; a project that is the home folder or a big folder outside git
    is shown to a person at a terminal, who says y to ship it; an agent gets the error."""
    from core.packaging.listing import ProjectTooBroad

    allow = bool(getattr(args, "allow_large_project", False))
    try:
        return run(allow)
    except ProjectTooBroad as exc:
        if allow or not interactive(args):
            raise
        write(f"{exc.where}: {exc.what}\n", sys.stderr)
        answer = ask(f"{exc.question} [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise UserError("nothing was shipped: you answered no", where=exc.where, fix=exc.fix) from None
        return run(True)
