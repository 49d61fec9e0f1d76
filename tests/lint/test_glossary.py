"""`packcfg explain TERM` and docs/lint.md's glossary come from one list (packcfg/lint/glossary.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.lint import glossary

DOCS = Path(__file__).parents[2] / "docs" / "lint.md"


def test_docs_glossary_is_the_list() -> None:
    text = DOCS.read_text()
    section = text[text.index("### Glossary\n") : text.index("### Profiles\n")]
    listed = "".join(line + "\n" for line in section.splitlines() if line.startswith("- **"))
    assert listed == glossary.markdown()


@pytest.mark.parametrize(
    ("asked", "name"),
    [("THD", "THD"), ("thd", "THD"), ("MBS", "MBS"), ("micro_batch_size", "MBS"), ("GBS", "GBS"),
     ("pack size", "pack size"), ("packed_sequence_size", "pack size"), ("cu-seqlens", "cu_seqlens"),
     ("M", "M"), ("per-token loss", "per-token loss"), ("Per_Token_Loss", "per-token loss"),
     ("packed_sequence_specs", "specs"), ("length-grouped padding", "length-grouped padding")],
)  # fmt: skip
def test_explain_a_term(asked: str, name: str, capsys) -> None:
    assert main(["explain", asked]) == 0
    out = capsys.readouterr().out
    term = glossary.lookup(name)
    assert term is not None and out.startswith(f"{name} (also: ") and term.text.split()[0] in out


def test_a_rule_code_still_wins(capsys) -> None:
    assert main(["explain", "pk110"]) == 0
    assert capsys.readouterr().out.startswith("PK110 (error, fixable): ")


def test_explain_alone_prints_the_glossary(capsys) -> None:
    assert main(["explain"]) == 0
    out = capsys.readouterr().out
    assert [
        t.name for t in glossary.terms() if not out.count(f"\n{t.name} ") and not out.startswith(t.name)
    ] == []


def test_unknown_word_is_one_line(capsys) -> None:
    assert main(["explain", "no-such-thing"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rule code and no glossary term" in err and "THD, MBS, GBS" in err


def test_every_message_term_has_an_entry() -> None:
    """The words the issue found unexplained in messages."""
    for word in (
        "THD",
        "MBS",
        "GBS",
        "pack size",
        "cu_seqlens",
        "M",
        "per-token loss",
        "TP",
        "CP",
        "SP",
        "DP",
    ):
        assert glossary.lookup(word) is not None, word
