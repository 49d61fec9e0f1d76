"""SC001 and SC004: problems with the file itself.

These two rules are registered for their code, title and docs (`packcfg explain`, `packcfg rules`, SARIF),
but their check functions find nothing: the loader (`packcfg.core.yamlsource`) reports them while it reads
the file, because a file that does not parse, or must not be parsed, never becomes a config a rule could read.
"""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule

_VALID = """\
recipe:
  name: tiny
model:
  seq_length: 512
train:
  micro_batch_size: 1
  global_batch_size: 8
"""


@rule(
    "SC001",
    "error",
    "the file does not parse",
    docs=RuleDocs(
        what=(
            "The file is not one valid YAML mapping: a syntax error, bytes that are not UTF-8, a key set twice "
            "in one mapping, tab characters used for indentation, several `---` documents, or a top level that "
            "is a list or a scalar instead of sections. An empty or comment-only file parses: it is an empty "
            "mapping (a no-op override file), as OmegaConf loads it. The diagnostic points at the line and "
            "column where the problem starts (for a duplicate key: the second one)."
        ),
        why=(
            "A YAML error found in the job's first second is an error found after the queue wait. A duplicate "
            "key is worse: YAML loaders keep the last value silently, so half of an edited section is ignored."
        ),
        failing=_VALID.replace("  global_batch_size: 8\n", "  global_batch_size: 8\n  micro_batch_size: 2\n"),
        passing=_VALID,
        source="YAML 1.2 spec (mapping keys are unique, indentation is spaces); Megatron Bridge loads configs "
        "with OmegaConf.load (training/utils/omegaconf_utils.py, main 067f987)",
    ),
)
def check_sc001(ctx: RuleContext) -> Iterator[Finding]:
    """Reported by the loader; nothing to check on a parsed config."""
    return iter(())


@rule(
    "SC004",
    "error",
    "a YAML feature that must not reach a training job",
    docs=RuleDocs(
        what=(
            "The file uses a YAML feature a config must not: a python tag (`!!python/object`, ...) or any "
            "other non-standard tag, aliases that expand past a size bound or refer to themselves (alias "
            "bombs), nesting more than 100 levels deep, or a document larger than 10 MB. The file is not "
            "loaded further."
        ),
        why=(
            "Python tags run code when an unsafe loader reads the file on the cluster; alias bombs and huge "
            "documents exhaust memory on the login node or in the job. A config is plain data."
        ),
        failing=_VALID.replace("  name: tiny\n", "  name: !!python/object/apply:os.system [echo hi]\n"),
        passing=_VALID,
        source="PyYAML documentation on yaml.load vs yaml.safe_load; 'billion laughs' alias expansion",
    ),
)
def check_sc004(ctx: RuleContext) -> Iterator[Finding]:
    """Reported by the loader; nothing to check on a parsed config."""
    return iter(())
