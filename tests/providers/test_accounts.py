"""GPU cloud accounts, read-only: each provider's documented answers parsed (through the real
client, against loopback fakes serving recorded shapes), balance, an expired key, a provider
that stalls, the key kept out of every file, log and bundle, and no write ever sent.

Every test here ends by checking what the fakes received: only GETs, and POSTs whose body is
a GraphQL document holding queries only (judged by graphql-core, not by our own parser).
"""

from __future__ import annotations

import json
import os
import re
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.props import examples

from core.providers.accounts import graphql_ops, lambdacloud, primeintellect, readonly, reader, runpod, tensorpool, vast
from tests.conftest import copy_example, gpu_json, run_gpu, write_user_config
from tests.fake_accounts import ALL_REQUESTS, DATA, PROVIDERS, FakeAccounts

# targets that can take the GPUs the plans below ask for (declared hardware on this machine)
TARGETS = ("targets:\n  box: {kind: local, price_per_hour: 0.4, gpus: [{name: RTX 4090, memory_gb: 24}]}\n"
           "  big: {kind: local, price_per_hour: 3.0, gpus: [{name: A100, memory_gb: 80}]}\n")
T0 = 1764576000.0 + 3600  # one hour after the fixtures' start times (2025-12-01T08:00:00Z)


def _oracle_kinds(document: str) -> list[str] | None:
    """What graphql-core makes of a document: each definition's kind, or None if it does not
    parse (a server that cannot parse a document runs nothing of it)."""
    from graphql import parse
    from graphql.error import GraphQLError
    from graphql.language import FragmentDefinitionNode, OperationDefinitionNode

    try:
        ast = parse(document)
    except (GraphQLError, RecursionError):
        return None
    kinds = []
    for d in ast.definitions:
        if isinstance(d, OperationDefinitionNode):
            kinds.append(d.operation.value)
        elif isinstance(d, FragmentDefinitionNode):
            kinds.append("fragment")
        else:
            kinds.append(type(d).__name__)
    return kinds


def _assert_reads_only(requests: list[dict]) -> None:
    for r in requests:
        assert r["method"] in ("GET", "POST"), f"a {r['method']} reached {r['provider']}: {r}"
        if r["method"] == "GET":
            assert not r["body"], r
        else:
            doc = json.loads(r["body"])
            assert set(doc) <= {"query", "variables"}, doc
            kinds = _oracle_kinds(doc["query"])
            assert kinds is None or set(kinds) <= {"query", "fragment"}, (kinds, doc["query"])


@pytest.fixture(autouse=True)
def _no_write_ever_sent():
    start = len(ALL_REQUESTS)
    yield
    _assert_reads_only(ALL_REQUESTS[start:])


@pytest.fixture
def fakes():
    f = FakeAccounts()
    yield f
    f.close()


@pytest.fixture
def accounts(fakes, keychain, home):
    """Every provider's fake, its key stored with `gpu accounts add` (the real command)."""
    write_user_config(TARGETS + fakes.config(timeout_s=2))
    for p in PROVIDERS:
        proc = run_gpu("accounts", "add", p, "--key-stdin", "--base-url", fakes[p].base_url,
                       "--timeout-s", "2", "--json", input=fakes.keys[p] + "\n")
        assert proc.returncode == 0, proc.stderr
    return fakes


# -- each provider's answers, parsed --------------------------------------------------------


def test_fixtures_name_their_source_and_date() -> None:
    for path in DATA.rglob("*.json"):
        doc = json.loads(path.read_text())
        assert doc["source"].startswith("https://"), path
        assert doc["read"] == "2026-12-01", path
        assert "body" in doc, path


def test_offers_prices_and_instances_parsed_per_provider(fakes, home) -> None:
    def read(mod):
        s = reader.Settings(mod.NAME, fakes[mod.NAME].base_url)
        return reader.read_one(s, fakes.keys[mod.NAME], now=T0)

    lam = read(lambdacloud)
    a100 = next(o for o in lam.offers if o.gpu == "A100")
    assert (a100.vram_gb, a100.price_per_hour, a100.gpu_count, a100.region) == (40.0, 1.29, 1, "us-east-1")
    h100x8 = next(o for o in lam.offers if o.gpu_count == 8)
    assert (h100x8.price_per_hour, h100x8.available) == (23.92, 0)  # no region has capacity
    assert lam.instances[0].gpu == "A100" and lam.instances[0].status == "active"
    assert lam.instances[0].price_per_hour == 1.29 and lam.instances[0].cost_so_far is None
    assert lam.account.balance is None and "no balance" in lam.account.balance_note

    rp = read(runpod)
    by = {o.gpu: o for o in rp.offers}
    assert (by["RTX 4090"].price_per_hour, by["RTX 4090"].vram_gb, by["RTX 4090"].stock) == (0.34, 24.0, "High")
    assert by["H100 SXM"].available == 0 and by["H100 SXM"].price_per_hour == 2.99  # out of stock
    assert "Tesla T4" not in by  # no price: not offered
    pod = rp.instances[0]
    assert (pod.id, pod.gpu, pod.status, pod.cost_so_far) == ("50qynxzilsxoey", "RTX 4090", "RUNNING", 1.38)
    assert (rp.account.balance, rp.account.spend_per_hour) == (41.27, 0.69)

    va = read(vast)
    by = {(o.gpu, o.gpu_count): o for o in va.offers}
    assert by[("RTX 4090", 1)].available == 2 and by[("RTX 4090", 1)].price_per_hour == 0.312  # cheapest of two
    assert by[("RTX 4090", 1)].vram_gb == 24.0 and by[("RTX 4090", 1)].region == "Sweden, SE"
    assert by[("H100 SXM", 8)].price_per_hour == 18.4
    inst = va.instances[0]
    assert (inst.gpu, inst.status, inst.cost_so_far) == ("RTX 3090", "running", 0.2)  # one hour at $0.20
    assert va.account.balance == 23.41
    search = next(r for r in fakes["vast"].requests if r["path"].startswith("/api/v0/bundles"))
    assert json.loads(search["query"]["q"][0])["rentable"] == {"eq": True}

    pi = read(primeintellect)
    h100 = min((o for o in pi.offers if o.gpu == "H100_80GB"), key=lambda o: o.price_per_hour)
    assert (h100.price_per_hour, h100.vram_gb, h100.region, h100.stock) == (1.9, 80.0, "hyperstack/CANADA-1", "Available")
    assert next(o for o in pi.offers if o.gpu == "RTX4090_24GB").available == 0  # "Unavailable"
    assert (pi.instances[0].status, pi.instances[0].cost_so_far) == ("ACTIVE", 1.9)
    assert pi.account.balance is None and "balance" in pi.unavailable

    tp = read(tensorpool)
    assert tp.offers == [] and tp.instances == [] and set(tp.unavailable) == {"offers", "instances", "balance"}
    assert [r["path"] for r in fakes["tensorpool"].requests] == ["/me"]
    assert all(r["authorized"] for r in fakes.requests)


def test_accounts_show_balance_offers_and_instances(accounts) -> None:
    doc = gpu_json("accounts")
    by = {a["provider"]: a for a in doc["accounts"]}
    assert set(by) == set(PROVIDERS)
    assert by["runpod"]["account"]["balance"] == 41.27
    assert by["vast"]["account"]["balance"] == 23.41
    assert by["lambda"]["account"]["balance"] is None
    for a in doc["accounts"]:
        assert a["state"] == "cached"  # `add` read each one moments ago: no new request
        assert a["read_at"] and a["age_s"] is not None and a["error"] is None
        for o in a["offers"] + a["instances"]:
            assert o["read_at"] == a["read_at"]  # every figure says when it was read
    text = run_gpu("accounts")
    assert text.returncode == 0, text.stderr
    for word in ("RunPod", "balance $41.27", "RTX 4090", "sweep-7", "$1.38", "TensorPool", "not in its public API"):
        assert word in text.stdout, (word, text.stdout)
    # each heading reads as a sentence: figures, how old they are, and the state in words
    runpod = next(line for line in text.stdout.splitlines() if line.startswith("RunPod"))
    assert re.fullmatch(r"RunPod \(runpod\): balance \$41\.27.*, read \d+ s ago \(up to date\)", runpod.rstrip()), runpod
    assert not re.search(r"\b(cached|fresh|no_key|never read)\b", text.stdout), text.stdout

    # a key gone from the keychain, nothing cached: said as such, not "no balance never read no_key"
    from core.secrets import keychain

    keychain.delete("account:lambda")
    (Path(os.environ["GPU_ROUTER_HOME"]) / "cache" / "accounts" / "lambda.json").unlink()
    text = run_gpu("accounts", "--refresh")
    lam = next(line for line in text.stdout.splitlines() if line.startswith("Lambda"))
    assert lam.rstrip() == "Lambda (lambda): no API key stored", lam


def test_provider_text_is_shown_inert(accounts) -> None:
    evil = json.loads((DATA / "runpod" / "graphql.json").read_text())["body"]
    evil["data"]["gpuTypes"][0]["displayName"] = "RTX\x1b]52;c;ZXZpbA==\x07 4090\x1b[2J"
    accounts["runpod"].overrides["graphql"] = evil
    proc = run_gpu("accounts", "--refresh")
    assert "\x1b" not in proc.stdout and "RTX" in proc.stdout


# -- an expired key -------------------------------------------------------------------------


def test_an_expired_key_is_a_clear_error(accounts) -> None:
    accounts["lambda"].expired = True
    proc = run_gpu("accounts", "--refresh")
    assert proc.returncode == 2
    assert "Lambda refused the stored API key" in proc.stderr and "gpu accounts add lambda" in proc.stderr
    doc = json.loads(run_gpu("accounts", "--refresh", "--json").stdout)
    lam = next(a for a in doc["accounts"] if a["provider"] == "lambda")
    assert lam["key_refused"] and lam["state"] == "stale" and "HTTP 401" in lam["error"]
    assert lam["offers"]  # the last known figures stay, with their age

    # a key the provider refuses is never stored
    from core.secrets import keychain

    proc = run_gpu("accounts", "add", "lambda", "--key-stdin", "--base-url", accounts["lambda"].base_url,
                   input="an-old-key\n")
    assert proc.returncode == 2
    assert "Lambda refused this API key" in proc.stderr and "gpu accounts add lambda" in proc.stderr
    assert keychain.get("account:lambda") == accounts.keys["lambda"]


def test_add_needs_a_key_and_never_takes_it_as_an_argument(fakes, keychain, home) -> None:
    proc = run_gpu("accounts", "add", "runpod", "--key-stdin", input="")
    assert proc.returncode == 2 and "nothing on standard input" in proc.stderr
    proc = run_gpu("accounts", "add", "runpod", "my-key")
    assert proc.returncode == 2  # argparse: there is no argument for a key
    proc = run_gpu("accounts", "add", "runpod", "--key-stdin", "--base-url", "http://example.org", input="k\n")
    assert proc.returncode == 2 and "https" in proc.stderr


# -- a slow or failing provider never holds up a plan ---------------------------------------


def test_a_stalled_provider_does_not_hold_up_plan(accounts, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "proj")
    first = gpu_json("plan", "--gpu", "4090", "--hours", "2", cwd=project)
    best = first["elsewhere"]["cheapest"]
    assert (best["provider"], best["price_per_hour"], best["estimated_cost"]) == ("vast", 0.312, 0.62)

    accounts["vast"].stall_s = 300
    write_user_config(TARGETS + accounts.config(timeout_s=1))  # each read waits at most 1 s
    _age_cache("vast", 120)  # read two minutes ago: past the 60 s cache, due for a new read
    # 60 s bounds what the 1 s timeout guarantees; the stall is 300 s
    second = gpu_json("plan", "--gpu", "4090", "--hours", "2", cwd=project, timeout=60)
    vast_state = next(a for a in second["elsewhere"]["accounts"] if a["provider"] == "vast")
    assert vast_state["state"] == "stale" and "no answer within 1 s" in vast_state["error"]
    assert vast_state["age_s"] >= 120
    assert second["elsewhere"]["cheapest"]["provider"] == "vast"  # the last known offer, with its age
    assert second["elsewhere"]["cheapest"]["age_s"] >= 120
    assert second["plan"]["digest"] == first["plan"]["digest"]

    text = run_gpu("plan", "--gpu", "4090", "--hours", "2", cwd=project, timeout=60)
    assert text.returncode == 0 and "elsewhere now" in text.stdout and "Vast.ai: stale" in text.stdout


def _age_cache(provider: str, seconds: float) -> None:
    """Make the cached reading `seconds` older, as if that much time had passed since it."""
    path = Path(os.environ["GPU_ROUTER_HOME"]) / "cache" / "accounts" / f"{provider}.json"
    doc = json.loads(path.read_text())
    r = doc["reading"]
    for item in [r, r["account"], *r["offers"], *r["instances"]]:
        item["read_at"] -= seconds
    path.write_text(json.dumps(doc))


def test_elsewhere_is_not_part_of_the_digest(accounts, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "proj")
    with_accounts = gpu_json("plan", "--vram-gb", "80", "--hours", "1", cwd=project)
    best = with_accounts["elsewhere"]["cheapest"]
    assert (best["provider"], best["gpu"], best["price_per_hour"]) == ("runpod", "A100 PCIe", 1.19)
    write_user_config(TARGETS)
    without = gpu_json("plan", "--vram-gb", "80", "--hours", "1", cwd=project)
    assert "elsewhere" not in without
    assert without["plan"]["digest"] == with_accounts["plan"]["digest"]


def test_plan_with_no_gpu_target_names_the_accounts_offers(accounts, tmp_path: Path) -> None:
    write_user_config("targets:\n  local: {kind: local, gpus: []}\n" + accounts.config(timeout_s=2))
    project = copy_example(tmp_path / "proj")
    proc = run_gpu("plan", "--gpu", "4090", "--hours", "2", "--json", cwd=project)
    assert proc.returncode == 2
    fix = json.loads(proc.stdout or proc.stderr)["fix"]
    assert "`gpu targets add ssh NAME --host HOST`" in fix
    assert "the cheapest is RTX 4090 on vast (Sweden, SE) at $0.31/h, about $0.62 for 2 h" in fix, fix
    none = json.loads(run_gpu("plan", "--gpu", "B300", "--json", cwd=project).stdout or "{}")
    assert "offer no B300 now" in none["fix"]


# -- the key stays in the keychain ----------------------------------------------------------


def _scan(root: Path, secrets: list[str]) -> list[str]:
    found = []
    # os.walk, not rglob: a job's dependency install may still be making and removing its
    # temporary folders (uv's cache) while this looks; what vanished held no key
    paths_ = [Path(top) / name for top, _, names in os.walk(root) for name in names]
    for path in paths_:
        try:
            if not path.is_file() or path.is_symlink():
                continue
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        blobs = [data]
        if path.name.endswith(".tar.gz"):
            with tarfile.open(path) as tar:
                blobs += [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
        for blob in blobs:
            found += [f"{path}: {s[:12]}" for s in secrets if s.encode() in blob]
    return found


def test_keys_in_no_file_log_store_or_bundle(accounts, tmp_path: Path) -> None:
    project = copy_example(tmp_path / "proj")
    outs = [run_gpu("accounts", "--json"), run_gpu("accounts", "--refresh"),
            run_gpu("plan", "--hours", "0.05", "--json", cwd=project),
            run_gpu("submit", "--hours", "0.05", "--json", cwd=project)]
    accounts["runpod"].expired = True
    outs.append(run_gpu("accounts", "--refresh"))
    secrets = list(accounts.keys.values())
    for proc in outs:
        for s in secrets:
            assert s not in proc.stdout and s not in proc.stderr
    home = Path(os.environ["GPU_ROUTER_HOME"])
    assert list((home / "objects").rglob("*")), "the submit stored the files to scan"
    assert _scan(home, secrets) == []
    assert _scan(project, secrets) == []
    assert _scan(Path(os.environ["GPU_ROUTER_CONFIG"]).parent, secrets) == []  # the config
    from core.secrets import keychain

    assert keychain.get("account:runpod") == accounts.keys["runpod"]  # where it does live


def test_rm_forgets_key_config_and_cache(accounts) -> None:
    from core.secrets import keychain

    doc = gpu_json("accounts", "rm", "vast")
    assert doc["removed"] == "vast" and doc["key_deleted"]
    assert keychain.get("account:vast") is None
    assert "vast" not in Path(os.environ["GPU_ROUTER_CONFIG"]).read_text()
    assert not (Path(os.environ["GPU_ROUTER_HOME"]) / "cache" / "accounts" / "vast.json").exists()
    assert {a["provider"] for a in gpu_json("accounts")["accounts"]} == set(PROVIDERS) - {"vast"}


def test_no_accounts_reads_nothing(home, fakes) -> None:
    doc = gpu_json("accounts")
    assert doc["accounts"] == []
    assert fakes.requests == []


# -- the read-only client -------------------------------------------------------------------


def test_the_client_has_no_other_way_to_send() -> None:
    public = {n for n in vars(readonly) if not n.startswith("_") and callable(getattr(readonly, n))
              and getattr(getattr(readonly, n), "__module__", "") == readonly.__name__}
    assert public == {"get", "query", "check_url", "ReadOnlyRefused", "AccountError", "KeyRefused", "Timeout"}


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "post", "CONNECT", "POST"])
def test_no_method_but_reads_leaves(fakes, method: str) -> None:
    with pytest.raises(readonly.ReadOnlyRefused):
        readonly._send(method, fakes["lambda"].base_url + "/api/v1/instances", headers={}, timeout=1,
                       document=None if method != "POST" else "mutation { podTerminate(input: {podId: \"x\"}) }")
    assert fakes.requests == []


HIDDEN_MUTATIONS = [
    "mutation { podTerminate(input: {podId: \"x\"}) }",
    "# just a query\nmutation { podStop(input: {podId: \"x\"}) }",
    "query a { myself { id } } mutation b { podStop(input: {podId: \"x\"}) }",
    "fragment F on Pod { id }\nmutation { podStop(input: {podId: \"x\"}) { ...F } }",
    "subscription { podEvents { id } }",
    "\ufeff  ,, mutation{x}",
    "query { f(s: \"}\") } mutation { x }",
    'query { f(s: """ } """) } mutation { x }',
    "{ a } mutation M { b }",
    "type Query { a: Int }",
    "query Q($x: In = {a: 1}) { f } mutation { x }",
    "query { a ",
]


@pytest.mark.parametrize("doc", HIDDEN_MUTATIONS)
def test_no_mutation_leaves_however_it_hides(fakes, doc: str) -> None:
    with pytest.raises(readonly.ReadOnlyRefused):
        readonly.query(fakes["runpod"].base_url + "/graphql", doc, timeout=1)
    assert fakes.requests == []


def test_a_query_leaves_as_a_post(fakes) -> None:
    readonly.query(fakes["runpod"].base_url + "/graphql", "fragment F on GpuType { id }\n"
                   "query q { gpuTypes { ...F displayName } }", headers={"Authorization": f"Bearer {fakes.keys['runpod']}"})
    assert [r["method"] for r in fakes.requests] == ["POST"]


def test_redirects_and_other_schemes_are_not_followed(fakes) -> None:
    with pytest.raises(readonly.ReadOnlyRefused):
        readonly.get("file:///etc/passwd")
    with pytest.raises(readonly.ReadOnlyRefused):
        readonly.get("http://example.org/api")  # plain http only to this machine


_NAME = st.sampled_from(["a", "myself", "pods", "id", "mutation", "query", "subscription", "fragment", "on", "F"])
_PIECES = st.one_of(
    _NAME, st.sampled_from(["{", "}", "(", ")", ":", "...", "$x", "@d", "\"str }\"", '"""blk { """',
                            "# c mutation {\n", ",", "\n", " ", "1", "[", "]", "=", "!"]))


@st.composite
def _documents(draw) -> str:
    ops = draw(st.lists(st.sampled_from(["query", "mutation", "subscription", "fragment F on T", "", "query Q"]),
                        min_size=1, max_size=3))
    parts = []
    for op in ops:
        inner = " ".join(draw(st.lists(_PIECES, max_size=6)))
        parts.append(f"{draw(st.sampled_from(['', '# note', ' ']))}\n{op} {{ {inner} }}")
    return "\n".join(parts) if draw(st.booleans()) else " ".join(draw(st.lists(_PIECES, max_size=12)))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.one_of(_documents(), st.text(max_size=80)))
def test_property_only_queries_ever_leave(fakes, doc: str) -> None:
    """For any input: nothing leaves but a POST of a document with no mutation or subscription
    (by graphql-core's reading); a document graphql-core reads as holding one never leaves."""
    url = fakes["runpod"].base_url + "/graphql"
    before = len(fakes["runpod"].requests)
    try:
        readonly.query(url, doc, timeout=2)
        sent = True
    except readonly.ReadOnlyRefused:
        sent = False
    except readonly.AccountError:
        sent = True  # it left; the fake refused the (keyless) request
    new = fakes["runpod"].requests[before:]
    assert len(new) == (1 if sent else 0)
    kinds = _oracle_kinds(doc)
    if kinds is not None and not set(kinds) <= {"query", "fragment"}:
        assert not sent, (doc, kinds)
    for r in new:
        assert r["method"] == "POST" and json.loads(r["body"])["query"] == doc
    _assert_reads_only(new)


def test_our_parser_agrees_with_graphql_core_on_queries() -> None:
    doc = json.loads(json.dumps(runpod.QUERY))
    graphql_ops.check_query(doc)
    assert _oracle_kinds(doc) == ["query"]


# -- config ---------------------------------------------------------------------------------


def test_config_lists_the_same_providers() -> None:
    from core.config import user

    assert set(user.ACCOUNT_PROVIDERS) == set(reader.PROVIDERS) == set(PROVIDERS)


@pytest.mark.parametrize("text,what", [
    ("accounts:\n  aws: {}\n", "unknown account"),
    ("accounts:\n  vast: {base_url: 'http://10.0.0.5:8080'}\n", "https"),
    ("accounts:\n  vast: {base_url: 'ftp://x'}\n", "https"),
    ("accounts:\n  vast: {timeout_s: 0}\n", "timeout_s"),
    ("accounts:\n  vast: {timeout_s: 90}\n", "at most 30"),
    ("accounts:\n  vast: {key: abc}\n", "takes base_url, timeout_s"),
])
def test_bad_accounts_config_is_a_clear_error(home, text: str, what: str) -> None:
    write_user_config(text)
    proc = run_gpu("accounts")
    assert proc.returncode == 2 and what in proc.stderr, proc.stderr




# -- the dashboard ----------------------------------------------------------------------------


async def test_dashboard_targets_pane_shows_offers_and_instances(accounts) -> None:
    from tui.dash.app import DashApp
    from tui.dash.widgets import TargetsTable

    accounts["runpod"].overrides["graphql"] = evil = json.loads(
        (DATA / "runpod" / "graphql.json").read_text())["body"]
    evil["data"]["myself"]["pods"][0]["name"] = "sweep\x1b]0;PWNED\x07-7"
    gpu_json("accounts", "--refresh")
    app = DashApp(live=False, bell=False)  # a still picture: everything read in order, now
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.2)
        table = app.query_one(TargetsTable)
        keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
        assert {f"account:{p}" for p in PROVIDERS} <= set(keys)
        assert "instance:runpod:50qynxzilsxoey" in keys and "instance:vast:4242424" in keys
        row = [str(c) for c in table.get_row("account:vast")]
        assert row[1:3] == ["account", "Tesla T4 15G"] and row[4] == "$23" and row[5] == "$0.11"
        pod = [str(c) for c in table.get_row("instance:runpod:50qynxzilsxoey")]
        assert pod[0] == " └ sweep-7"  # the title escape, payload and all, is gone
        assert pod[1:4] == ["instance", "RTX 4090", "RUNNING"] and pod[4] == "$1.38 so far"
