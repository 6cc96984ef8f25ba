"""The skypilot target's second step (issue 43): `gpu targets add skypilot`, the probe (which
clouds SkyPilot has enabled, their GPU prices) and those prices beside the other targets, all
without a server: against a stand-in for SkyPilot's venv whose python replays answers recorded
from the real server (tests/providers/test_skypilot_adapter.py runs that server), plus a
multi-cloud catalog shaped like SkyPilot's `list_accelerators` rows.

A plan on such a target binds the price ceiling and candidates it was priced at; launching
is tested in tests/providers/test_skypilot_launch.py (without a server) and against the real
server in tests/providers/test_skypilot_adapter.py.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from core.errors import UserError
from core.providers.skypilot import catalog
from tests.conftest import run_gpu, write_user_config as write_config

pytestmark = pytest.mark.quick

# the real server's answers (tests/skypilot_service.py, 2026-12-06): one Slurm infra, `fake` GPUs
# at slurm.pricing's 2.0 an hour, every other cloud left out by allowed_clouds
CHECK = {"enabled": {"slurm": ["compute"]},
         "disabled": {"aws": "they were not included in allowed_clouds in ~/.sky/config.yaml",
                      "runpod": "they were not included in allowed_clouds in ~/.sky/config.yaml"},
         "workspaces": {"default": {"slurm": ["compute"]}}, "output": "..."}
SLURM_PRICES = {"clouds": ["slurm"], "errors": {}, "gpus": {"FAKE": [
    {"cloud": "slurm", "instance_type": None, "accelerator_name": "FAKE", "accelerator_count": 1, "cpu_count": 4,
     "device_memory": 0.0, "memory": 7.81, "price": 2.0, "spot_price": 2.0, "region": "debug*"},
    {"cloud": "slurm", "instance_type": None, "accelerator_name": "FAKE", "accelerator_count": 2, "cpu_count": 4,
     "device_memory": 0.0, "memory": 7.81, "price": 4.0, "spot_price": 4.0, "region": "debug*"}]},
    "slurm_pricing": {"cpu": 0.5, "memory": 0.1, "accelerators": {"fake": 2.0}}}


def _row(cloud: str, gpu: str, count: int, price: float | None, spot: float | None, memory: float = 80.0,
         region: str = "us-east-1", instance: str = "x") -> dict:
    return {"cloud": cloud, "instance_type": instance, "accelerator_name": gpu, "accelerator_count": count,
            "cpu_count": 8, "device_memory": memory, "memory": 64.0, "price": price, "spot_price": spot,
            "region": region}


CLOUDS = {"clouds": ["aws", "runpod", "lambda"], "errors": {"lambda": "no credentials"}, "gpus": {
    "A100-80GB": [_row("aws", "A100-80GB", 8, 40.96, 12.0, instance="p4de.24xlarge"),
                  _row("runpod", "A100-80GB", 1, 1.64, None, region="CA", instance="1x_A100-80GB"),
                  _row("runpod", "A100-80GB", 2, 3.28, None, region="CA", instance="2x_A100-80GB")],
    "T4": [_row("aws", "T4", 1, 0.526, 0.21, memory=16.0, instance="g4dn.xlarge")],
    "H100": [_row("aws", "H100", 8, None, None, instance="p5.48xlarge")],  # no price: not an offer
    "bad": ["not a row", {"accelerator_count": "two"}, _row("aws", "bad", 0, 1.0, 1.0)],
}}


# -- the catalog: SkyPilot's rows as offers ----------------------------------------------------


def test_each_gpu_type_is_one_offer_at_its_cheapest_machine() -> None:
    offers = catalog.offers(CLOUDS)
    assert list(offers) == ["T4", "A100-80GB"]  # cheapest first; unpriced and malformed rows left out
    a100 = offers["A100-80GB"]
    assert a100["price"] == 1.64  # runpod's one-GPU machine
    assert a100["count_max"] == 8 and a100["memory_gb"] == 80.0
    assert [(r["cloud"], r["count"]) for r in a100["candidates"]] == [("runpod", 1), ("runpod", 2), ("aws", 8)]
    # N GPUs cost the cheapest machine that holds N: 3 of them, aws's 8-GPU machine
    assert a100["count_prices"] == {1: 1.64, 2: 3.28, **{n: 40.96 for n in range(3, 9)}}
    assert catalog.offers(SLURM_PRICES) == {"FAKE": {
        "price": 2.0, "memory_gb": 0.0, "count_max": 2, "count_prices": {1: 2.0, 2: 4.0},
        "candidates": catalog.rows(SLURM_PRICES)}}


def test_spot_prices_are_used_where_asked_and_listed() -> None:
    spot = catalog.offers(CLOUDS, spot=True)
    assert spot["T4"]["price"] == 0.21
    assert spot["A100-80GB"]["price"] == 1.64  # runpod lists no spot price: its list price
    assert spot["A100-80GB"]["count_prices"][8] == 12.0  # aws's 8 at spot
    assert spot["A100-80GB"]["candidates"][-1]["cloud"] == "aws"


def test_a_plan_binds_a_ceiling_and_the_machines_under_it() -> None:
    a100 = catalog.offers(CLOUDS)["A100-80GB"]
    one = catalog.binding(a100)
    assert one["max_hourly_cost"] == pytest.approx(1.64 * 1.1) and one["use_spot"] is False
    # runpod's 2-GPU machine costs 3.28 an hour, over the ceiling for one GPU
    assert [(c["cloud"], c["count"]) for c in one["candidates"]] == [("runpod", 1)]
    two = catalog.binding(a100, count=2)
    assert two["max_hourly_cost"] == pytest.approx(3.28 * 1.1)
    assert [(c["cloud"], c["count"]) for c in two["candidates"]] == [("runpod", 2)]  # a 1-GPU row cannot serve 2
    eight = catalog.binding(catalog.offers(CLOUDS, spot=True)["A100-80GB"], count=8, spot=True)
    assert eight["use_spot"] is True and eight["max_hourly_cost"] == pytest.approx(12.0 * 1.1)
    assert [(c["cloud"], c["spot_price"]) for c in eight["candidates"]] == [("aws", 12.0)]


@pytest.mark.parametrize("checkpoint, restart, spot", [("ckpt", "allow", True), ("ckpt", "never", False),
                                                       (None, "allow", False), (None, "never", False)])
def test_spot_only_for_a_job_that_checkpoints_and_allows_restarts(checkpoint, restart, spot) -> None:
    assert catalog.use_spot(checkpoint, restart) is spot


# -- a stand-in for SkyPilot's venv ------------------------------------------------------------

REPLAY = textwrap.dedent("""\
    #!{python}
    # a stand-in for SkyPilot's venv python: it is run as `python -u adapter.py` and answers each
    # request from ANSWERS (by op), counting the runs in RUNS; `hang` never answers
    import json, sys, time
    answers = json.loads({answers!r})
    with open({runs!r}, "a") as f:
        f.write("run\\n")
    for raw in sys.stdin:
        req = json.loads(raw)
        doc = answers.get(req["op"])
        if doc == "hang":
            time.sleep(600)
        sys.stdout.write(json.dumps({{"id": req["id"], **doc}}) + "\\n")
        sys.stdout.flush()
""")


def stand_in(tmp_path: Path, answers: dict) -> Path:
    venv = tmp_path / "sky-venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    py = venv / "bin" / "python"
    py.write_text(REPLAY.format(python=sys.executable, answers=json.dumps(answers), runs=str(tmp_path / "runs")))
    py.chmod(0o755)
    return venv


def answered(check=CHECK, prices=SLURM_PRICES) -> dict:
    return {"check": {"ok": True, "result": check}, "prices": {"ok": True, "result": prices}}


def runs(tmp_path: Path) -> int:
    path = tmp_path / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_the_probe_lists_the_clouds_and_prices_and_offers_them(home: Path, tmp_path: Path) -> None:
    from core.engine.target_setup import probe
    from core.providers.probing import probe_all
    from core.providers.registry import build

    venv = stand_in(tmp_path, answered())
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    info = probe("sky")
    assert info.kind == "skypilot" and info.available is True and info.why_unavailable is None
    assert info.offers == {"FAKE": [{"name": "FAKE", "memory_gb": 0.0}]} and info.offer_prices == {"FAKE": 2.0}
    assert info.price_per_hour == 2.0 and info.gpu_label == "1x FAKE" and info.takes_secrets is False
    d = info.details
    assert d["clouds"]["enabled"] == {"slurm": ["compute"]} and "aws" in d["clouds"]["disabled"]
    fake = catalog.offers(SLURM_PRICES)["FAKE"]
    assert d["prices"]["FAKE"] == {"usd_per_hour": 2.0, "memory_gb": 0.0, "count_max": 2, "clouds": ["slurm"],
                                   "bind": catalog.binding(fake),
                                   "rows": [{k: r[k] for k in catalog.SLIM} for r in fake["candidates"]]}
    assert runs(tmp_path) == 1
    # the next command (its own process in life) reads the answer
    again = probe_all(build())["sky"]
    assert runs(tmp_path) == 1
    assert again.available is True and again.offer_prices == {"FAKE": 2.0}
    assert "probe_failed" not in again.details


def test_a_server_with_no_cloud_enabled_says_what_to_run(home: Path, tmp_path: Path) -> None:
    from core.engine.target_setup import probe

    none = {"enabled": {}, "disabled": {"aws": "AWS credentials are not set.", "runpod": "no api key"}}
    venv = stand_in(tmp_path, answered(check=none, prices={"clouds": [], "gpus": {}, "errors": {}}))
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    info = probe("sky")
    assert info.why_unavailable == ("SkyPilot has no cloud enabled (run `sky check` in its venv to see what "
                                    "each needs)")
    assert info.details["clouds"]["disabled"]["aws"] == "AWS credentials are not set."


def test_skypilot_saying_no_is_the_targets_reason(home: Path, tmp_path: Path) -> None:
    from core.engine.target_setup import probe

    venv = stand_in(tmp_path, {"check": {"ok": False, "error": {
        "type": "ApiServerConnectionError", "message": "Could not connect to SkyPilot API server at "
                                                       "http://127.0.0.1:46580. Please ensure that the server is running."}},
        "prices": {"ok": True, "result": SLURM_PRICES}})
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    assert probe("sky").why_unavailable == (
        "SkyPilot could not be asked (ApiServerConnectionError: Could not connect to SkyPilot API server at "
        "http://127.0.0.1:46580. Please ensure that the server is running.)")


def test_a_server_that_never_answers_is_given_up_and_its_adapter_stopped(home: Path, tmp_path: Path) -> None:
    from core.engine.target_setup import probe

    venv = stand_in(tmp_path, {"check": "hang", "prices": "hang"})
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}, connect_timeout_s: 1}}\n")
    info = probe("sky")
    assert info.why_unavailable == "the local SkyPilot API server did not answer in 1 s"
    assert runs(tmp_path) == 1  # and the conftest guard holds that no adapter outlives the test


def test_a_missing_venv_says_how_to_make_it(home: Path, tmp_path: Path) -> None:
    from core.engine.target_setup import probe

    write_config(f"targets:\n  mine: {{kind: skypilot, venv: {tmp_path / 'nowhere'}}}\n"
                 f"  ours: {{kind: skypilot}}\n")
    assert probe("mine").why_unavailable == f"no SkyPilot venv at {tmp_path / 'nowhere'}: check targets.mine.venv"
    assert probe("ours").why_unavailable.endswith(
        "/skypilot/venv: run `gpu targets add skypilot ours` again (it makes SkyPilot's venv)")


def test_the_adapter_runs_with_the_targets_env_and_endpoint(home: Path) -> None:
    from core.providers.skypilot.target import SkyPilotProvider

    env = SkyPilotProvider("t", {"endpoint": "https://sky.example.org:46580", "env": {"HOME": "/srv/sky",
                                                                                       "N": 3}}).adapter_env()
    assert env["SKYPILOT_API_SERVER_ENDPOINT"] == "https://sky.example.org:46580"
    assert env["HOME"] == "/srv/sky" and env["N"] == "3" and env["PATH"] == os.environ["PATH"]
    assert "SKYPILOT_API_SERVER_ENDPOINT" not in SkyPilotProvider("t").adapter_env() or \
        os.environ.get("SKYPILOT_API_SERVER_ENDPOINT")


@pytest.mark.parametrize("body, said", [
    ("{kind: skypilot, endpoint: 'https://me:pw@sky.example.org'}", "endpoint must be the API server's http(s) URL"),
    ("{kind: skypilot, endpoint: 'ftp://sky'}", "endpoint must be the API server's http(s) URL"),
    ("{kind: skypilot, host: box}", "unknown option 'host' for a skypilot target"),
    ("{kind: skypilot, clouds: [AWS!]}", "clouds must be a list of SkyPilot's cloud names"),
    ("{kind: skypilot, clouds: []}", "clouds must be a list of SkyPilot's cloud names"),
    ("{kind: skypilot, connect_timeout_s: 0}", "connect_timeout_s must be a number of seconds above 0"),
    ("{kind: skypilot, env: {'A B': 1}}", "env must map NAME: value"),
    ("{kind: skypilot, autodown_minutes: 0}", "autodown_minutes must be a number from 1 to 10080"),
    ("{kind: skypilot, max_resumes: true}", "max_resumes must be a number from 0 to 100"),
    ("{kind: skypilot, keep_cluster: true}", "unknown option 'keep_cluster' for a skypilot target"),
])
def test_a_wrong_option_is_refused_with_its_key(home: Path, body: str, said: str) -> None:
    from core.config.user import load

    write_config(f"targets:\n  sky: {body}\n")
    with pytest.raises(UserError) as err:
        load()
    assert said in err.value.what and err.value.what.startswith("targets.sky")


# -- the fronts -----------------------------------------------------------------------------------


def test_targets_add_saves_probes_and_shows_clouds_and_prices(home: Path, tmp_path: Path) -> None:
    venv = stand_in(tmp_path, answered(prices=CLOUDS))
    done = run_gpu("targets", "add", "skypilot", "sky", "--venv", str(venv), "--clouds", "AWS,runpod",
                   "--env", "HOME=/srv/sky")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "saved target sky (skypilot)" in out
    assert "SkyPilot (the local SkyPilot API server): enabled slurm" in out
    assert "T4: from $0.53/h per GPU on aws, up to 1 per job" in out
    assert "A100-80GB: from $1.64/h per GPU on aws, runpod, up to 8 per job" in out
    assert "lambda: no prices (no credentials)" in out
    assert "not available" not in out
    saved = Path(os.environ["GPU_ROUTER_CONFIG"]).read_text()
    assert "kind: skypilot" in saved and "clouds:\n    - aws\n    - runpod" in saved.replace("  - ", "    - ") \
        or "clouds: [aws, runpod]" in saved, saved
    listed = json.loads(run_gpu("targets", "--json").stdout)["targets"]
    sky = next(t for t in listed if t["name"] == "sky")
    assert sky["kind"] == "skypilot" and sky["available"] is True
    assert sky["offer_prices"] == {"T4": 0.526, "A100-80GB": 1.64}


def test_targets_add_skypilot_refuses_a_hosts_flags_and_others_refuse_its_own(home: Path) -> None:
    done = run_gpu("targets", "add", "skypilot", "sky", "--host", "box", "--no-probe")
    assert done.returncode != 0 and "a skypilot target takes no --host" in done.stderr
    done = run_gpu("targets", "add", "ssh", "box", "--host", "box", "--endpoint", "https://x", "--no-probe")
    assert done.returncode != 0 and "--endpoint, --venv and --clouds are for skypilot targets" in done.stderr


def test_a_named_venv_without_skypilot_is_refused_and_nothing_saved(home: Path, tmp_path: Path) -> None:
    venv = tmp_path / "empty"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    done = run_gpu("targets", "add", "skypilot", "sky", "--venv", str(venv))
    assert done.returncode != 0
    assert f"SkyPilot is not installed in {venv}" in done.stderr and "skypilot[slurm]==0.14.1" in done.stderr
    assert not Path(os.environ["GPU_ROUTER_CONFIG"]).exists() or "sky" not in Path(
        os.environ["GPU_ROUTER_CONFIG"]).read_text()


def test_a_plan_binds_the_ceiling_and_candidates_it_was_priced_at(home: Path, tmp_path: Path) -> None:
    """A job asking for a GPU only SkyPilot prices is planned there at SkyPilot's price, and
    the plan binds what a person approves (the ceiling, spot or not, the candidate rows): in
    its digest, so a plan at another ceiling needs its own approval. MCP's targets list shows
    the same target."""
    from core.engine.reports import targets_doc
    from core.jobs.store import Store
    from core.planning.plan import digest

    venv = stand_in(tmp_path, answered(prices=CLOUDS))
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    done = run_gpu("plan", "train.py", "--gpu", "A100-80GB:2", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["plan"]
    assert plan["target"] == "sky" and plan["offer"] == "A100-80GB:2" and plan["price_per_hour"] == 3.28
    bound = plan["skypilot"]
    assert bound == {"max_hourly_cost": pytest.approx(2 * 1.64 * 1.1), "use_spot": False,
                     "candidates": [{"cloud": "runpod", "region": "CA", "instance_type": "2x_A100-80GB", "count": 2,
                                     "price": 3.28, "spot_price": None}]}
    assert plan["digest"] == digest(plan)
    assert digest({**plan, "skypilot": {**bound, "max_hourly_cost": 9.0}}) != plan["digest"]
    one = json.loads(run_gpu("plan", "train.py", "--gpu", "T4", "--json", cwd=project).stdout)["plan"]
    assert one["offer"] == "T4" and one["skypilot"]["max_hourly_cost"] == pytest.approx(0.526 * 1.1)
    doc = targets_doc(Store())
    sky = next(t for t in doc["targets"] if t["name"] == "sky")
    assert sky["available"] is True and sky["details"]["prices"]["A100-80GB"]["usd_per_hour"] == 1.64


def test_our_venv_installs_the_extras_of_the_clouds_named_and_keeps_those_it_has() -> None:
    from core.providers.skypilot.venv import spec_for

    assert spec_for(None) == "skypilot[slurm]==0.14.1"
    assert spec_for(["aws", "RunPod"]) == "skypilot[aws,runpod,slurm]==0.14.1"
    # a second target's clouds add to what the one venv has: no target loses its cloud's libraries
    assert spec_for(["gcp"], "skypilot[aws,slurm]==0.14.1") == "skypilot[aws,gcp,slurm]==0.14.1"
    with pytest.raises(UserError) as err:
        spec_for(["aws; rm -rf ~"])
    assert err.value.what == "'aws; rm -rf ~' is not a SkyPilot cloud name"


async def test_an_agent_sees_the_skypilot_target_through_mcp(home: Path, tmp_path: Path) -> None:
    """`compute_job targets` and `gpu_targets`, over stdio with the official MCP client: the
    target with its clouds and prices, available to run."""
    from tests.tui.mcp.test_mcp import call, session

    venv = stand_in(tmp_path, answered(prices=CLOUDS))
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}}}\n")
    async with session(cwd=tmp_path) as s:
        for doc in (await call(s, "compute_job", action="targets"), await call(s, "gpu_targets")):
            sky = next(t for t in doc["targets"] if t["name"] == "sky")
            assert sky["kind"] == "skypilot" and sky["available"] is True and sky["why_unavailable"] is None
            assert sky["offer_prices"] == {"T4": 0.526, "A100-80GB": 1.64}
            assert sky["details"]["clouds"]["enabled"] == {"slurm": ["compute"]}


def test_an_old_answer_is_used_with_its_time_and_asked_again_only_on_request(home: Path, tmp_path: Path) -> None:
    """Past its 10 minutes the last answer is still what plans and `gpu targets` use, with
    its time: no submit waits for `sky check` over every cloud (a launch asks today's prices
    before it starts anything); `gpu targets probe` asks again."""
    from core.engine.target_setup import probe
    from core.providers.probing import probe_all
    from core.providers.registry import build
    from core.providers.skypilot.target import SkyPilotProvider

    venv = stand_in(tmp_path, answered())
    write_config(f"targets:\n  sky: {{kind: skypilot, venv: {venv}, probe_ttl_s: 1}}\n")
    first = probe("sky")
    assert runs(tmp_path) == 1 and "as_of" not in first.details
    path = SkyPilotProvider("sky")._probe_file()
    doc = json.loads(path.read_text())
    doc["at"] -= 3600  # an hour old
    path.write_text(json.dumps(doc))
    old = probe_all(build())["sky"]
    assert runs(tmp_path) == 1  # not asked
    assert old.available is True and old.offer_prices == {"FAKE": 2.0} and old.details["as_of"] == doc["at"]
    fresh = probe("sky")
    assert runs(tmp_path) == 2 and "as_of" not in fresh.details
