"""Looks batched into one command (core/providers/lookbatch.py), run by a real /bin/sh."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st
from tests.props import examples

from core.providers.lookbatch import MAX_ITEMS, LookBatch
from core.transport.base import TransportError
from core.transport.local import LocalTransport


def _counting(transport: LocalTransport, calls: list[str]):
    async def run(script: str):
        calls.append(script)
        return await transport.run(script, timeout=30)
    return run


def test_looks_asked_together_go_as_one_command_and_each_gets_its_own_answer() -> None:
    calls: list[str] = []
    # the look prints its argument, and on request lines that look like a frame
    batch = LookBatch(_counting(LocalTransport(), calls),
                      'printf "%s\\n" "$1"; case "$1" in *frame*) printf "\\ngpu-router-look-\\n\\n";; esac; return 0')
    args = [f"job {i} 'quoted' $HOME `x`" for i in range(MAX_ITEMS + 5)] + ["a frame?", "no newline"]

    async def main() -> list[str]:
        return await asyncio.gather(*(batch.ask(a) for a in args))

    answers = asyncio.run(main())
    assert len(calls) == 2  # MAX_ITEMS in the first command, the rest in the second
    for arg, answer in zip(args, answers):
        assert answer.split("\n")[0] == arg
    assert answers[-2] == "a frame?\n\ngpu-router-look-\n\n"


@settings(max_examples=examples(30), deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                        max_size=40), min_size=1, max_size=8))
def test_any_arguments_come_back_to_their_own_asker(args: list[str]) -> None:
    batch = LookBatch(_counting(LocalTransport(), []), 'printf "<%s>" "$1"')

    async def main() -> list[str]:
        return await asyncio.gather(*(batch.ask(a) for a in args))

    assert asyncio.run(main()) == [f"<{a}>" for a in args]


def test_a_failed_command_reaches_every_asker() -> None:
    async def run(script: str):
        raise TransportError("host away")

    batch = LookBatch(run, "echo hi")

    async def main() -> list[object]:
        return await asyncio.gather(*(batch.ask(str(i)) for i in range(3)), return_exceptions=True)

    out = asyncio.run(main())
    assert [str(e) for e in out] == ["host away"] * 3 and all(isinstance(e, TransportError) for e in out)


def test_a_short_answer_is_an_error_not_a_wrong_answer() -> None:
    batch = LookBatch(_counting(LocalTransport(), []), "exit 3")  # the script ends at the first look

    async def main() -> list[object]:
        return await asyncio.gather(batch.ask("a"), batch.ask("b"), return_exceptions=True)

    assert all(isinstance(e, ValueError) for e in asyncio.run(main()))
