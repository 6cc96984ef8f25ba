"""The home copy of a job's checkpoints, so a lost session can resume somewhere else.

While a job runs its last complete checkpoint is mirrored home; when a session ends without the
job ending it goes out again to the next target; when the job ends it becomes an output, and
comes back home if the job is resumed. The room, one idea a module:

    home.py       where home keeps it (jobs/<id>/ckpt-home/, its manifest), how status names it
    looks.py      when to look at a job's ckpt/, what a look remembers, when a listing is complete
    pause.py      a full disk at home pauses mirroring, said once; room at home resumes it
    mirroring.py  one look: a new complete checkpoint brought home and swapped in whole
    restore.py    home's checkpoint out to the target a job resumes on, under the job's own names
    settling.py   the job's end (into runs/<id>/checkpoint/) and a resume (back home, checked)

It imports the packages below packaging (paths, jobs, secrets, the runtime's disk helpers) and
packaging's own runswriter and safe_extract. The engine, the providers and the command line call
it as `checkpoints.<name>`: the names they use are here.
"""

from core.packaging.checkpoints.home import MARKER, describe, home_dir, manifest, summary
from core.packaging.checkpoints.looks import due
from core.packaging.checkpoints.mirroring import CopyProgress, mirror
from core.packaging.checkpoints.pause import paused_note
from core.packaging.checkpoints.restore import real_names, restore_archive, restore_local
from core.packaging.checkpoints.settling import reclaim, settle, settled

__all__ = ["MARKER", "CopyProgress", "describe", "due", "home_dir", "manifest", "mirror",
           "paused_note", "real_names", "reclaim", "restore_archive", "restore_local", "settle",
           "settled", "summary"]
