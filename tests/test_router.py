"""Routing by GPU and VRAM, and reading what `nvidia-smi` says a machine has."""

from __future__ import annotations

import pytest

from core.config.request import JobRequest
from core.errors import UserError
from core.providers.gpuprobe import parse_nvidia_smi
from core.providers.base import TargetInfo
from core.planning.router import route

# recorded from `nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`
SMI_H200 = "0, NVIDIA H200, 143771\n"
SMI_TWO = "0, Tesla T4, 15360\n1, Tesla T4, 15360\n"


def _req(**kw) -> JobRequest:
    return JobRequest(project_dir="/p", script="a.py", **kw)


def test_nvidia_smi_rows_become_gpus() -> None:
    (h200,) = parse_nvidia_smi(SMI_H200)
    assert h200.name == "NVIDIA H200" and h200.memory_gb == pytest.approx(140.4, abs=0.1)
    t4s = parse_nvidia_smi(SMI_TWO + "garbage line\n")
    assert [g.index for g in t4s] == [0, 1] and t4s[0].memory_gb == 15.0


def _infos() -> dict[str, TargetInfo]:
    smi = parse_nvidia_smi(SMI_TWO)
    return {"local": TargetInfo("local", "local", True, gpus=[]),
            "box": TargetInfo("box", "local", True,
                              gpus=[{"name": g.name, "memory_gb": g.memory_gb} for g in smi])}


def test_a_gpu_request_skips_the_cpu_only_target_and_says_why() -> None:
    r = route(_req(gpu="t4"), _infos())
    assert r.target == "box" and r.gpu == "2x Tesla T4"
    assert "no GPU" in r.passed_over["local"]


def test_requests_no_target_meets_are_refused_with_each_reason() -> None:
    with pytest.raises(UserError) as err:
        route(_req(vram_gb=40), _infos())
    assert "local has no GPU memory" in err.value.what and "box has 15 GB" in err.value.what
    with pytest.raises(UserError, match="no target named 'nope'"):
        route(_req(provider="nope"), _infos())


def test_without_constraints_local_is_preferred() -> None:
    assert route(_req(), _infos()).target == "local"
    assert route(_req(provider="box"), _infos()).reasons[0] == "pinned with provider=box"
