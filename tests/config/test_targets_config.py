"""Remote targets in the user config, `gpu targets add/rm` editing it, and scheduler resources
in gpu.yaml: every value checked once, with the file and key named; no network needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.errors import UserError
from tests.conftest import gpu_json, make_git_project, run_gpu, write_user_config

CONFIG = """# my own settings: comments stay
targets:
  # the box under the desk
  old: {kind: local, max_jobs: 2}

rules:
  agent_max_hours: 0.5   # stricter than the default
budget:
  weekly: 20.0
"""


def test_add_and_rm_keep_the_rest_of_the_file(home: Path) -> None:
    path = write_user_config(CONFIG)
    added = gpu_json("targets", "add", "ssh", "box", "--host", "gpu-box.lan", "--user", "me",
                     "--port", "2222", "--no-probe")
    assert added["config"] == {"kind": "ssh", "host": "gpu-box.lan", "user": "me", "port": 2222}
    text = path.read_text()
    for line in ("# my own settings: comments stay", "  # the box under the desk",
                 "agent_max_hours: 0.5   # stricter than the default"):
        assert line in text
    doc = yaml.safe_load(text)
    assert doc["targets"]["box"] == added["config"] and doc["targets"]["old"]["max_jobs"] == 2
    assert doc["budget"] == {"weekly": 20.0}
    gpu_json("targets", "add", "slurm", "box", "--host", "login.example.org", "--partition", "gpu",
             "--account", "lab42", "--env", "SLURM_CONF=/etc/slurm/other.conf", "--no-probe")
    doc = yaml.safe_load(path.read_text())
    assert doc["targets"]["box"] == {"kind": "slurm", "host": "login.example.org", "partition": "gpu",
                                     "account": "lab42", "env": {"SLURM_CONF": "/etc/slurm/other.conf"}}
    assert path.read_text().count("box:") == 1
    removed = gpu_json("targets", "rm", "box")
    assert removed["removed"] == "box"
    assert path.read_text() == CONFIG  # byte for byte: comments, blank lines and all
    missing = run_gpu("targets", "rm", "box")
    assert missing.returncode == 2 and "no target named 'box'" in missing.stderr


def test_add_on_a_fresh_config_and_bad_input(home: Path) -> None:
    gpu_json("targets", "add", "slurm", "here", "--local", "--partition", "debug", "--no-probe")
    doc = yaml.safe_load(Path(__import__("os").environ["GPU_ROUTER_CONFIG"]).read_text())
    assert doc == {"targets": {"here": {"kind": "slurm", "local": True, "partition": "debug"}}}
    for argv, words in (
            (["ssh", "x"], "needs --host"),
            (["ssh", "local", "--host", "h"], "cannot name a target"),
            (["ssh", "x'y", "--host", "h"], "cannot name a target"),
            (["ssh", "x", "--local"], "cannot be --local"),
            (["slurm", "x", "--host", "h", "--partition", "gpu; rm -rf ~"], "partition"),
            (["slurm", "x", "--local", "--host", "h"], "leave out --host"),
            (["ssh", "x", "--host=-oProxyCommand=touch"], "host name")):
        proc = run_gpu("targets", "add", *argv, "--no-probe")
        assert proc.returncode == 2 and words in proc.stderr, (argv, proc.stderr)
    doc2 = yaml.safe_load(Path(__import__("os").environ["GPU_ROUTER_CONFIG"]).read_text())
    assert doc2 == doc  # a refused target leaves the file as it was


@pytest.mark.parametrize("body, words", [
    ("{kind: ssh}", "needs a host name"),
    ("{kind: ssh, host: h, colour: blue}", "unknown option 'colour'"),
    ("{kind: ssh, host: h, port: 70000}", "port"),
    ("{kind: slurm, host: h, modules: ['cuda 12']}", "modules"),
    ("{kind: slurm, host: h, account: 'a b'}", "account"),
    ("{kind: slurm, host: h, cpus: 0}", "cpus"),
    ("{kind: slurm, host: h, env: {1BAD: x}}", "env"),
    ("{kind: pbs, host: h, pbs_flavor: sge}", "pbs_flavor"),
    ("{kind: ssh, local: true}", "unknown option 'local'"),
    ("{kind: condor, host: h}", "kind 'condor'"),
])
def test_user_config_checks_remote_targets(body: str, words: str, home: Path) -> None:
    from core.config.user import load

    path = write_user_config(f"targets:\n  t: {body}\n")
    with pytest.raises(UserError) as err:
        load()
    assert words in err.value.message() and str(path) in err.value.message()


def test_remote_targets_load_as_providers(home: Path) -> None:
    from core.config.user import load
    from core.providers.registry import build as providers

    write_user_config("targets:\n"
                      "  box: {kind: ssh, host: gpu-box.lan, user: me, port: 2222, price_per_hour: 0.1}\n"
                      "  hpc: {kind: slurm, host: login, partition: gpu, gpus: 2, max_jobs: 8}\n"
                      "  pro: {kind: pbs, local: true}\n")
    cfg = load()
    assert cfg.targets["hpc"].options["gpus_per_job"] == 2 and cfg.targets["hpc"].gpus is None
    provs = providers(cfg)
    assert [provs[n].kind for n in ("local", "box", "hpc", "pro")] == ["local", "ssh", "slurm", "pbs"]
    assert provs["box"].transport.ep.port == 2222 and provs["hpc"].max_jobs == 8
    assert provs["pro"].transport.kind == "local"


def test_scheduler_resources_in_gpu_yaml(home: Path, tmp_path: Path) -> None:
    from core.config.request import build_request
    from core.planning.plan import digest

    good = make_git_project(tmp_path / "good", {
        "a.py": "print(1)\n",
        "gpu.yaml": "cpus: 4\ngpus: 2\nmemory_gb: 16\ntime_minutes: 90\npartition: gpu\n"
                    "modules: [cuda/12.1]\ncontainer: docker://nvcr.io/nvidia/pytorch:24.01-py3\n"})
    req = build_request(good, {"script": "a.py"})
    assert req.resources() == {"cpus": 4, "gpus": 2, "memory_gb": 16.0, "time_minutes": 90,
                               "partition": "gpu", "modules": ["cuda/12.1"],
                               "container": "docker://nvcr.io/nvidia/pytorch:24.01-py3"}
    # this machine has no GPU: a job asking for 2 has no target here, and says why
    refused = run_gpu("plan", "a.py", "--hours", "0.1", "--json", cwd=good)
    assert refused.returncode != 0 and "asks for 2" in refused.stdout + refused.stderr, refused.stderr
    (good / "gpu.yaml").write_text((good / "gpu.yaml").read_text().replace("gpus: 2\n", ""))
    plan = gpu_json("plan", "a.py", "--hours", "0.1", cwd=good)["plan"]
    assert plan["resources"]["cpus"] == 4
    assert digest(plan) != digest({**plan, "resources": {**plan["resources"], "cpus": 8}})
    assert digest({"hours": 1}) == digest({"hours": 1, "resources": {}})  # none: unchanged digests
    for text, words in (("partition: 'gpu\\n#SBATCH --account=theirs'\n", "partition"),
                        ("modules: ['cuda; touch /tmp/x']\n", "modules"),
                        ("cpus: 0\n", "cpus"), ("gpus: -1\n", "gpus"), ("time_minutes: 1.5\n", "time_minutes"),
                        ("container: 'a b'\n", "container"), ("memory_gb: 0\n", "memory_gb")):
        bad = make_git_project(tmp_path / f"bad{abs(hash(text))}", {"a.py": "print(1)\n", "gpu.yaml": text})
        with pytest.raises(UserError) as err:
            build_request(bad, {"script": "a.py"})
        assert words in err.value.message() and "gpu.yaml:1" in err.value.message()


def test_batch_script_is_generated_not_templated(home: Path) -> None:
    from types import SimpleNamespace

    from core.providers.batch import resources, script

    job = SimpleNamespace(id="f" * 32, short_id="ffffffff", attempt=2, name="train",
                          plan={"hours": 1.0, "resources": {"modules": ["cuda/12.1"], "cpus": 4}})
    res = resources(job, {"partition": "gpu", "modules": ["gcc/12"], "gpus_per_job": 2})
    assert res["time_minutes"] == 80 and res["modules"] == ["gcc/12", "cuda/12.1"] and res["gpus"] == 2
    text = script(job, directives=["#SBATCH --time=80"], adir="/r/jobs/x/attempts/2", jdir="/r/jobs/x",
                  launcher_cmd=["/usr/bin/python3", "/r/runtime/h/launch.py", "--foreground", "/r/spec.json"],
                  modules=res["modules"], container="docker://img:1", options={"env": {"A": "it's"}})
    assert "module load gcc/12 ||" in text and "module load cuda/12.1 ||" in text
    assert "export A='it'\"'\"'s'" in text
    assert "apptainer exec --nv --bind /r docker://img:1 /usr/bin/python3" in text
    assert "trap on_time USR1" in text and "trap on_request USR2" in text
    assert 'while kill -0 "$child" 2>/dev/null; do sleep 1; done' in text
    job.plan["resources"]["partition"] = "gpu\n#SBATCH --account=x"
    with pytest.raises(ValueError):
        resources(job, {})
