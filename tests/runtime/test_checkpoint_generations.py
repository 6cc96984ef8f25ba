"""Saves frozen where they were written (core/runtime/ckptgen.py), listed and packed from there
(core/runtime/ckptscan.py) and brought home whole (core/packaging/checkpoints/mirroring.py), however
often the job saves: the race the mirror used to lose (a save between the listing and the
packing) now never drops a checkpoint, and never mixes two.

The property drives a real folder on disk: a job writing its files in place or by rename,
saving, and writing again while a save is being frozen; every generation the mirror's rule
accepts must hold exactly the files of one save. Writes change a file's length, so that
size and mtime (what the marker records) tell every write apart within one clock tick."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from core.packaging import checkpoints
from core.providers.local import LocalProvider
from core.runtime import RUNTIME_DIR, ckptgen, ckptscan
from tests.props import examples
from tests.stubs import StubJob as _Job


def _saved(ckpt: Path) -> int:
    """gpu.checkpoint_saved() as a job calls it, where gpu-router mirrors (generations on)."""
    out = subprocess.run([sys.executable, "-c", "import gpu; print(gpu.checkpoint_saved())"],
                         env={**os.environ, "PYTHONPATH": str(RUNTIME_DIR),
                              "GPU_ROUTER_CHECKPOINT_DIR": str(ckpt),
                              "GPU_ROUTER_CHECKPOINT_GENERATIONS": str(ckpt.parent / "ckpt-gens")},
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _write(path: Path, data: bytes, rename: bool) -> None:
    if rename:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    else:
        with open(path, "r+b" if path.exists() else "wb") as f:  # the same inode, rewritten
            f.truncate(0)
            f.write(data)


def _mark(folder: Path) -> dict[str, list[int]]:
    """What checkpoint_saved records: each file's size and mtime."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith(ckptgen.MARKER):
            s = p.stat()
            out[p.name] = [s.st_size, s.st_mtime_ns]
    return out


def _accepted(gen: Path) -> bool:
    """The rule the listing applies to a generation folder: its files match its marker."""
    try:
        named = json.loads((gen / ckptgen.MARKER).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return False
    have = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in gen.iterdir() if p.name != ckptgen.MARKER}
    return set(have) == set(named) and all(have[k] == named[k][:2] for k in named)


NAMES = ("model.bin", "optim.bin", "step.json")
op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES)),
    st.tuples(st.just("save"), st.none()),
    st.tuples(st.just("race"), st.sampled_from(NAMES)),  # a write during the freeze
)
# how the job writes each file: by rename (True) or in place, the same way each time (a file
# the job first replaces by rename and later rewrites in place spoils the generations linked
# to it: the marker check then refuses them, and the mirror takes the next whole one)
modes = st.fixed_dictionaries({name: st.booleans() for name in NAMES})


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25), by_rename=modes)
def test_a_save_racing_the_capture_never_yields_a_mixed_set(tmp_path_factory, ops, by_rename) -> None:
    root = tmp_path_factory.mktemp("job")
    live, gens = root / "ckpt", root / "ckpt-gens"
    live.mkdir()
    count = [0]

    def put(name: str) -> None:
        count[0] += 1
        _write(live / name, f"{name}:{count[0]}:".encode() + b"x" * count[0], by_rename[name])

    for name in NAMES:
        put(name)
    saved: dict[int, dict[str, bytes]] = {}
    whole: set[int] = set()
    generation = 0
    for kind, name in ops:
        if kind == "write":
            put(name)
            for g in whole & set(ckptgen.generations(str(gens))):
                assert _accepted(gens / ckptgen.gen_name(g)), (g, ops)
            continue
        generation += 1
        files = _mark(live)
        saved[generation] = {n: (live / n).read_bytes() for n in files}
        hook = (lambda _rel, n=name: put(n)) if kind == "race" else None
        fired = [False]

        def once(rel: str, hook=hook) -> None:
            if hook is not None and not fired[0]:
                fired[0] = True
                hook(rel)
        ckptgen.capture(str(live), str(gens), generation, files, {"generation": generation}, between=once)
        present = ckptgen.generations(str(gens))
        assert len(present) <= ckptgen.KEEP
        for g in present:
            folder = gens / ckptgen.gen_name(g)
            if _accepted(folder):  # whatever the rule accepts is one save, whole
                got = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != ckptgen.MARKER}
                assert got == saved[g], (g, ops)
                whole.add(g)
            else:  # and a generation never changes once written: the job's later writes leave it be
                assert g not in whole, (g, ops)
        listing = ckptscan.scan(str(live))
        if "generation_dir" in listing:  # what the mirror would take: one save, whole
            g = int(listing["generation_dir"])
            packed = {rel: (gens / listing["generation_dir"] / rel).read_bytes() for rel in listing["files"]}
            assert packed == saved[g]
        if kind == "save":  # nobody raced it: it was frozen
            assert generation in present


def test_a_save_between_the_listing_and_the_packing_still_comes_home(home: Path) -> None:
    """The issue's race: the mirror lists, the job saves again, the mirror packs. The frozen
    generation comes home whole; and one pruned before it was pinned gives way to a newer one."""
    job = _Job("ab" * 16)
    inner = LocalProvider()
    ckpt = inner.job_dir(job) / "ckpt"
    ckpt.mkdir(parents=True)
    step = [0]

    def save() -> int:
        step[0] += 1
        (ckpt / "model.bin").write_bytes(bytes([step[0]]) * (100_000 + step[0]))  # in place
        tmp = ckpt / "state.json.tmp"
        tmp.write_text(json.dumps({"step": step[0]}))
        os.replace(tmp, ckpt / "state.json")  # by rename
        return _saved(ckpt)

    class Racing:  # the local target, with the job saving between the listing and the packing
        name, caps = inner.name, inner.caps

        def __init__(self, saves: int) -> None:
            self.saves = saves

        async def checkpoint_scan(self, job):
            return await inner.checkpoint_scan(job)

        async def checkpoint_pack(self, job, rels, archive, generation=None, progress=None):
            for _ in range(self.saves):
                save()
            return await inner.checkpoint_pack(job, rels, archive, generation)

    assert save() == 1
    doc = asyncio.run(checkpoints.mirror(job, Racing(1)))
    assert doc is not None and doc["generation"] == 1
    home_copy = checkpoints.home_dir(job.id)
    assert json.loads((home_copy / "state.json").read_text()) == {"step": 1}
    assert (home_copy / "model.bin").read_bytes() == bytes([1]) * 100_001
    # the live folder is at step 2 now, and the job goes on saving while each copy is made
    for expect in (2, 3, 4):
        doc = asyncio.run(checkpoints.mirror(job, Racing(1)))
        assert doc is not None and doc["generation"] == expect, doc
        assert json.loads((home_copy / "state.json").read_text()) == {"step": expect}
        assert (home_copy / "model.bin").read_bytes() == bytes([expect]) * (100_000 + expect)
    # saving faster than KEEP generations per copy: the listed one is pruned before it is
    # pinned; nothing mixed comes home, and the next look takes the newest
    assert asyncio.run(checkpoints.mirror(job, Racing(ckptgen.KEEP + 1))) is None
    assert json.loads((home_copy / "state.json").read_text()) == {"step": 4}
    doc = asyncio.run(checkpoints.mirror(job, inner))
    assert doc["generation"] == step[0] and json.loads((home_copy / "state.json").read_text()) == {"step": step[0]}
    # the job never sees the generations in its checkpoint folder, and only KEEP stay
    assert sorted(p.name for p in ckpt.iterdir()) == [".complete", "model.bin", "state.json"]
    assert len(ckptgen.generations(str(ckpt.parent / "ckpt-gens"))) == ckptgen.KEEP


def test_files_replaced_by_rename_are_linked_and_files_written_in_place_are_copied(tmp_path: Path) -> None:
    live, gens = tmp_path / "ckpt", tmp_path / "ckpt-gens"
    live.mkdir()
    (live / "big.bin").write_bytes(b"a" * 5000)
    (live / "same.bin").write_bytes(b"s" * 10)
    assert ckptgen.capture(str(live), str(gens), 1, _mark(live), {"generation": 1})
    _write(live / "big.bin", b"b" * 6000, rename=True)
    assert ckptgen.capture(str(live), str(gens), 2, _mark(live), {"generation": 2})
    g1, g2 = gens / ckptgen.gen_name(1), gens / ckptgen.gen_name(2)
    assert (g2 / "big.bin").stat().st_ino == (live / "big.bin").stat().st_ino  # renamed in: linked
    assert (g2 / "same.bin").stat().st_ino == (g1 / "same.bin").stat().st_ino  # unchanged: shared
    assert (g2 / "same.bin").stat().st_ino != (live / "same.bin").stat().st_ino  # never the live inode
    _write(live / "same.bin", b"t" * 11, rename=False)  # in place: a link would follow the job's writes
    assert ckptgen.capture(str(live), str(gens), 3, _mark(live), {"generation": 3})
    g3 = gens / ckptgen.gen_name(3)
    assert (g3 / "same.bin").stat().st_ino != (live / "same.bin").stat().st_ino
    _write(live / "same.bin", b"u" * 12, rename=False)
    assert (g3 / "same.bin").read_bytes() == b"t" * 11 and _accepted(g3)
