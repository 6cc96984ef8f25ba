"""compute_job's `cwd`: a project named relative to the server's projects root, and never out of it.

The compute contract writes `cwd` as a name relative to the projects root: `mcp.projects_root`
in the user config, else the folder `gpu mcp` was started in. An agent names `yolo` or
`experiments/yolo`, never a place elsewhere on the person's disk. This module is the one choke
point for that guarantee (tests/tui/mcp/test_mcp_agent.py holds a property over it): whatever the
name, the folder it returns is a real directory strictly inside the root, or the name is
refused with what to pass instead.

- The root itself is refused (`""`, `.`, `a/..`): a job ships its whole working folder, and
  the root holds every project.
- A `..` anywhere in the name is refused, even one that would come back inside: the contract
  names folders below the root, and a name with no `..` is easy to read in a hold or a log.
- Links are followed, then the real folder must still be inside the root: a link to a folder
  elsewhere (or a link in the root's own path that points out) is refused.
- An absolute path (or `~/...`) is a name the contract does not write; it is taken only when
  it is inside the root (an agent that turned the name into a full path means the same folder)
  and refused otherwise, with the same checks.
- A folder inside a git work tree ships the whole tree (core.config.gitroot): when that tree
  is the root, or holds it, the job would ship the root or more, so that is refused too.
"""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import UserError, shorten


def projects_root(configured: Path | None, started_in: Path) -> Path:
    """The root compute_job's cwd names a folder in: the user config's mcp.projects_root, else
    the folder the server was started in; resolved, and an existing directory."""
    root = configured if configured is not None else started_in
    try:
        real = root.resolve(strict=True)
    except (OSError, RuntimeError):
        real = None
    if real is None or not real.is_dir():
        raise UserError(f"the projects root {shorten(str(root))} is not a folder",
                        where="mcp.projects_root" if configured is not None else "gpu mcp",
                        fix="set mcp.projects_root in the user config to the folder that holds "
                            "your projects, or start `gpu mcp` in it")
    return real


def resolve_cwd(root: Path, name: str, *, where: str = "cwd") -> Path:
    """The real directory `name` means under `root` (already resolved), or a UserError.

    Pure filesystem reads (no git): the property test calls it with any name."""
    hint = f"pass a folder's name relative to the projects root {root}, e.g. \"yolo\""
    if "\x00" in name:
        raise UserError(f"cwd {shorten(name)} holds a NUL character", where=where, fix=hint)
    expanded = os.path.expanduser(name) if name.startswith("~") else name
    given = Path(expanded)
    if any(part == ".." for part in given.parts):
        raise UserError(f"cwd {shorten(name)} climbs out with '..'", where=where, fix=hint)
    candidate = given if given.is_absolute() else root / given
    try:
        real = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise UserError(f"there is no folder {shorten(name)} under the projects root {root}",
                        where=where, fix=hint) from None
    except (OSError, RuntimeError, ValueError) as exc:  # a link loop, a name too long, ...
        raise UserError(f"cwd {shorten(name)} cannot be read: {exc}", where=where, fix=hint) from None
    if real == root:
        raise UserError(f"cwd {shorten(name)} is the projects root itself, which holds every project",
                        where=where, fix=hint)
    if not real.is_relative_to(root):
        what = "is outside" if given.is_absolute() else "leads out of"
        raise UserError(f"cwd {shorten(name)} {what} the projects root {root} (it is {real})",
                        where=where, fix=hint)
    if not real.is_dir():
        raise UserError(f"cwd {shorten(name)} is not a folder", where=where, fix=hint)
    return real


def project_in_root(root: Path, name: str, *, where: str = "cwd") -> Path:
    """`resolve_cwd`, and then what would ship must be inside the root too: a folder in a git
    work tree ships that tree, so the tree may not be the root or hold it."""
    from core.config.gitroot import find_root

    real = resolve_cwd(root, name, where=where)
    ships, in_git = find_root(real)
    if in_git and not (ships != root and ships.is_relative_to(root)):
        raise UserError(f"cwd {shorten(name)} is inside the git repository {ships}, which would "
                        f"ship whole, and it is {'the projects root itself' if ships == root else 'above the projects root'}",
                        where=where,
                        fix="name a project that is its own repository (or not in one), or set "
                            "mcp.projects_root to the folder above the repository")
    return real
