"""The lint engine: load with positions -> normalise -> schema -> facts -> every rule -> diagnostics.

All violations are reported in one run; an exception inside one rule is reported on stderr as an internal
error naming the rule, and the other rules still run. After the rules: the overlaps of rules.md, suppression
comments (`# packcfg: ignore[CODE]`), `select`/`ignore`/`severity` settings, then a stable sort.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcfg.core.config import (
    ConfigError,
    LocatedConfig,
    check_overrides,
    load_document,
    merge_documents,
)
from packcfg.core.diagnostics import Diagnostic, Edit, Fix, Position, Severity
from packcfg.core.yamlsource import YamlDocument, load_text
from packcfg.lint.registry import Rule
from packcfg.lint.rules import all_rules
from packcfg.lint.settings import Settings

YAML_SUFFIXES = (".yaml", ".yml")

# rules.md, "Overlaps": when PK101 fires (more than one packing mode), the mode-specific micro-batch rules
# are not reported for that file; the conflict is the root cause. The other overlaps of that section
# (specific rule over SC002, DS706 vs DS702) are decided inside those rules, where the facts are.
OVERLAPS: dict[str, frozenset[str]] = {"PK101": frozenset({"PK110", "PK111", "PK112"})}

_SUPPRESS = r"#\s*packcfg:\s*ignore\[([A-Za-z0-9_,\s]+)\]"  # compiled (and cached by re) on first use

InternalErrorHandler = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"packcfg: internal error: {message}", file=sys.stderr)


@dataclass
class LintRun:
    """The result of linting several paths: diagnostics of every file, and what could not be linted."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file linted, in order
    errors: list[str] = field(default_factory=list)  # one line each: paths that could not be read (exit 2)
    internal_errors: list[str] = field(default_factory=list)  # a rule or stage crashed (reported, not fatal)
    rules_ran: int = 0  # experiments on which the rule pipeline ran


@dataclass
class _Outcome:
    diagnostics: list[Diagnostic]
    internal_errors: list[str]
    rules_ran: bool


def rules() -> dict[str, Rule]:
    """Every registered rule by code (SC001/SC004 included: their docs live in `rules/sc_file.py`)."""
    import packcfg.lint.rules.sc_file  # noqa: F401  (registers on import; the loader emits them)

    return all_rules()


_rules = rules


def _suppressions(doc: YamlDocument) -> dict[int, set[str]]:
    """line -> codes suppressed there by `# packcfg: ignore[CODE1,CODE2]`."""
    if "packcfg:" not in doc.text:
        return {}
    out: dict[int, set[str]] = {}
    for number, line in enumerate(doc.text.splitlines(), start=1):
        if "packcfg:" in line:
            for match in re.finditer(_SUPPRESS, line):
                out.setdefault(number, set()).update(
                    c.strip().upper() for c in match.group(1).split(",") if c.strip()
                )
    return out


def lint_located(
    located: LocatedConfig,
    *,
    settings: Settings | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
    on_internal_error: InternalErrorHandler = _stderr,
) -> list[Diagnostic]:
    """Lint one merged experiment (already loaded) and return its diagnostics, filtered and sorted."""
    return _lint(located, settings or Settings(), pack_metadata, check_paths, on_internal_error).diagnostics


def _lint(
    located: LocatedConfig,
    settings: Settings,
    pack_metadata: list[dict[str, Any]] | None,
    check_paths: bool,
    on_internal_error: InternalErrorHandler,
) -> _Outcome:
    rules = _rules()
    internal: list[str] = []

    def crashed(where: str, exc: BaseException) -> None:
        message = f"{where} on {located.sources.files[0]}: {exc.__class__.__name__}: {exc}"
        internal.append(message)
        on_internal_error(message)

    def make(code: str, message: str, pos: Position, **kw: Any) -> Diagnostic:
        rule = rules.get(code)
        severity = kw.pop("severity", None) or (rule.severity if rule else Severity.ERROR)
        return Diagnostic(
            code=code,
            severity=severity,
            message=message,
            file=pos.file,
            line=pos.line,
            column=pos.column,
            title=rule.title if rule else None,
            **kw,
        )

    found: list[Diagnostic] = []
    loader_sc002: set[Position] = set()
    for file, problem in located.problems:
        pos = Position(file, problem.line, problem.column)
        if problem.code == "SC002":
            loader_sc002.add(pos)
        found.append(make(problem.code, problem.message, pos, hint=problem.hint, extra={"loader": True}))

    ran = False
    # An empty or comment-only file is an empty mapping, as OmegaConf.load reads it (a no-op override file):
    # rules.md rev 3, SC001. It lints like any other config.
    if located.ok:
        ruled = _run_rules(located, rules, settings, pack_metadata, check_paths, make, crashed)
        ran = ruled is not None
        found.extend(ruled or ())
        if loader_sc002:  # the loader already reported the out-of-range integer at that key
            found = [
                d
                for d in found
                if not (
                    d.code == "SC002"
                    and "loader" not in d.extra
                    and Position(d.file, d.line, d.column) in loader_sc002
                )
            ]

    return _Outcome(_postprocess(found, located, settings), internal, ran)


def _run_rules(
    located: LocatedConfig,
    rules: dict[str, Rule],
    settings: Settings,
    pack_metadata: list[dict[str, Any]] | None,
    check_paths: bool,
    make: Callable[..., Diagnostic],
    crashed: Callable[[str, BaseException], None],
) -> list[Diagnostic] | None:
    """Diagnostics of every rule; None when the pipeline could not reach the rules at all."""
    # Imported here, not at module top: they pull in the rule side's tables only when a config is linted.
    from packcfg.core.interpolate import has_unknown, substitute_unknown
    from packcfg.core.normalize import normalize
    from packcfg.core.schema import validate
    from packcfg.lint.context import RuleContext
    from packcfg.lint.facts import derive

    bridge = _bridge_target(located)

    def pipeline(raw: dict[str, Any], report: Callable[[str, BaseException], None]) -> Any:
        """normalise -> schema -> facts -> every rule: (ctx, [(code, finding)]), or None without facts."""
        config: dict[str, Any] = raw
        renamed: dict[tuple[str, ...], tuple[str, ...]] = {}
        try:
            normalized = normalize(config)
            config, renamed = normalized.config, dict(normalized.renamed)
        except Exception as exc:  # keep linting the config as written
            report("normalize", exc)
        schema_issues: list[Any] = []
        try:
            schema_issues = list(validate(config, settings.profile))
        except Exception as exc:
            report("schema validation", exc)
        try:
            facts = derive(config, settings.profile)
        except Exception as exc:
            report("facts.derive", exc)
            return None  # no rule can run without the facts
        ctx = RuleContext(
            config=config,
            facts=facts,
            sources=located.sources,
            profile=settings.profile,
            renamed=renamed,
            pack_metadata=pack_metadata,
            schema_issues=schema_issues,
            check_paths=check_paths,
            bridge=bridge,
        )
        found: list[tuple[str, Any]] = []
        for code, rule in rules.items():
            try:
                found.extend((code, finding) for finding in rule.check(ctx))
            except Exception as exc:
                report(f"rule {code}", exc)
        return ctx, found

    ran = pipeline(located.data, crashed)
    if ran is None:
        return None
    ctx, found = ran
    config = ctx.config
    if has_unknown(located.data):
        # rules.md rev 3: a value lint cannot know (`${oc.env:VAR}`) is unknown, not wrong. A finding stands
        # only when it holds whatever the value is: it must also come out with the unknown values read as
        # true and as false (the facts read a flag as on only when it `is True`).
        kept = {_key(code, f) for code, f in found}
        for stand_in in (True, False):
            variant = pipeline(substitute_unknown(located.data, stand_in), lambda where, exc: None)
            kept &= {_key(code, f) for code, f in variant[1]} if variant is not None else set()
        found = [(code, f) for code, f in found if _key(code, f) in kept]
    out: list[Diagnostic] = []
    for code, finding in found:
        try:
            if _on_unknown(config, finding):
                continue  # the rule reasoned about a value lint cannot know (`${oc.env:VAR}`)
            pos = ctx.position(tuple(finding.at))
            if _not_on_base(code) and is_base_source(pos.file):
                continue  # the base recipe's own keys and spellings are Bridge's, not the user's
            fix = _written_fix(finding.fix, ctx) if finding.fix else None
        except Exception as exc:
            crashed(f"rule {code} (finding at {finding.at!r})", exc)
            continue
        out.append(
            make(
                code,
                finding.message,
                pos,
                severity=finding.severity,
                hint=finding.hint,
                fix=fix,
                path=".".join(ctx.written_path(tuple(finding.at))),  # the key as the user spelled it
            )
        )
    return out


def _bridge_target(located: LocatedConfig) -> Any:
    """The Megatron Bridge release the config targets (`packcfg.core.bridge_version.target_of`): spellings count
    only where the user wrote them, not where a base recipe's snapshot did."""
    from packcfg.core.bridge_version import target_of
    from packcfg.core.config import is_override_source

    def user_written(path: tuple[str, ...]) -> bool:
        where = located.sources.exact(path)
        return where is None or not is_base_source(where.file)

    version_at = located.sources.exact(("launch", "bridge", "version"))
    return target_of(
        located.data,
        user_written,
        from_command_line=version_at is not None and is_override_source(version_at.file),
    )


def _key(code: str, finding: Any) -> tuple[str, tuple[str, ...], str]:
    return code, tuple(finding.at), finding.message


# Codes never reported on a value that comes from a base recipe (`recipe.base`): its keys are Bridge's own
# (SC003), and so is its spelling of fields (DP: deprecated spellings of the Bridge release it was taken from).
def _on_unknown(config: dict[str, Any], finding: Any) -> bool:
    """Whether a finding is about a value whose interpolation lint cannot resolve: at that key, or with a fix
    that edits it (rules.md rev 3: such a value is unknown, not wrong; rules that need it do not fire)."""
    from packcfg.core.config import get_path
    from packcfg.core.interpolate import is_unknown

    paths = [tuple(finding.at)]
    if finding.fix is not None:
        paths.extend(tuple(e.path) for e in finding.fix.edits)
    return any(is_unknown(get_path(config, p)) for p in paths)


def _not_on_base(code: str) -> bool:
    return code == "SC003" or code.startswith("DP")


def is_base_source(file: str) -> bool:
    """`<bridge recipe NAME>` (packcfg.core.base_recipes.is_base_source; not imported on the hot path)."""
    return file.startswith("<bridge recipe ") and file.endswith(">")


def _written_fix(fix: Fix, ctx: Any) -> Fix:
    """Edits name normalised paths; the file has the legacy spelling where the user wrote one."""
    edits = tuple(
        Edit(
            action=e.action,
            path=tuple(ctx.written_path(tuple(e.path))),
            value=e.value,
            new_path=tuple(e.new_path) if e.new_path is not None else None,
        )
        for e in fix.edits
    )
    return Fix(fix.description, edits)


def _postprocess(found: list[Diagnostic], located: LocatedConfig, settings: Settings) -> list[Diagnostic]:
    codes = {d.code for d in found}
    for root, hidden in OVERLAPS.items():
        if root in codes:
            found = [d for d in found if d.code not in hidden]
    suppressions = {doc.file: _suppressions(doc) for doc in located.documents}
    out: list[Diagnostic] = []
    seen: set[tuple[str, int, int, str, str]] = set()
    for d in found:
        if d.code in suppressions.get(d.file, {}).get(d.line, ()):
            continue
        if not settings.enabled(d.code):
            continue
        d.severity = settings.severity_of(d.code, d.severity)
        key = (d.file, d.line, d.column, d.code, d.message)
        if key in seen:
            continue
        seen.add(key)
        out.append(d)
    out.sort(key=Diagnostic.sort_key)
    return out


def _settings(
    settings: Settings | None,
    start: Path | None,
    profile: str | None,
    select: Iterable[str] | str | None,
    ignore: Iterable[str] | str | None,
) -> Settings:
    from packcfg.lint.settings import load_settings

    base = settings if settings is not None else load_settings(start, known_codes=_rules())
    return base.with_cli(
        select=select,
        ignore=ignore,
        profile=profile,
        known_codes=_rules(),
    )


def lint_experiment(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    settings: Settings | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
) -> LintRun:
    """Lint ONE experiment merged from `files` and overrides, as a LintRun (what the CLI reports)."""
    if not files:
        raise ConfigError("no config file given")
    located = merge_documents([load_document(f) for f in files], overrides)
    outcome = _lint(located, settings or Settings(), pack_metadata, check_paths, _stderr)
    return LintRun(
        diagnostics=outcome.diagnostics,
        files=[doc.file for doc in located.documents],
        internal_errors=outcome.internal_errors,
        rules_ran=int(outcome.rules_ran),
    )


def lint_config(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    settings: Settings | None = None,
    profile: str | None = None,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
) -> list[Diagnostic]:
    """Lint ONE experiment merged from `files` (in order) and `-o` overrides: the launch gate.

    Settings come from the nearest settings file above the first file unless `settings` is given.
    Raises ConfigError when a file cannot be read or an override is malformed (the tool cannot run),
    SettingsError for bad settings.
    """
    if not files:
        raise ConfigError("no config file given")
    st = _settings(settings, Path(files[0]), profile, select, ignore)
    return lint_experiment(
        files, overrides, settings=st, pack_metadata=pack_metadata, check_paths=check_paths
    ).diagnostics


def lint_file(
    path: str | Path,
    *,
    config_files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    settings: Settings | None = None,
    profile: str | None = None,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
) -> list[Diagnostic]:
    """Lint one experiment YAML; `config_files` (then `overrides`) are merged on top of it, in order."""
    return lint_config(
        [path, *config_files],
        overrides,
        settings=settings,
        profile=profile,
        select=select,
        ignore=ignore,
        pack_metadata=pack_metadata,
        check_paths=check_paths,
    )


def lint_text(
    text: str,
    filename: str = "<string>",
    profile: str = "current",
    *,
    settings: Settings | None = None,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    overrides: Sequence[str] = (),
    pack_metadata: list[dict[str, Any]] | None = None,
) -> list[Diagnostic]:
    """Lint YAML text (no settings file is read unless `settings` is given): the rule-docs test uses it."""
    st = (settings or Settings()).with_cli(select=select, ignore=ignore, profile=profile)
    located = merge_documents([load_text(text, filename)], overrides)
    return lint_located(located, settings=st, pack_metadata=pack_metadata)


def expand_paths(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """Files to lint, in a stable order: directories searched recursively for *.yaml/*.yml (hidden files
    and folders skipped), files taken as given. Returns (files, one-line errors for bad paths)."""
    files: list[Path] = []
    errors: list[str] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = Path(os.path.normpath(p))
        if key not in seen:
            seen.add(key)
            files.append(p)

    def unreadable(exc: OSError) -> None:
        # a folder that cannot be listed is exit 2 with its name: skipping it would pass files never linted
        where = exc.filename if exc.filename is not None else "?"
        errors.append(f"{where}: cannot read folder ({exc.strerror or exc})")

    for raw in paths:
        path = Path(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            is_dir = False
        except OSError as exc:  # permission denied on a folder above it, a symlink loop: one line, exit 2
            from packcfg.core.inputs import describe_os_error

            errors.append(f"{path}: cannot read ({describe_os_error(exc)})")
            continue
        if is_dir:
            for folder, dirs, names in os.walk(path, onerror=unreadable):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(names):
                    if name.endswith(YAML_SUFFIXES) and not name.startswith("."):
                        add(Path(folder) / name)
        elif path.exists() or path.is_symlink():
            add(path)
        else:
            errors.append(f"{path}: no such file or directory")
    return files, errors


# Top-level keys that make a YAML an experiment config (for `lint --experiments-only`, the pre-commit mode):
# Megatron Bridge's ConfigContainer sections (training/config.py, main 067f987) and packcfg's own sections.
_BRIDGE_TOP_LEVEL = frozenset(
    {
        "model", "train", "validation", "dataset", "ddp", "optimizer", "optimizer_config_override_provider",
        "scheduler", "checkpoint", "logger", "tokenizer", "rng", "rerun_state_machine", "dist", "ft",
        "straggler", "nvrx_straggler", "profiling", "peft", "comm_overlap", "mixed_precision", "tensor_inspect",
        "inprocess_restart", "env_vars",
    }
)  # fmt: skip
_OWN_TOP_LEVEL = frozenset({"recipe", "launch", "dpo"})
_TOP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)[ \t]*:", re.MULTILINE)


def experiment_sections() -> frozenset[str]:
    """Top-level keys that mark an experiment config: Bridge's sections and packcfg's `recipe`/`launch`."""
    return _BRIDGE_TOP_LEVEL | _OWN_TOP_LEVEL


def is_experiment_file(path: str | Path) -> bool:
    """Whether `path` looks like an experiment config: ONE YAML document whose top level is a mapping with at
    least one of `experiment_sections()`. A Kubernetes manifest, a GitHub workflow or a multi-document file
    is not (Bridge loads a config with OmegaConf.load, which reads one document). A file that does not parse
    counts when a line starts with a section key (so a broken experiment config is still reported); one that
    cannot be read counts too (the lint then reports why, exit 2)."""
    from packcfg.core.inputs import check_input

    try:
        check_input(path)  # a FIFO or a device is never opened (the lint reports it)
        with open(path, "rb") as fh:
            data = fh.read(16 * 1024 * 1024)  # past MAX_BYTES: only the top-level keys are looked at
    except OSError:
        return True
    text = data.decode("utf-8", errors="replace")
    sections = experiment_sections()
    import yaml

    from packcfg.core.yamlsource import MAX_BYTES, check_flow_depth

    if len(data) > MAX_BYTES or check_flow_depth(text) is not None:
        # too big or too deeply nested to hand to libyaml (it slows down quadratically with flow depth): decide
        # on the top-level keys alone; an experiment config is then linted and gets its SC004
        return any(m.group(1) in sections for m in _TOP_KEY.finditer(text))

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    documents = 0
    keys: set[str] = set()
    depth = 0
    top_is_mapping = False
    expect_key = False
    try:
        # events, not nodes: the parser keeps its own stack, so deep nesting cannot exhaust recursion
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    return False
            elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                if depth == 0:
                    top_is_mapping = isinstance(event, yaml.MappingStartEvent)
                    expect_key = True
                elif depth == 1 and top_is_mapping:
                    expect_key = not expect_key
                depth += 1
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent | yaml.AliasEvent) and depth == 1 and top_is_mapping:
                if expect_key and isinstance(event, yaml.ScalarEvent):
                    keys.add(event.value)
                expect_key = not expect_key
    except yaml.YAMLError:
        return any(m.group(1) in sections for m in _TOP_KEY.finditer(text))
    return bool(keys & sections)


def lint_paths(
    paths: Sequence[str | Path],
    *,
    config_files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    settings: Settings | None = None,
    profile: str | None = None,
    select: Iterable[str] | str | None = None,
    ignore: Iterable[str] | str | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
    jobs: int | None = None,
) -> LintRun:
    """Lint every YAML under `paths`, each file its own experiment (with `config_files`/`overrides` on top).

    A file that does not parse is a finding (SC001); a path that cannot be read at all goes to `.errors`.
    Raises ConfigError for a malformed override or an unreadable `config_files` entry.
    """
    check_overrides(overrides)  # a malformed override is one error, not one per file
    files, errors = expand_paths(paths)
    st = _settings(settings, Path(paths[0]) if paths else None, profile, select, ignore)
    extra_docs = [load_document(f) for f in config_files]
    run = LintRun(errors=list(errors))
    work = [str(f) for f in files]
    from packcfg.lint.parallel import map_files  # a small pool only for large batches

    for name, outcome in map_files(
        _lint_one, work, extra_docs, list(overrides), st, pack_metadata, check_paths, jobs=jobs
    ):
        if isinstance(outcome, str):
            run.errors.append(outcome)
            continue
        run.files.append(name)
        run.diagnostics.extend(outcome.diagnostics)
        run.internal_errors.extend(outcome.internal_errors)
        run.rules_ran += outcome.rules_ran
    run.diagnostics.sort(key=Diagnostic.sort_key)
    return run


def _lint_one(
    name: str,
    extra_docs: list[YamlDocument],
    overrides: list[str],
    settings: Settings,
    pack_metadata: list[dict[str, Any]] | None,
    check_paths: bool,
) -> _Outcome | str:
    """One file of a batch: its outcome, or a one-line error when it cannot be read."""
    try:
        doc = load_document(name)
        located = merge_documents([doc, *extra_docs], overrides)
    except ConfigError as exc:
        return str(exc)
    return _lint(located, settings, pack_metadata, check_paths, _stderr)
