"""Which operations a GraphQL document holds, read with a lexer of the spec's tokens.

Why a lexer and not a regex: `mutation` can hide after a comment, inside a string, after a
fragment, or as the second operation of a document, and a brace inside a string is not a brace.
The read-only client sends a document only when this says every definition in it is a query
(named or the `{ ... }` shorthand) or a fragment; anything else, or anything it cannot lex, is
refused. It errs on the side of refusing: a document the server would reject anyway is fine
to refuse here.
"""

from __future__ import annotations

import re

_PUNCT = set("!$&()[]{}:=@|")
_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_IGNORED = set(" \t\n\r,\ufeff")


class NotAQuery(ValueError):
    """The document is not made of queries and fragments only."""


def tokens(doc: str) -> list[str]:
    """The document's tokens (names, punctuators, numbers; strings as one token `"`)."""
    out: list[str] = []
    i, n = 0, len(doc)
    while i < n:
        c = doc[i]
        if c in _IGNORED:
            i += 1
        elif c == "#":
            while i < n and doc[i] not in "\n\r":
                i += 1
        elif c in _PUNCT:
            out.append(c)
            i += 1
        elif doc.startswith("...", i):
            out.append("...")
            i += 3
        elif doc.startswith('"""', i):
            end = i + 3
            while True:
                end = doc.find('"""', end)
                if end < 0:
                    raise NotAQuery("a block string that never ends")
                if doc[end - 1] == "\\":  # \""" is an escaped triple quote inside it
                    end += 3
                    continue
                break
            out.append('"')
            i = end + 3
        elif c == '"':
            j = i + 1
            while j < n and doc[j] != '"':
                if doc[j] in "\n\r":
                    raise NotAQuery("a string that runs past its line")
                j += 2 if doc[j] == "\\" else 1
            if j >= n:
                raise NotAQuery("a string that never ends")
            out.append('"')
            i = j + 1
        else:
            m = _NAME.match(doc, i)
            if not m:
                m = _NUMBER.match(doc, i)
                if m and m.end() < n and (doc[m.end()] in "._" or doc[m.end()].isalnum()):
                    raise NotAQuery("a number run into a name")
            if not m:
                raise NotAQuery(f"an unexpected character {c!r}")
            out.append(m.group())
            i = m.end()
    return out


def operation_types(doc: str) -> list[str]:
    """Each top-level definition's kind, in order: 'query', 'mutation', 'subscription',
    'fragment', or whatever word opens some other definition (a schema, a type...)."""
    toks = tokens(doc)
    kinds: list[str] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        kinds.append("query" if tok == "{" else tok)
        if tok != "{" and not _NAME.fullmatch(tok):
            raise NotAQuery(f"a definition cannot start with {tok!r}")
        # skip to this definition's selection set, then past its matching brace
        while i < len(toks) and toks[i] != "{":
            i += 1
        if i == len(toks):
            raise NotAQuery("a definition without a selection set")
        depth = 0
        while i < len(toks):
            if toks[i] == "{":
                depth += 1
            elif toks[i] == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            i += 1
        else:
            raise NotAQuery("a selection set that never closes")
    return kinds


def check_query(doc: str) -> None:
    """Raise NotAQuery unless `doc` holds at least one query and only queries and fragments."""
    if not isinstance(doc, str):
        raise NotAQuery("a document must be text")
    kinds = operation_types(doc)
    wrong = [k for k in kinds if k not in ("query", "fragment")]
    if wrong:
        raise NotAQuery(f"it holds a {wrong[0]!r} definition; only queries are sent")
    if "query" not in kinds:
        raise NotAQuery("it holds no query")
