"""The model-family table (`families.yaml`) and the lookups that name a config's family.

The table is data: a new family is one entry in `families.yaml`, never code here.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

InBatchSupport = Literal["supported", "rejected", "not_known_to_work"]

_TABLE = Path(__file__).with_name("families.yaml")


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    providers: tuple[str, ...] = ()
    hf_ids: tuple[str, ...] = ()
    offline_packing: bool = True
    in_batch: InBatchSupport = "supported"
    in_batch_ok_with_cp_deferral: bool = False
    packs_in_own_step: bool = False
    forces_local_attention: bool = False
    rope: bool = False
    moe: bool = False
    vlm: bool = False


@dataclass(frozen=True)
class FamilyTable:
    families: tuple[Family, ...]
    generic_providers: frozenset[str]

    def get(self, family_id: str) -> Family | None:
        for fam in self.families:
            if fam.id == family_id:
                return fam
        return None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(f.id for f in self.families)

    def from_provider(self, target: str) -> Family | None:
        """The family whose provider pattern matches the class name of `target` (a dotted path)."""
        cls = target.rsplit(".", 1)[-1].strip()
        if not cls or cls in self.generic_providers:
            return None
        return _most_specific(
            (fam, pat)
            for fam in self.families
            for pat in fam.providers
            if _provider_regex(pat).fullmatch(cls)
        )

    def from_hf_id(self, value: str) -> Family | None:
        """The family whose HF id glob matches `value` (an id like `Qwen/Qwen3-8B` or a path ending in one)."""
        text = value.strip().rstrip("/")
        parts = [p for p in text.split("/") if p]
        # A local path such as /models/meta-llama/Llama-3.1-8B ends in the HF id: try its last two parts.
        candidates = {text}
        if len(parts) >= 2:
            candidates.add("/".join(parts[-2:]))
        return _most_specific(
            (fam, pat)
            for fam in self.families
            for pat in fam.hf_ids
            if any(fnmatch.fnmatchcase(c.lower(), pat.lower()) for c in candidates)
        )


def _literal_weight(pattern: str) -> tuple[int, int]:
    """Specificity of a pattern: more literal characters first, then fewer wildcards."""
    wild = re.findall(r"\\[dw][*+]?|[*?+]", pattern)
    literal = len(pattern) - sum(len(w) for w in wild)
    return literal, -len(wild)


def _most_specific(matches: Any) -> Family | None:
    best: tuple[tuple[int, int], Family] | None = None
    for fam, pat in matches:
        weight = _literal_weight(pat)
        if best is None or weight > best[0]:
            best = (weight, fam)
    return best[1] if best else None


@cache
def _provider_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _family(entry: dict[str, Any]) -> Family:
    return Family(
        id=str(entry["id"]),
        name=str(entry.get("name", entry["id"])),
        providers=tuple(entry.get("providers", ())),
        hf_ids=tuple(entry.get("hf_ids", ())),
        offline_packing=bool(entry.get("offline_packing", True)),
        in_batch=entry.get("in_batch", "supported"),
        in_batch_ok_with_cp_deferral=bool(entry.get("in_batch_ok_with_cp_deferral", False)),
        packs_in_own_step=bool(entry.get("packs_in_own_step", False)),
        forces_local_attention=bool(entry.get("forces_local_attention", False)),
        rope=bool(entry.get("rope", False)),
        moe=bool(entry.get("moe", False)),
        vlm=bool(entry.get("vlm", False)),
    )


@lru_cache(maxsize=1)
def family_table() -> FamilyTable:
    """The table loaded once from `families.yaml`."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(_TABLE.read_text(encoding="utf-8"), Loader=loader)
    return FamilyTable(
        families=tuple(_family(e) for e in data["families"]),
        generic_providers=frozenset(data.get("generic_providers", ())),
    )
