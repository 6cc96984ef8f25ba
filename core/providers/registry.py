"""One provider object per configured target: the only place that maps a target's kind to code.

Kept beside the providers (not in the user config) so the config layer never imports them.
The remote kinds are imported when a target of that kind is configured: a submit to the local
machine does not pay for loading the SSH and scheduler code.
"""

from __future__ import annotations

from typing import Any

from core.config.user import UserConfig, load
from core.packaging.safe_extract import OutputCaps
from core.providers.local import LocalProvider


def build(cfg: UserConfig | None = None, only: list[str] | None = None) -> dict[str, Any]:
    """A provider object for each configured target (or those named in `only`), by name."""
    cfg = cfg or load()
    out: dict[str, Any] = {}
    for name, t in cfg.targets.items():
        if only is not None and name not in only:
            continue
        if t.kind == "local":
            out[name] = LocalProvider(name, max_jobs=t.max_jobs, python=t.options.get("python"),
                                      gpus=t.gpus, caps=OutputCaps.from_options(t.options),
                                      network=t.options.get("network", True))
        elif t.kind == "ssh":
            from core.providers.ssh import SSHProvider

            out[name] = SSHProvider.from_config(t)
        elif t.kind == "slurm":
            from core.providers.slurm import SlurmProvider

            out[name] = SlurmProvider.from_config(t)
        elif t.kind == "pbs":
            from core.providers.pbs import PBSProvider

            out[name] = PBSProvider.from_config(t)
        elif t.kind == "kaggle":
            from core.providers.kaggle.target import KaggleProvider

            out[name] = KaggleProvider.from_config(t)
        elif t.kind == "modal":
            from core.providers.modal.target import ModalProvider

            out[name] = ModalProvider.from_config(t)
        elif t.kind == "skypilot":
            from core.providers.skypilot.target import SkyPilotProvider

            out[name] = SkyPilotProvider.from_config(t)
        out[name].enabled = t.enabled
        out[name].queue_timeout_s = t.queue_timeout  # the supervisor's clock for a job not started
        out[name].probe_timeout_s = t.probe_timeout  # core.providers.probing's bound on its probe
    return out
