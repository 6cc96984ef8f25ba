"""Processes opening a new store at the same moment all get it, in WAL mode (a `gpu submit` and
the supervisor it starts both open a fresh home's store; one of them met "cannot change into wal
mode from within a transaction")."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

OPEN = "import sys; from pathlib import Path; from core.jobs.store import Store; Store(Path(sys.argv[1])); print('ok')"


def test_many_processes_open_a_new_store_at_once(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    for round_ in range(6):
        db = tmp_path / f"r{round_}" / "store.sqlite3"
        db.parent.mkdir()
        procs = [subprocess.Popen([sys.executable, "-c", OPEN, str(db)], cwd=root, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(8)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()
