"""Modal environments and many GPUs (issue 38): `image` and `packages` define the Modal image,
`gpu: H100:4` (Modal's spelling) or `gpus: 4` asks for several GPUs of one type.

The request reads and checks the keys; the router gives the count only to a target that has it
(Modal: 1 to 8 of one type, priced N times; a local, ssh or Slurm target: as many as it has) and
sends a job with an image or packages only to a modal target; the plan shows and binds them; the
provider asks the official `modal` client for that GPU spec and image, against the loopback fake
(tests/fake_modal.py), which refuses what Modal refuses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config.request import JobRequest, build_request
from core.errors import UserError
from core.planning.plan import digest
from core.planning.router import route
from core.providers.base import TargetInfo
from core.providers.modal.catalog import GPU_COUNT_MAX, PRICES, gpu_spec
from core.providers.modal.target import ModalProvider
from tests.fake_modal import FakeModal

TOKEN_ID, TOKEN_SECRET = "ak-fake0token0id", "as-fake0token0secret0123"


def _project(tmp_path: Path, yaml_text: str) -> Path:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "gpu.yaml").write_text(yaml_text)
    return project


# -- the request ---------------------------------------------------------------------------------


def test_gpu_type_colon_count_is_gpu_and_gpus_and_an_argument_wins(tmp_path: Path) -> None:
    project = _project(tmp_path, "script: train.py\ngpu: H100:4\n")
    req = build_request(project, {})
    assert (req.gpu, req.gpus) == ("H100", 4) and req.resources() == {"gpus": 4}
    assert (lambda r: (r.gpu, r.gpus))(build_request(project, {"gpu": "A100-80GB:2"})) == ("A100-80GB", 2)
    assert build_request(project, {"gpus": 8}).gpus == 8  # an argument's count over the file's
    assert build_request(project, {"gpu": "T4"}).gpus is None  # the argument replaces the whole value
    (project / "gpu.yaml").write_text("script: train.py\ngpus: 2\n")
    assert (lambda r: (r.gpu, r.gpus))(build_request(project, {"gpu": "L4:4"})) == ("L4", 4)


def test_a_count_given_twice_in_one_place_must_agree(tmp_path: Path) -> None:
    project = _project(tmp_path, "script: train.py\ngpu: H100:4\ngpus: 2\n")
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert "gpu H100:4 asks for 4 GPUs and gpus for 2" in err.value.what
    assert err.value.where.endswith("gpu.yaml:3") and "gpu: H100:4" in err.value.fix
    (project / "gpu.yaml").write_text("script: train.py\ngpu: H100:4\ngpus: 4\n")
    assert build_request(project, {}).gpus == 4


@pytest.mark.parametrize("text, words", [
    ("gpu: H100:0", "gpu must be a GPU type with a count from 1 to 1000 after the colon"),
    ("gpu: 'H100:x'", "or a type and a count, e.g. H100:4"),
    ("image: 'Not A/Ref'", "image must be an image reference as `docker pull` takes it"),
    ("image: python:3.11-slim; rm -rf /", "image must be an image reference"),
    ("packages: ['-e .']", "packages must be a list of pip requirements"),
    ("packages: [torch==2.3.1, 'x @ file:///home/me/x.whl']", "names a file on this machine"),
])
def test_bad_values_name_the_key_the_line_and_the_fix(tmp_path: Path, text: str, words: str) -> None:
    project = _project(tmp_path, f"script: train.py\n{text}\n")
    with pytest.raises(UserError) as err:
        build_request(project, {})
    assert words in err.value.what, err.value.what
    assert err.value.where.endswith("gpu.yaml:2") and err.value.fix.startswith(text.split(":")[0] + ":")


def test_image_and_packages_are_read_and_packages_from_an_argument_add(tmp_path: Path) -> None:
    project = _project(tmp_path, "script: train.py\nimage: nvcr.io/nvidia/pytorch:24.01-py3\n"
                                 "packages: [einops, 'transformers>=4.40']\n")
    req = build_request(project, {"packages": ["einops", "peft==0.11.1"]})
    assert req.image == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert req.packages == ["einops", "transformers>=4.40", "peft==0.11.1"]


# -- the route and the price ---------------------------------------------------------------------


def _req(**kw) -> JobRequest:
    return JobRequest(project_dir="/p", script="a.py", **kw)


def _infos() -> dict[str, TargetInfo]:
    return {"box": TargetInfo("box", "local", True, gpus=[{"name": "RTX 4090", "memory_gb": 24.0}]),
            "md": ModalProvider("md", {"gpu": "T4"})._info(True)}


def test_four_gpus_go_to_modal_at_four_times_the_price_and_not_to_a_one_gpu_box() -> None:
    r = route(_req(gpu="H100", gpus=4, hours=2), _infos())
    assert r.target == "md" and r.offer == "H100:4" and r.gpu == "4x H100"
    assert r.info.price_per_hour == pytest.approx(4 * PRICES["H100"])
    assert "has no H100" in r.passed_over["box"] or "not H100" in r.passed_over["box"]
    anyone = route(_req(gpus=4, hours=1), _infos())  # no type: the cheapest that gives four
    assert anyone.target == "md" and anyone.offer == "T4:4" and anyone.gpu == "4x T4"
    assert anyone.info.price_per_hour == pytest.approx(4 * PRICES["T4"])
    assert "box has 1 GPU, and the job asks for 4 (gpus: 4)" in anyone.passed_over["box"]
    with pytest.raises(UserError, match=r"box has 1 GPU, and the job asks for 2"):
        route(_req(gpus=2, provider="box"), _infos())
    with pytest.raises(UserError) as err:  # no modal target: the fix names the way to one
        route(_req(gpus=2), {"box": _infos()["box"]})
    assert "box has 1 GPU" in err.value.what and "gpu targets add modal NAME" in err.value.fix
    two = {"box": TargetInfo("box", "local", True, gpus=[{"name": "RTX 4090", "memory_gb": 24.0}] * 2)}
    assert route(_req(gpus=2), two).target == "box"  # a machine that has them
    slurm = {"hpc": TargetInfo("hpc", "slurm", True, gpus=[{"name": "a100", "memory_gb": 0.0}] * 4)}
    assert route(_req(gpu="a100", gpus=4), slurm).target == "hpc"
    with pytest.raises(UserError, match=r"hpc has 4 a100 GPUs \(per node\), and the job asks for 8"):
        route(_req(gpu="a100", gpus=8), slurm)
    pbs = route(_req(gpus=4), {"q": TargetInfo("q", "pbs", True)})  # PBS lists no GPUs: it judges
    assert pbs.target == "q" and "PBS itself judges gpus: 4" in pbs.reasons[-1]


def test_a_target_with_set_ups_of_one_and_two_gpus_gives_the_two_to_a_two_gpu_job() -> None:
    """Kaggle's accelerators: P100 alone, or two T4s. A job asking for two gets the pair, not
    the default single GPU; three are passed over with why."""
    p100, t4 = {"name": "P100", "memory_gb": 16.0}, {"name": "T4", "memory_gb": 15.0}
    kg = TargetInfo("kg", "kaggle", True, gpus=[p100], offers={"p100": [p100], "t4x2": [t4, t4]},
                    quota_hours_left=30.0)
    assert route(_req(), {"kg": kg}).offer is None  # its default
    two = route(_req(gpus=2), {"kg": kg})
    assert two.offer == "t4x2" and two.gpu == "2x T4"
    with pytest.raises(UserError, match=r"kg has 1 GPU, and the job asks for 3"):
        route(_req(gpus=3), {"kg": kg})


def test_a_slurm_job_asks_the_scheduler_for_the_type_and_count_of_gpu_type_colon_count(
        tmp_path: Path, home: Path) -> None:
    """`gpu: a100:4` reaches sbatch as --gres=gpu:a100:4 (the scheduler's own count), as gpu:
    a100 with gpus: 4 did; the plan binds the count through its resources."""
    from types import SimpleNamespace

    from core.providers.batch import resources
    from core.providers.slurm import SlurmProvider

    req = build_request(_project(tmp_path, "script: train.py\ngpu: a100:4\n"), {})
    job = SimpleNamespace(id="a" * 32, short_id="aaaaaaaa", attempt=1, name="train", request=req.to_json(),
                          plan={"resources": req.resources(), "hours": 1.0})
    hpc = SlurmProvider("hpc", transport=SimpleNamespace(describe=lambda: "login"), options={})
    directives = hpc.directives(job, resources(job, hpc.options))
    assert "#SBATCH --gres=gpu:a100:4" in directives, directives


def test_past_modals_count_the_job_is_refused_with_the_limit_and_the_fix() -> None:
    with pytest.raises(UserError) as err:
        route(_req(gpu="H100", gpus=9, provider="md"), _infos())
    assert "Modal allows 1 to 8 GPUs of one type per job, and the job asks for 9" in err.value.what
    assert "gpu: H100:8" in err.value.what
    a10 = route(_req(gpu="A10G", gpus=4), _infos())
    assert a10.offer == "A10G:4" and GPU_COUNT_MAX["A10G"] == 4
    with pytest.raises(UserError, match="Modal allows 1 to 4 GPUs of one type per job, and the job asks for 6"):
        route(_req(gpu="A10G", gpus=6, provider="md"), _infos())
    with pytest.raises(UserError, match="gpus: 0 asks for none"):
        route(_req(gpus=0, provider="md"), _infos())


def test_an_image_or_packages_run_only_on_modal_and_elsewhere_the_plan_says_why() -> None:
    r = route(_req(image="python:3.11-slim"), _infos())
    assert r.target == "md"
    assert "image define a Modal image" in r.passed_over["box"] and "requirements.txt" in r.passed_over["box"]
    with pytest.raises(UserError, match="packages define a Modal image"):
        route(_req(packages=["einops"], provider="box"), _infos())


def test_the_count_image_and_packages_are_in_the_plans_digest() -> None:
    base = {"bundle_hash": "b", "command": ["a.py"], "target": "md", "gpu": "1x T4", "hours": 1}
    plain = digest(base)
    assert digest({**base, "image": None, "packages": []}) == plain  # absent: unchanged
    seen = {plain, digest({**base, "image": "python:3.11-slim"}), digest({**base, "packages": ["einops"]}),
            digest({**base, "packages": ["einops==0.8.0"]}), digest({**base, "resources": {"gpus": 4}})}
    assert len(seen) == 5


def test_the_provider_asks_modal_in_its_own_spelling_and_never_past_its_limit() -> None:
    assert gpu_spec("H100:4", "T4") == "H100:4" and gpu_spec("H100", "T4") == "H100"
    assert gpu_spec(None, "L4") == "L4" and gpu_spec("t4x2", "T4") == "T4"  # not a Modal offer
    assert gpu_spec("H100:1", "T4") == "H100"
    for bad in ("H100:9", "H100:0", "A10G:5"):
        with pytest.raises(UserError, match="Modal allows 1 to"):
            gpu_spec(bad, "T4")


# -- the fake is as strict as Modal --------------------------------------------------------------


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fm = FakeModal(tmp_path / "modal", token_id=TOKEN_ID, token_secret=TOKEN_SECRET)
    monkeypatch.setenv("MODAL_SERVER_URL", fm.url)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    yield fm
    fm.close()


def _deploy(gpu: str, image) -> None:
    """A function created on the fake as the provider creates one (running it is not the point)."""
    import modal

    app = modal.App("strict")
    app.function(gpu=gpu, image=image, timeout=60, serialized=True, name="f")(lambda: 1)
    with app.run(client=modal.Client.from_credentials(TOKEN_ID, TOKEN_SECRET), detach=True):
        pass


@pytest.mark.parametrize("gpu, words", [("H100:9", "invalid GPU count 9 for H100"),
                                        ("H100:0", "invalid GPU count 0 for H100"),
                                        ("A10G:5", "invalid GPU count 5 for A10G"),
                                        ("V100", "GPU type 'V100' is not one of Modal's")])
def test_the_fake_refuses_a_gpu_spec_modal_refuses(fake: FakeModal, gpu: str, words: str) -> None:
    import modal

    with pytest.raises(Exception) as err:
        _deploy(gpu, modal.Image.debian_slim())
    assert words in str(err.value)
    assert [m for m, _ in fake.refused] == ["FunctionCreate"] and words in fake.refused[0][1]
    assert not fake.function_calls


def test_the_fake_fails_the_build_of_an_image_from_no_registry_reference(fake: FakeModal) -> None:
    import modal

    with pytest.raises(Exception) as err:
        _deploy("T4", modal.Image.from_registry("Not/A Valid:ref"))
    assert "invalid reference format" in str(err.value)
    assert fake.refused == [("ImageGetOrCreate", "failed to pull 'Not/A Valid:ref': invalid reference format")]
    _deploy("H100:8", modal.Image.from_registry("nvcr.io/nvidia/pytorch:24.01-py3").pip_install("einops"))
    (fn,) = [f for f in fake.functions.values()]
    assert (fn.resources.gpu_config.gpu_type, fn.resources.gpu_config.count) == ("H100", 8)
    assert fake.base_image(fn.image_id) == "nvcr.io/nvidia/pytorch:24.01-py3"


# -- end to end: the plan, the function Modal is asked for, the job run --------------------------


@pytest.mark.slow
def test_a_job_on_four_h100s_in_a_registry_image_with_packages_plans_prices_and_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keychain, home: Path) -> None:
    from tests.conftest import _stop_world, gpu_json, make_git_project, run_gpu, wait_state

    fm = FakeModal(tmp_path / "modal", token_id=TOKEN_ID, token_secret=TOKEN_SECRET)
    monkeypatch.setenv("MODAL_SERVER_URL", fm.url)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    try:
        added = run_gpu("targets", "add", "modal", "md", "--token-stdin", "--json", input=f"{TOKEN_ID} {TOKEN_SECRET}\n")
        assert added.returncode == 0, added.stderr + added.stdout
        project = make_git_project(tmp_path / "p", {
            "train.py": "import gpu, os, time\nprint('ran on', os.environ.get('GPU_ROUTER_JOB_ID', '?'), flush=True)\n"
                        "open(os.path.join(gpu.output_dir(), 'ok.txt'), 'w').write('ok')\n"
                        "time.sleep(4)  # hours the cost's four decimals can weigh\n",
            "requirements.txt": "--extra-index-url https://download.pytorch.org/whl/cu121\nnumpy\n",
            "gpu.yaml": "script: train.py\ngpu: H100:4\nimage: python:3.11-slim\n"
                        "packages: [einops==0.8.0]\n"})
        plan = gpu_json("plan", "--hours", "0.5", cwd=project)["plan"]
        assert plan["target"] == "md" and plan["gpu"] == "4x H100" and plan["offer"] == "H100:4"
        assert plan["resources"] == {"gpus": 4}
        assert plan["image"] == "python:3.11-slim" and plan["packages"] == ["einops==0.8.0"]
        assert plan["price_per_hour"] == pytest.approx(4 * PRICES["H100"])
        assert plan["estimated_price"] == pytest.approx(0.5 * 4 * PRICES["H100"], abs=1e-3)
        text = run_gpu("plan", "--hours", "0.5", cwd=project, env={"COLUMNS": "200"}).stdout
        assert "md  (4x H100)" in text and "$7.90 ($15.80/hour)" in text, text
        assert "python:3.11-slim" in text and "einops==0.8.0" in text, text
        two = gpu_json("plan", "--hours", "0.5", "--gpu", "H100:2", cwd=project)["plan"]
        assert two["gpu"] == "2x H100" and two["digest"] != plan["digest"]
        over = run_gpu("plan", "--hours", "0.5", "--gpu", "H100:9", "--json", cwd=project)
        assert over.returncode == 2 and "Modal allows 1 to 8 GPUs of one type" in json.loads(over.stdout)["error"]

        sub = gpu_json("submit", "--hours", "0.1", "--wait-s", "0", cwd=project)
        short = sub["job"]["short_id"]
        done = wait_state(short, {"done", "failed", "cancelled"}, timeout=180)
        assert done["state"] == "done", run_gpu("logs", short).stdout + json.dumps(done)
        assert (Path(sub["job"]["outputs_dir"]) / "ok.txt").read_text() == "ok"
        (row,) = gpu_json("cost", "--since", "1h")["rows"]  # spent at 4x the rate, on 4 GPUs
        assert row["key"] == "md" and row["estimate"] == pytest.approx(0.1 * 4 * PRICES["H100"], abs=1e-3)
        assert row["hours"] >= 0.001  # figures rounded to 4 decimals: within 10%, 1x would be 75% off
        assert row["gpu_hours"] == pytest.approx(4 * row["hours"], rel=0.1)
        assert row["cost"] == pytest.approx(row["hours"] * 4 * PRICES["H100"], rel=0.1)

        (create,) = fm.requests("FunctionCreate")
        gpu = create.function.resources.gpu_config
        assert (gpu.gpu_type, gpu.count) == ("H100", 4)
        assert fm.base_image(create.function.image_id) == "python:3.11-slim"
        commands = [" ".join(i.dockerfile_commands) for i in fm.image_chain(create.function.image_id)]
        assert any("numpy" in c for c in commands)
        (layer,) = [c for c in commands if "einops==0.8.0" in c]  # the packages: the project's index too
        assert "--extra-index-url https://download.pytorch.org/whl/cu121" in layer and "numpy" not in layer
        assert not fm.refused
    finally:
        _stop_world(home)
        fm.close()


@pytest.mark.slow
async def test_compute_job_takes_image_packages_and_a_gpu_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               keychain, home: Path) -> None:
    """compute_job's plan takes `image`, `packages` and `gpu: TYPE:COUNT` as gpu.yaml's keys of
    those names, checked the same way (tui/mcp/schema.py's COMPUTE_RESOURCE_PROPERTIES)."""
    import os

    from tests.conftest import _stop_world, make_git_project, run_gpu
    from tests.tui.mcp.test_mcp import call, fails, session

    fm = FakeModal(tmp_path / "modal", token_id=TOKEN_ID, token_secret=TOKEN_SECRET)
    monkeypatch.setenv("MODAL_SERVER_URL", fm.url)
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "no-modal.toml"))
    try:
        added = run_gpu("targets", "add", "modal", "md", "--token-stdin", "--json", input=f"{TOKEN_ID} {TOKEN_SECRET}\n")
        assert added.returncode == 0, added.stderr + added.stdout
        p = make_git_project(tmp_path / "big", {"big.py": "print('big', flush=True)\n"})
        async with session(extra_env=dict(os.environ)) as s:
            plan = (await call(s, "compute_job", action="plan", command="python big.py", cwd=str(p), hours=0.1,
                               gpu="H100:2", image="python:3.11-slim", packages=["einops==0.8.0"]))["plan"]
            assert plan["target"] == "md" and plan["gpu"] == "2x H100" and plan["offer"] == "H100:2", plan
            assert plan["image"] == "python:3.11-slim" and plan["packages"] == ["einops==0.8.0"]
            assert plan["price_per_hour"] == pytest.approx(2 * PRICES["H100"])
            text = await fails(s, "compute_job", action="plan", command="python big.py", cwd=str(p), hours=0.1,
                               image="Not A Ref")
            assert "compute_job argument image" in text and "docker pull" in text, text
    finally:
        _stop_world(home)
        fm.close()
