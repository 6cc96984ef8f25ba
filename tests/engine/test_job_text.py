"""Job-chosen text where a person acts (issue 36, item 6).

A job (often an agent's) chooses words that reach a person: its name, its args, the error line
it printed (recorded as its failure reason), a sweep's values. Two ways that went wrong:

- a failed job's error line with a URL reached the person's chat verbatim, and a chat that
  unfurls links fetched it (a way out for a `network: false` job), or it sat as a phishing
  line beside `gpu approve`: in a notification a job's words are now a quoted excerpt (lines
  that start with `> `) with every link defanged, and an approval message holds none of them;
- sweep values substituted into each other (`A=ghp_{K0}{K1}{K2}`, `-- --x {A}`) assembled a
  GitHub token the args check refuses when written whole: a value is now substituted once
  (a placeholder inside a value is refused, and substitution is one pass), and every point's
  final args, script line and env pass the checks they would pass written whole.

Each example of the issue is a test here, and each class has a property test (hypothesis).
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from linkify_it import LinkifyIt

from core.config import sweep
from core.config.request import JobRequest, build_request
from core.engine import notify
from core.errors import UserError
from core.jobs.states import State
from core.jobs.store import Event, Job
from core.secrets.scan import check_args, check_env, text_problem
from tests.conftest import make_git_project, run_gpu
from tests.props import examples

# three pieces that are nothing alone and a GitHub token (ghp_ and 36 characters) side by side
K0, K1, K2 = "aB3dE5gH7jK9", "mN2pQ4rS6tU8", "vW1xY3zA5bC7"
TOKEN = f"ghp_{K0}{K1}{K2}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a script: all build_request needs (no gpu.yaml, nothing else read)."""
    p = tmp_path_factory.mktemp("proj")
    (p / "a.py").write_text("print('hi')\n")
    return p


def _build(project: Path, **over: Any) -> JobRequest:
    return build_request(project, {"script": "a.py", **over})


# -- sweeps: a value is substituted once, and every check sees the final values --------------


def test_the_token_of_the_issue_assembled_through_a_value_is_refused(project: Path) -> None:
    """The issue's example: `A=ghp_{K0}{K1}{K2}`, `-- --x {A}`. A placeholder inside a value
    is refused where the sweep was given, saying what to do instead."""
    point = {"A": "ghp_{K0}{K1}{K2}", "K0": K0, "K1": K1, "K2": K2}
    with pytest.raises(UserError) as err:
        _build(project, sweep=[point], args=["--x", "{A}"])
    text = err.value.message()
    assert "sweep value of A" in text and "{K0}" in text and "placeholder" in text, text
    assert "fix:" in text and TOKEN not in text


def test_a_value_is_substituted_once_even_where_no_check_ran() -> None:
    """point_request (every door's one substitution) never reads a value it put in: the args
    of a point made from a request that skipped build_request hold `{K0}` as the value did."""
    point = {"A": "ghp_{K0}{K1}{K2}", "K0": K0, "K1": K1, "K2": K2}
    req = JobRequest(project_dir="/p", script="a.py", args=["--x", "{A}", "{K0}{A}"], sweep=[point])
    run = sweep.point_request(req, point)
    assert run.args == ["--x", "ghp_{K0}{K1}{K2}", K0 + "ghp_{K0}{K1}{K2}"]
    assert all(TOKEN not in a for a in run.args)
    line = JobRequest(project_dir="/p", script="python a.py --x {A}", sweep=[point])
    assert TOKEN not in sweep.point_request(line, point).script


def test_args_that_join_values_into_a_token_are_refused_at_submit(project: Path) -> None:
    """`-- --x ghp_{K0}{K1}{K2}` with the pieces as sweep values: each piece and the template
    pass alone; the point's final argument is the token, refused as if it were written whole."""
    pts = [{"K0": K0, "K1": K1, "K2": K2}, {"K0": K1, "K1": K0, "K2": K2}]
    with pytest.raises(UserError) as err:
        _build(project, sweep=pts, args=["--x", "ghp_{K0}{K1}{K2}"])
    text = err.value.message()
    assert "sweep point 1" in text and "GitHub token" in text and "args" in text, text
    assert TOKEN not in text and "gpu secrets set" in text
    with pytest.raises(UserError):  # the same, written whole: the check the point now passes
        _build(project, args=["--x", TOKEN])


def test_a_command_line_that_joins_values_into_a_token_is_refused(project: Path) -> None:
    """compute_job's command line takes `{KEY}` too: its final form is checked as a script line."""
    with pytest.raises(UserError) as err:
        _build(project, script="python a.py --x ghp_{K0}{K1}{K2}", sweep=[{"K0": K0, "K1": K1, "K2": K2}])
    assert "script line" in err.value.message() and "GitHub token" in err.value.message()


@pytest.mark.parametrize(("point", "words"), [
    ({"KEY_OF_RUN": "plain-value-7"}, "looks like a secret's"),  # a name env refuses
    ({"K": "sk-abcdefghijklmnop1234"}, "OpenAI API key"),  # an env value's short form
    ({"RUN": "x7Kp2QmZ9vL4tR8wB3nY6cF1"}, "a key (long and random)"),  # env's random-token guess
])
def test_each_points_env_is_held_to_the_env_rules(project: Path, point: dict, words: str) -> None:
    """A point's values become env entries: refused as `--env K=V` would be."""
    key, value = next(iter(point.items()))
    with pytest.raises(UserError) as whole:
        _build(project, env={key: value})
    assert words in whole.value.message()
    with pytest.raises(UserError) as err:
        _build(project, sweep=[point])
    assert words in err.value.message() and "sweep point 1" in err.value.message(), err.value.message()
    assert value not in err.value.message()
    if key == "KEY_OF_RUN":  # a key is an env name: most often an ordinary setting, said so
        assert "rename KEY_OF_RUN" in err.value.fix and "gpu secrets set" in err.value.fix


def test_ordinary_sweeps_still_pass(project: Path) -> None:
    """JSON text, `{}` that names no key's shape, numbers and joined values stay allowed."""
    pts = sweep.points({"LR": [0.1, "1e-3"], "CFG": ['{"depth": 2}', "{}"], "TAG": ["a-b"]})
    req = _build(project, sweep=pts, args=["--lr", "{LR}", "--cfg={CFG}", "--run={TAG}_{LR}", "{X}"])
    run = sweep.point_request(req, pts[1])
    assert run.args == ["--lr", "0.1", "--cfg={}", "--run=a-b_0.1", "{X}"]


def test_a_sweep_that_makes_a_token_never_reaches_the_store(home: Path, tmp_path: Path) -> None:
    """Through the command: refused before packing, nothing stored, `gpu status` shows no job,
    and neither the refusal nor the status holds the token."""
    project = make_git_project(tmp_path / "p", {"a.py": "print('hi')\n"})
    proc = run_gpu("submit", "a.py", "--hours", "0.1", "--wait-s", "0", "--json",
                   "--sweep", f"K0={K0}", "--sweep", f"K1={K1}", "--sweep", f"K2={K2}",
                   "--", "--x", "ghp_{K0}{K1}{K2}", cwd=project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "GitHub token" in proc.stdout + proc.stderr and TOKEN not in proc.stdout + proc.stderr
    status = run_gpu("status", "--json", cwd=project)
    assert TOKEN not in status.stdout and K0 not in status.stdout, status.stdout


_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _once(arg: str, point: dict, quote: bool = False) -> str:
    """The reference: each `{KEY}` of the template read once, left to right (shell-quoted in a
    command line)."""
    def value(key: str) -> str:
        text = sweep.env_text(point[key])
        return shlex.quote(text) if quote else text

    return "".join(value(p[1:-1]) if _PLACEHOLDER.fullmatch(p) and p[1:-1] in point else p
                   for p in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", arg))


_PIECES = st.sampled_from(["ghp_", "sk-", "hf_", "{A}", "{B}", "{K0}", "{", "}", "_", "-", "--x",
                           "=", K0, K1, K2, "x", "1", "Zz9", "https://", "a.b"])
_VALUE = st.one_of(st.lists(_PIECES, max_size=5).map("".join),
                   st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40))
_ARG = st.lists(st.sampled_from(["{A}", "{B}", "{K0}", "ghp_", "--x", "=", "-", "{", "}", "y"]),
                min_size=1, max_size=5).map("".join)


@settings(max_examples=examples(200), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(values=st.tuples(_VALUE, _VALUE, _VALUE), args=st.lists(_ARG, max_size=4), line=st.booleans())
def test_any_sweep_point_passes_the_checks_its_final_values_would_pass_written_whole(
        project: Path, values: tuple[str, str, str], args: list[str], line: bool) -> None:
    """For any values, in args or in a command line: a value with a placeholder is refused; an
    accepted sweep's point holds each value substituted once (`_once`), and its final args (or
    line) and env are accepted written whole (build_request, check_args, check_env); a final
    form refused whole refuses the sweep; one accepted whole, of values that pass as text and
    hold no placeholder, is accepted."""
    point = dict(zip(("A", "B", "K0"), values))
    assume(all(v.strip() for v in values))
    template = {"script": "python a.py " + " ".join(args)} if line else {"args": args}
    try:
        req = _build(project, sweep=[point], **template)
    except UserError:
        accepted = False
    else:
        accepted = True
    final = ({"script": _once(template["script"], point, quote=True)} if line
             else {"args": [_once(a, point) for a in args]})
    env = {k: sweep.env_text(v) for k, v in point.items()}
    try:
        _build(project, env=env, **final)
        whole = True
    except UserError:
        whole = False
    if any(_PLACEHOLDER.search(v) for v in values) or not whole:
        assert not accepted, (point, template)
        return
    assert accepted or any(text_problem(v) for v in values), (point, template)
    if not accepted:
        return  # refused as text, as any request's values are (check_request_text)
    run = sweep.point_request(req, req.sweep[0])
    if line:
        assert run.script == final["script"]
        check_args(shlex.split(run.script), "the script line")
    else:
        assert run.args == final["args"]
        check_args(run.args, "args")
    check_env({k: v for k, v in run.env.items() if k != sweep.PARAMS_VAR})


# -- notifications: a job's words quoted, defanged, never beside an approve line -------------


def _linker() -> LinkifyIt:
    """linkify-it (markdown-it's linker, what many chat renderers copy) with bare IPs and more
    top-level domains: the independent judge of what a chat would turn into a link."""
    lk = LinkifyIt(options={"fuzzy_ip": True, "fuzzy_link": True, "fuzzy_email": True})
    return lk.tlds(["dev", "app", "io", "ai", "xyz", "zip", "mov", "top", "site", "online", "py",
                    "sh", "link", "click", "cloud", "rs", "me"], True)


LINKER = _linker()
SCHEMES = re.compile(r"(?i)[a-z][a-z0-9+.-]*:/|\b(?:mailto|tel|sms|callto|javascript|data|vbscript|"
                     r"file|magnet|xmpp|sip|sips|news|tg|slack|skype|facetime|geo|bitcoin|urn|irc|"
                     r"ircs|webcal|matrix|spotify|zoommtg|msteams|discord|steam|ms-[a-z-]+):")
BARE = re.compile(r"(?i)\bwww\.|[\w-][.\u3002\uff0e\uff61][^\W\d_]")  # a top-level domain starts with a letter
MENTION = re.compile(r"(?i)@(?:everyone|here|channel|all|[\w.-])|<[!@#]")
MARKUP = re.compile(r"\]\(|[<>`&]")  # `&`: an HTML entity a service decodes (`&#104;ttps`)


def _links(text: str) -> list[str]:
    """Everything in `text` a chat could make a link or a mention of, by four judges."""
    found = [m.url for m in LINKER.match(text) or []]
    for rx in (SCHEMES, BARE, MENTION):
        found += [m.group() for m in rx.finditer(text)]
    unquoted = re.sub(r"(?m)^> ", "", text)  # the quote mark itself is gpu-router's
    return found + [m.group() for m in MARKUP.finditer(unquoted)]


def _job(name: str = "run", command: list[str] | None = None, state: State = State.FAILED,
         plan: dict | None = None, group_id: str | None = None) -> Job:
    now = time.time()
    return Job(id="ab" * 16, short_id="abababab", name=name, state=state, provider="local",
               created_at=now - 200, updated_at=now, started_at=now - 190, ended_at=now,
               project_dir="/nonexistent/p", outputs_dir="/nonexistent/p/runs/abababab",
               request_id=None, fingerprint="f", request={}, digest="d" * 64,
               plan={"target": "local", "gpu": "T4", "hours": 0.5, "price_per_hour": 2.0,
                     "estimated_price": 1.0, "command": command or ["python", "a.py"], **(plan or {})},
               approved_digest=None, bundle_hash=None, bundle={}, attempt=1, handle={},
               exit_code=None, cancel_requested=False, reason="", metrics_offset=0, group_id=group_id)


def _event(dst: State, reason: str, data: dict | None = None) -> Event:
    return Event(id=7, job_id="ab" * 16, ts=time.time(), src="running", dst=dst.value, reason=reason,
                 actor="supervisor", data=data or {})


EVIL = "ValueError: see https://evil.example/x?k=1 or www.evil.com, [click](http://a.io) @everyone <!channel>"


def test_a_failed_jobs_error_line_with_a_url_is_a_quoted_defanged_excerpt() -> None:
    """The issue's first example: the error line names a URL; the chat gets no link, and the
    job's words are on quoted lines of their own."""
    notice = notify.build(_event(State.FAILED, f"exited with status 1: {EVIL}"), _job())
    text = f"{notice.title}\n{notice.body}"
    assert _links(text) == [], _links(text)
    quoted = [ln for ln in notice.body.splitlines() if ln.startswith("> ")]
    assert quoted and any("evil" in ln and "hxxps" in ln for ln in quoted), notice.body
    assert all("evil" not in ln for ln in notice.body.splitlines() if not ln.startswith("> "))
    assert "gpu approve" not in text


def test_an_approval_message_holds_none_of_the_jobs_words() -> None:
    """The issue's second example: a phishing line beside the approve line. The name, the
    command and the event's reason are the job's (or its agent's): the approval message is the
    same whatever they say, and still says what to do and where to look."""
    holds = [{"rule": "agent_hours", "reason": "it was submitted by an agent"}]
    evil = notify.build(_event(State.AWAITING_APPROVAL, EVIL, {"holds": holds}),
                        _job(name="approve.at.evil.com", command=["python", "a.py", "--u", EVIL],
                             state=State.AWAITING_APPROVAL))
    plain = notify.build(_event(State.AWAITING_APPROVAL, "held", {"holds": holds}),
                         _job(name="run", state=State.AWAITING_APPROVAL))
    assert evil.body == plain.body and evil.title == plain.title
    assert "gpu approve abababab" in evil.body and "gpu status abababab" in evil.body
    assert "submitted by an agent" in evil.body and "$1.00" in evil.body
    assert _links(f"{evil.title}\n{evil.body}") == []


def test_a_held_sweep_is_told_in_gpu_routers_words_not_its_tell_user() -> None:
    """A sweep held as one: its tell_user paragraph carries the sweep's name and command, so
    the notification is built from the group's numbers instead."""
    plan = {"hold_kind": "group", "tell_user": f"sweep 12345678 ({EVIL}) waits: gpu approve 12345678",
            "group": {"id": "cd" * 16, "short_id": "cdcdcdcd", "index": 1},
            "group_totals": {"points": 3, "hours": 1.5, "estimated_price": 3.0, "targets": {"local": 3}},
            "holds": [{"rule": "agent_hours", "reason": "it was submitted by an agent"}]}
    notice = notify.build(_event(State.AWAITING_APPROVAL, EVIL, {"holds": plan["holds"]}),
                          _job(name=EVIL, state=State.AWAITING_APPROVAL, plan=plan, group_id="cd" * 16))
    text = f"{notice.title}\n{notice.body}"
    assert "evil" not in text and _links(text) == [], text
    assert "gpu approve cdcdcdcd" in notice.body and "3 points" in notice.body and "$3.00" in notice.body


def test_quoted_text_is_capped_and_inert_against_every_trick() -> None:
    """Lookalike dots and colons, fullwidth letters, zero-width breaks, markdown and Slack
    link forms, mentions: none survives as a link; a long line is cut."""
    tricks = ["ｈｔｔｐｓ：／／evil．com", "evil\u3002com", "ev\u200bil.com", "<http://x.io|ok>",
              "mailto:a@b.co", "javascript:alert(1)", "ftp://10.0.0.1/x", "192.168.1.1", "@here",
              "`code` ]( x", "user@evil.com", "xn--80ak6aa92e.com", "пример.рф", "EVIL.COM",
              "&#104;ttps&#58;//evil&#46;com", "&lt;https://x.io&gt;", "//evil.com/x"]
    for trick in tricks:
        out = notify.job_text(trick)
        assert _links(out) == [], (trick, out, _links(out))
    long = notify.job_text("x" * 5000)
    assert len(long) <= notify.EXCERPT_CHARS + 1 and long.endswith("…")


_JOB_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.sampled_from(["http", "https", "ftp", "://", ":", "/", "//", "www", ".", "\u3002", "\uff0e",
                              "\uff61", "com", "io", "evil", "@", "everyone", "here", "channel", "<", ">",
                              "!", "[", "]", "(", ")", "`", "mailto", "javascript", "tel", "1", "2", "255",
                              " ", "\n", "\u200b", "\u2060", "ｈｔｔｐ", "：", "／", "x", "-", "_", "|",
                              "> ", "gpu approve abababab", "рф", "пример", "xn--p1ai"]),
             max_size=40).map("".join))


def _shape(body: str) -> list[str]:
    """The message with its quoted lines blanked: gpu-router's own words and their order."""
    return ["> ..." if ln.startswith("> ") else ln for ln in body.splitlines()]


@settings(max_examples=examples(300), deadline=None)
@given(name=_JOB_TEXT, said=_JOB_TEXT,
       kind=st.sampled_from([State.FAILED, State.DONE, State.CANCELLED, "kill"]))
def test_any_job_text_in_an_ending_is_quoted_inert_and_apart_from_approvals(
        name: str, said: str, kind: Any) -> None:
    """For any job text as its name and reason: nothing a chat links or mentions, the job's
    words only on quoted lines (the rest is the same as for plain text), no approve line."""
    dst = State.FAILED if kind == "kill" else kind
    reason = f"stopped by kill rule r: {said}" if kind == "kill" else f"exited with status 1: {said}"
    notice = notify.build(_event(dst, reason), _job(name=name, state=dst))
    plain = notify.build(_event(dst, "stopped by kill rule r: x" if kind == "kill" else "exited with status 1: x"),
                         _job(name="x", state=dst))
    text = f"{notice.title}\n{notice.body}"
    assert _links(text) == [], (_links(text), text)
    assert _shape(notice.body) == _shape(plain.body) and notice.title == plain.title
    assert not any("approve" in ln for ln in text.splitlines() if not ln.startswith("> "))


@settings(max_examples=examples(200), deadline=None)
@given(name=_JOB_TEXT, said=_JOB_TEXT, args=st.lists(_JOB_TEXT, max_size=3), group=st.booleans())
def test_any_job_text_is_absent_from_an_approval_message(name: str, said: str, args: list[str],
                                                         group: bool) -> None:
    """For any job text as its name, command, reason and (a sweep's) tell_user: the approval
    message is the one a plain job gets: no quoted line, nothing linked."""
    holds = [{"rule": "secrets", "reason": "it reads HF_TOKEN from your keychain"}]
    extra: dict = {"holds": holds}
    if group:
        extra.update(hold_kind="group", tell_user=said, group={"id": "cd" * 16, "short_id": "cdcdcdcd"},
                     group_totals={"points": 2, "hours": 1.0, "estimated_price": 0, "targets": {"local": 2}})
    gid = "cd" * 16 if group else None

    def message(n: str, s: str, a: list[str]) -> notify.Notice:
        plan = {**extra, **({"tell_user": s} if group else {})}
        return notify.build(_event(State.AWAITING_APPROVAL, s, {"holds": holds}),
                            _job(name=n, command=["python", "a.py", *a], state=State.AWAITING_APPROVAL,
                                 plan=plan, group_id=gid))

    notice, plain = message(name, said, args), message("x", "x", [])
    assert (notice.title, notice.body) == (plain.title, plain.body)
    assert not any(ln.startswith("> ") for ln in notice.body.splitlines())
    assert _links(f"{notice.title}\n{notice.body}") == []
    assert "gpu approve" in notice.body and "HF_TOKEN" in notice.body


def test_a_quoted_failure_arrives_at_a_webhook_as_built(home: Path) -> None:
    """The real apprise client against a loopback webhook: what arrives is the inert message."""
    from tests.engine.test_notify import Webhook

    hook = Webhook()
    try:
        notice = notify.build(_event(State.FAILED, f"exited with status 1: {EVIL}"), _job(name="a.evil.com"))
        out = notify.send(hook.url(), notice.title, notice.body, notice.level, tries=1)
        assert out.ok, out
        got = hook.wait_count(1)[0]
        assert got["message"] == notice.body and _links(got["title"] + "\n" + got["message"]) == []
    finally:
        hook.close()


def test_the_excerpt_of_a_real_job_text_reads_well() -> None:
    """Defanging keeps the text readable: numbers, versions and paths stay as they were."""
    out = notify.job_text("loss 0.25 at step 3, torch 2.4.1, see runs/x and https://hf.co/m")
    assert "0.25" in out and "2.4.1" in out and "runs/x" in out and "hxxps[://]hf[.]co/m" in out, out
    assert json.dumps(out)  # plain text


def test_a_secret_printed_in_fullwidth_is_masked_before_it_is_folded(monkeypatch: pytest.MonkeyPatch) -> None:
    """job_text folds fullwidth letters to ASCII (NFKC): a secret the job printed that way would
    come out as its very value, so the mask looks again after the fold."""
    from core.secrets import names

    value = "tok-Fullwidth9Value"
    monkeypatch.setattr(names, "for_job", lambda job: names.NameMask(job.id, {"MY_TOKEN": value}))
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)
    notice = notify.build(_event(State.FAILED, f"exited with status 1: leaked {wide} and {value}"),
                          _job(name=wide))
    assert value not in notice.body and wide not in notice.body, notice.body
    assert notice.body.count("[secret]") == 3, notice.body


BAD = ("import sys\n"
       "print('downloading https://evil.example/payload?id=1 for @everyone', flush=True)\n"
       "raise SystemExit('ValueError: fetch failed, see https://evil.example/help or www.evil.io')\n")


@pytest.mark.slow
def test_a_real_failed_jobs_error_line_reaches_the_webhook_quoted_and_defanged(home: Path, tmp_path: Path) -> None:
    """The issue's example end to end: a job fails with a URL in its last line; the supervisor
    records that line as its reason and tells the person's webhook (real apprise, loopback):
    the message has the line on a quoted line, with no link a chat could fetch."""
    from tests.conftest import gpu_json, wait_state, write_user_config
    from tests.engine.test_notify import Webhook

    hook = Webhook()
    try:
        write_user_config(f"notify:\n  - url: {hook.url()}\n    events: [failed]\n")
        project = make_git_project(tmp_path / "p", {"bad.py": BAD})
        job = gpu_json("submit", "bad.py", "--hours", "0.1", "--wait-s", "0", cwd=project)["job"]
        ended = wait_state(job["short_id"], {"done", "failed"}, timeout=90)
        assert ended["state"] == "failed" and "evil.example" in ended["reason"], ended  # the job's words
        got = hook.wait_count(1)[0]
        text = f"{got['title']}\n{got['message']}"
        assert _links(text) == [], (_links(text), text)
        quoted = [ln for ln in got["message"].splitlines() if ln.startswith("> ")]
        assert any("evil[.]example" in ln for ln in quoted), got["message"]
        assert "evil" not in "".join(ln for ln in got["message"].splitlines() if not ln.startswith("> "))
    finally:
        hook.close()

