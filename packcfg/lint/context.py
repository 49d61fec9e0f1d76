"""What a rule sees: the normalised config, derived facts, and where each value came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from packcfg.core.config import get_path
from packcfg.core.diagnostics import ConfigPath, Position

if TYPE_CHECKING:
    from packcfg.core.bridge_version import BridgeTarget
    from packcfg.lint.facts import Facts

_MISSING: Any = object()


class SourceMap(Protocol):
    """Positions of the keys of a merged config (built by the loader, with override provenance)."""

    def spelled(self, path: ConfigPath, *, skip: int = 0) -> str:
        """`path` dotted as the user spelled it (`skip` drops leading sections): messages name keys this way, so
        a file that says `packed_sequence_specs` never reads `offline_packing_specs` back."""
        return ".".join(self.written_path(path)[skip:])

    def position(self, path: ConfigPath) -> Position:
        """Where `path` was set; for a missing key, its nearest present parent section."""
        ...


@dataclass
class RuleContext:
    """Everything a rule may read. Rules never parse YAML or compute positions themselves."""

    config: dict[str, Any]  # normalised: legacy spellings mapped to current ones
    facts: Facts  # derived once: packing mode, CP/TP/SP, alignment multiple, family, ...
    sources: SourceMap
    profile: str = "current"  # "current" | "legacy"
    renamed: dict[ConfigPath, ConfigPath] = field(default_factory=dict)  # normalised path -> as written
    pack_metadata: list[dict[str, Any]] | None = None  # for PK131, when known
    schema_issues: list[Any] = field(default_factory=list)  # SchemaIssue from core.schema.validate
    check_paths: bool = False  # `lint --check-paths`: rules may look at the file system (DS704)
    bridge: BridgeTarget | None = None  # the target Megatron Bridge release (packcfg.core.bridge_version)

    @property
    def target(self) -> BridgeTarget:
        """The target Bridge release; unknown when the engine did not set one."""
        from packcfg.core.bridge_version import UNKNOWN

        return self.bridge if self.bridge is not None else UNKNOWN

    def has(self, path: ConfigPath) -> bool:
        return self.get(path, _MISSING) is not _MISSING

    def get(self, path: ConfigPath, default: Any = None) -> Any:
        """The value as written (after normalisation); `default` when absent. No schema defaults."""
        return get_path(self.config, path, default)

    def written_path(self, path: ConfigPath) -> ConfigPath:
        """The path as the user spelled it (a legacy key maps back to where it was written)."""
        return written_path(path, self.renamed)

    def spelled(self, path: ConfigPath, *, skip: int = 0) -> str:
        """`path` dotted as the user spelled it (`skip` drops leading sections): messages name keys this way, so
        a file that says `packed_sequence_specs` never reads `offline_packing_specs` back."""
        return ".".join(self.written_path(path)[skip:])

    def position(self, path: ConfigPath) -> Position:
        return self.sources.position(self.written_path(path))


def written_path(path: ConfigPath, renamed: dict[ConfigPath, ConfigPath]) -> ConfigPath:
    """`path` (normalised) as the user spelled it, given `Normalized.renamed` (normalised -> as written)."""
    for i in range(len(path), 0, -1):
        if path[:i] in renamed:
            return renamed[path[:i]] + path[i:]
    return path
