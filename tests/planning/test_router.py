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


def test_without_constraints_this_machines_gpu_is_preferred_to_its_cpu() -> None:
    r = route(_req(), _infos())
    assert r.target == "box" and "GPU is preferred" in r.passed_over["local"]
    pinned = route(_req(provider="local"), _infos())  # the target named local: a name wins
    assert pinned.target == "local" and pinned.reasons[0].startswith("pinned with provider=local: the target named local")


def _free_first() -> dict[str, TargetInfo]:
    t4 = [{"name": "T4", "memory_gb": 15.0}]
    return {"local": TargetInfo("local", "local", True, gpus=[{"name": "RTX 3060", "memory_gb": 12.0}]),
            "kg": TargetInfo("kg", "kaggle", True, gpus=t4 * 2, quota_hours_left=20.0),
            "cloud": TargetInfo("cloud", "ssh", True, gpus=[{"name": "A100", "memory_gb": 80.0}],
                                price_per_hour=1.5),
            "cheap": TargetInfo("cheap", "ssh", True, gpus=[{"name": "A10", "memory_gb": 24.0}],
                                price_per_hour=0.5)}


def test_free_quota_first_then_the_local_gpu_then_paid_by_price() -> None:
    infos = _free_first()
    r = route(_req(hours=2), infos)
    assert r.target == "kg"
    assert "uses up to 2 h of its 20 h of free quota left this week (18 h after it)" in r.reasons
    assert "free quota is used first" in r.passed_over["local"]
    assert "is free" in r.passed_over["cloud"]
    assert route(_req(hours=0.1, smoke=True), infos).target == "local"  # a smoke test: this machine
    infos["kg"].quota_hours_left = 1.0  # less than the job asks for: routed elsewhere, said why
    r = route(_req(hours=2), infos)
    assert r.target == "local" and "1 h of quota left this week, and 2 h were asked for" in r.passed_over["kg"]
    r = route(_req(hours=2, vram_gb=20), infos)  # more VRAM than Kaggle's T4 or the 3060: paid, cheapest
    assert r.target == "cheap" and "kg has 15 GB" in r.passed_over["kg"]
    assert "dearer" in r.passed_over["cloud"]


def test_colab_is_refused_honestly_with_the_way_to_attach_one() -> None:
    with pytest.raises(UserError) as err:
        route(_req(provider="colab"), _infos())
    assert "no job API" in err.value.what
    assert "gpu targets add ssh colab" in err.value.fix and "gpu targets add kaggle" in err.value.fix
    infos = {**_infos(), "colab": TargetInfo("colab", "ssh", True, gpus=[{"name": "T4", "memory_gb": 15.0}])}
    assert route(_req(provider="colab"), infos).target == "colab"  # one attached over ssh is a target


def test_a_target_with_several_gpu_set_ups_gives_the_one_the_request_needs() -> None:
    t4 = [{"name": "T4", "memory_gb": 15.0}] * 2
    p100 = [{"name": "P100", "memory_gb": 16.0}]
    infos = {"kg": TargetInfo("kg", "kaggle", True, gpus=t4, quota_hours_left=20.0,
                              offers={"t4x2": t4, "p100": p100}, takes_secrets=False)}
    assert route(_req(hours=1), infos).offer is None  # the default set-up fits as it is
    r = route(_req(hours=1, gpu="P100"), infos)
    assert (r.target, r.gpu, r.offer) == ("kg", "1x P100", "p100")
    r = route(_req(hours=1, vram_gb=16), infos)
    assert r.offer == "p100"
    secret = route(_req(hours=1, secrets=["HF_TOKEN"]), {**infos, **_infos()})
    assert secret.target != "kg" and "cannot receive keychain secrets" in secret.passed_over["kg"]
    with pytest.raises(UserError, match="kg has 2x T4|kg has T4"):
        route(_req(hours=1, gpu="A100"), infos)


def _two_kaggles() -> dict[str, TargetInfo]:
    t4 = [{"name": "T4", "memory_gb": 15.0}] * 2
    return {**_free_first(),
            "kg2": TargetInfo("kg2", "kaggle", True, gpus=t4, quota_hours_left=3.0)}


def test_a_kind_pins_the_targets_of_that_kind_and_the_router_chooses_among_them() -> None:
    infos = _free_first()  # one kaggle target, kg: `gpu targets add kaggle kg` as the README says
    r = route(_req(hours=0.5, smoke=True, provider="kaggle"), infos)  # unpinned, a smoke test stays here
    assert r.target == "kg" and r.reasons[0] == "pinned with provider=kaggle: kg is the one kaggle target"
    r = route(_req(hours=0.5, provider="ssh"), infos)  # two ssh targets, both paid: the cheaper
    assert r.target == "cheap" and "chose cheap among the ssh targets cheap, cloud" in r.reasons[0]
    assert set(r.passed_over) == {"cloud"} and "dearer" in r.passed_over["cloud"]
    infos = _two_kaggles()
    r = route(_req(hours=2, provider="kaggle"), infos)  # kg2 has 3 h left, kg 20: both fit, kg by name
    assert r.target == "kg" and set(r.passed_over) == {"kg2"}
    r = route(_req(hours=5, provider="kaggle"), infos)  # only kg has 5 h left
    assert r.target == "kg" and "3 h of quota left" in r.passed_over["kg2"]
    infos["kg"].available, infos["kg"].why_unavailable = False, "session ended"  # a move stays in the kind
    r = route(_req(hours=2, provider="kaggle"), infos)
    assert r.target == "kg2" and "kg is unavailable: session ended" in r.passed_over["kg"]
    with pytest.raises(UserError) as err:  # none of the kind fits: each one's reason, no other kind's
        route(_req(hours=5, provider="kaggle"), infos)
    assert "kg is unavailable" in err.value.what and "kg2 has 3 h" in err.value.what
    assert "cheap" not in err.value.what


def test_a_name_wins_over_a_kind_and_says_so() -> None:
    infos = {**_two_kaggles(), "kaggle": TargetInfo("kaggle", "ssh", True, gpus=[{"name": "A10", "memory_gb": 24.0}])}
    r = route(_req(hours=1, provider="kaggle"), infos)
    assert r.target == "kaggle" and r.passed_over == {}
    assert r.reasons[0] == ("pinned with provider=kaggle: the target named kaggle (a name wins over "
                            "the kind; kg, kg2 also of kind kaggle)")
    assert route(_req(hours=1, provider="kg2"), infos).reasons[0] == "pinned with provider=kg2"


def test_a_kind_with_no_target_says_how_to_add_one_and_an_unknown_pin_lists_both() -> None:
    for kind in ("slurm", "pbs", "modal"):
        with pytest.raises(UserError) as err:
            route(_req(provider=kind), _free_first())
        assert err.value.what == f"no {kind} target is configured" and err.value.where == "provider"
        assert f"gpu targets add {kind} NAME" in err.value.fix
    with pytest.raises(UserError) as err:  # `local` given to another kind, and no local one left
        route(_req(provider="local"), {"box": TargetInfo("box", "ssh", True)})
    assert "no target of kind local" in err.value.what and "{kind: local}" in err.value.fix
    with pytest.raises(UserError) as err:
        route(_req(provider="kagle"), _free_first())
    assert "no target named 'kagle'" in err.value.what and "not a kind" in err.value.what
    assert "cheap, cloud, kg, local" in err.value.fix and "kaggle" in err.value.fix


def _busy_local() -> dict[str, TargetInfo]:
    """This machine's GPU with its one slot taken, an idle free ssh box, an idle paid cloud."""
    t4 = [{"name": "T4", "memory_gb": 15.0}]
    return {"local": TargetInfo("local", "local", True, gpus=t4, max_jobs=1, running=1),
            "box1": TargetInfo("box1", "ssh", True, gpus=t4, max_jobs=2, running=1),
            "cloud": TargetInfo("cloud", "ssh", True, gpus=t4, price_per_hour=2.0)}


def test_a_busy_target_gives_way_to_a_fitting_one_that_can_start_the_job_now() -> None:
    infos = _busy_local()
    r = route(_req(hours=1), infos)
    assert r.target == "box1"
    assert "local is busy (1 of 1 in use): box1 can start it now" in r.reasons
    assert r.passed_over["local"] == "busy (1 of 1 in use); box1 can start it now"
    assert "is free" in r.passed_over["cloud"]
    infos["local"].running = 0  # idle again: this machine's GPU first, as before
    assert route(_req(hours=1), infos).target == "local"
    infos["local"].waiting = 1  # a job placed there and not started yet takes the slot too
    r = route(_req(hours=1), infos)
    assert r.target == "box1" and "local is busy (the slot is held by 1 job placed there first, about to start)" in r.reasons[0]


def test_a_pinned_busy_target_waits_and_a_busy_free_one_is_not_traded_for_money() -> None:
    infos = _busy_local()
    r = route(_req(hours=1, provider="local"), infos)
    assert r.target == "local"
    assert r.reasons[:2] == ["pinned with provider=local",
                             "local is busy (1 of 1 in use): the job waits for a free slot there (pinned there)"]
    infos["box1"].running = 2  # every free target busy, only the paid one idle: wait, do not spend
    r = route(_req(hours=1), infos)
    assert r.target == "local" and "cost money" in r.reasons[0] and "queue_timeout_s" in r.reasons[0]
    del infos["cloud"]
    r = route(_req(hours=1), infos)
    assert r.target == "local" and "no other fitting target can start it now" in r.reasons[0]
    assert "cloud" not in r.passed_over
