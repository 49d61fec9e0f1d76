"""SC002 and SC003: wrong types / out-of-range values and unknown keys, found by `packcfg.core.schema`.

The engine validates once and hands the issues over in `ctx.schema_issues`; these rules turn them into
findings so that select/ignore, severity overrides and suppression comments apply as for any rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from packcfg.core.diagnostics import Severity
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, edit


def _as_written(ctx: RuleContext, text: str) -> str:
    """The schema names keys by their normalised dotted paths; say them as the file spells them
    (`dataset.packed_sequence_specs.x`, not `dataset.offline_packing_specs.x`, in a Bridge < 0.6 file)."""
    for normalised, written in ctx.renamed.items():
        text = re.sub(rf"(?<![\w.]){re.escape('.'.join(normalised))}(?!\w)", ".".join(written), text)
    return text


def _issues(ctx: RuleContext, code: str) -> Iterator[Finding]:
    for issue in ctx.schema_issues:
        if getattr(issue, "code", None) == code:
            hint = issue.hint
            # say "did you mean" once: a hint that the message already carries is dropped
            if hint and hint.rstrip("?.").strip() in issue.message:
                hint = None
            message = _as_written(ctx, issue.message)
            hint = _as_written(ctx, hint) if hint else hint
            yield Finding(message, at=tuple(issue.path), hint=hint, severity=issue.severity)


@rule(
    "SC002",
    Severity.ERROR,
    "wrong type or out-of-range value",
    docs=RuleDocs(
        what='A value has the wrong type or is out of range (`micro_batch_size: -1`, `"two"`, a float where an '
        "int is required, true where a number is required, NaN), or a field Bridge requires without a default "
        "is missing (dataset.seq_length of a defined dataset). Ranges are Bridge's: where Bridge treats 0 as "
        "off (`validation.eval_interval: 0`, `checkpoint.save_interval: 0`, `train.exit_interval: 0`, "
        "`train.manual_gc_interval: 0`), 0 is valid. Scalars are read as OmegaConf reads them (`1e-5` is a "
        "float). Values with their own rule (PK103, DS702, DS703) are reported by that rule.",
        why="Bridge would coerce, crash late, or train with a nonsense value; packcfg reports every one at once.",
        failing=edit(("  global_batch_size: 128\n", "  global_batch_size: two\n")),
        passing=BASE,
        source="Megatron Bridge training/config.py config dataclasses and training/train.py interval checks "
        "(main 067f987); Megatron Core TransformerConfig",
    ),
)
def sc002(ctx: RuleContext) -> Iterator[Finding]:
    yield from _issues(ctx, "SC002")


@rule(
    "SC003",
    Severity.WARNING,
    "unknown key",
    docs=RuleDocs(
        what='An unknown key: a warning in a Bridge section packcfg models (with "did you mean" within edit '
        "distance 2), an error in packcfg's own sections (`recipe`, `launch`). Keys of Bridge sections packcfg "
        "does not model (e.g. `peft`, `comm_overlap`) pass silently.",
        why="A misspelt key is silently ignored by Bridge's YAML overrides: the run uses the default instead.",
        failing=edit(("  micro_batch_size: 1\n", "  micro_batch_sise: 1\n")),
        passing=BASE,
        source="Megatron Bridge training/config.py ConfigContainer sections (main 067f987); packcfg's own "
        "recipe/launch sections (docs/lint.md)",
    ),
)
def sc003(ctx: RuleContext) -> Iterator[Finding]:
    yield from _issues(ctx, "SC003")
