"""The glossary: terms rule messages use without spelling them out (THD, MBS, M, ...), as data
(`glossary.yaml`). `packcfg explain TERM` prints one; docs/lint.md's glossary is `markdown()`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

_TABLE = Path(__file__).with_name("glossary.yaml")


@dataclass(frozen=True)
class Term:
    name: str
    also: tuple[str, ...]
    text: str


def _key(word: str) -> str:
    """How a term is matched: case, backticks, `-`, `_` and spaces do not count (`cu-seqlens` = `cu_seqlens`)."""
    return re.sub(r"[\s_\-`]+", "", word).lower()


@cache
def terms() -> tuple[Term, ...]:
    import yaml

    entries = yaml.safe_load(_TABLE.read_text(encoding="utf-8"))
    return tuple(Term(e["name"], tuple(e.get("also", ())), " ".join(e["text"].split())) for e in entries)


def lookup(word: str) -> Term | None:
    """The term named `word` (its name first, then the other ways to ask), or None."""
    key = _key(word)
    for attr in ("name", "also"):
        for term in terms():
            names = (term.name,) if attr == "name" else term.also
            if any(_key(n) == key for n in names):
                return term
    return None


def format_term(term: Term) -> str:
    import textwrap

    also = f" (also: {', '.join(term.also)})" if term.also else ""
    body = textwrap.fill(term.text, width=100, initial_indent="    ", subsequent_indent="    ")
    return f"{term.name}{also}\n{body}\n"


def markdown() -> str:
    """The glossary as docs/lint.md lists it."""
    return "".join(f"- **{t.name}**: {t.text}\n" for t in terms())
