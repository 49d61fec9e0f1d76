"""The known-field table: generated from a pinned Megatron Bridge + Megatron Core snapshot, read with `ast`.

- the committed packcfg/core/bridge_fields.json equals what scripts/bridge_data/fields.py generates from the
  pinned wheels (skipped without the wheel cache, except under CI=true where it fails);
- the ast reader on small synthetic sources (dataclass fields, inheritance through imports and re-exports,
  subclasses, annotations, hand-written __init__);
- the schema reads the table: current fields known, removed fields known only under the legacy profile.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from packcfg.core import schema
from packcfg.core.diagnostics import Severity

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bridge_data" / "fields.py"
TABLE = REPO / "packcfg" / "core" / "bridge_fields.json"


def _load_script():
    spec = importlib.util.spec_from_file_location("packcfg_gen_bridge_fields", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fields = _load_script()


# --- the committed table against the pinned snapshot ------------------------------------------------


def _wheels_or_skip() -> Path:
    dest = fields.wheel_dir()
    missing = [
        fields.WHEELS[(d, v)][0]
        for pins in fields.PINS.values()
        for d, v in pins.items()
        if not (dest / fields.WHEELS[(d, v)][0]).is_file()
    ]
    if missing:
        reason = (
            f"pinned wheels missing in {dest} ({', '.join(missing)}); "
            "run: python scripts/gen_bridge_fields.py --download-only"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return dest


def test_committed_table_matches_the_pinned_snapshot() -> None:
    dest = _wheels_or_skip()
    generated = fields.render(fields.generate(dest))
    committed = TABLE.read_text(encoding="utf-8")
    if generated != committed:
        want, have = json.loads(generated), json.loads(committed)
        diffs = []
        for part in ("sections", "nested"):
            for key in sorted(set(want[part]) | set(have[part])):
                extra = sorted(set(have[part].get(key, ())) - set(want[part].get(key, ())))[:5]
                lost = sorted(set(want[part].get(key, ())) - set(have[part].get(key, ())))[:5]
                if extra or lost:
                    diffs.append(f"{part}.{key}: not in snapshot {extra}, missing {lost}")
        pytest.fail(
            "packcfg/core/bridge_fields.json differs from the pinned snapshot; "
            "run python scripts/gen_bridge_fields.py\n" + "\n".join(diffs[:20])
        )


def test_table_records_the_snapshot_it_came_from() -> None:
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    origin = data["generated_from"]
    assert origin["megatron-bridge"] == fields.PINS["current"]["megatron-bridge"]
    assert origin["megatron-core"] == fields.PINS["current"]["megatron-core"]
    assert origin["script"] == "scripts/bridge_data/fields.py"
    assert set(origin["wheels"].values()) == {
        fields.WHEELS[(d, v)][1] for d, v in fields.PINS["current"].items()
    }
    legacy = data["legacy"]["generated_from"]
    assert (legacy["megatron-bridge"], legacy["megatron-core"]) == ("0.3.1", "0.16.1")


def test_wrong_wheel_bytes_are_refused(tmp_path: Path) -> None:
    name, _ = fields.WHEELS[("megatron-bridge", "0.6.2")]
    (tmp_path / name).write_bytes(b"not the pinned wheel")
    with pytest.raises(fields.SnapshotError, match="sha256"):
        fields.wheel_path(tmp_path, "megatron-bridge", "0.6.2")
    with pytest.raises(fields.SnapshotError, match="--download"):
        fields.wheel_path(tmp_path, "megatron-core", "0.19.2")


def test_download_command_fetches_exactly_the_pinned_files(tmp_path: Path) -> None:
    cmd = fields.download_command("megatron-core", "0.19.2", tmp_path)
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
    assert cmd[-1] == "megatron-core==0.19.2" and str(tmp_path) in cmd
    # the cp312 manylinux wheel is selected on any machine (it is only unzipped)
    assert "--platform" in cmd and "cp312" in cmd


# --- the ast reader on synthetic sources ---------------------------------------------------------


def _index(files: dict[str, str]):
    tree = fields.SourceTree.from_files({k: textwrap.dedent(v) for k, v in files.items()})
    return fields.ClassIndex(tree)


CORE = {
    "core/__init__.py": "",
    "core/config/__init__.py": "from .base import BaseConfig as BaseConfig\n",
    "core/config/base.py": """
        from dataclasses import dataclass, field
        from typing import ClassVar
        from dataclasses import InitVar

        @dataclass
        class BaseConfig:
            num_layers: int = 2
            hidden_size: "int" = 8
            registry: ClassVar[dict] = {}
            seed: InitVar[int] = 0
            def method(self) -> None:
                local_var: int = 3
    """,
    "core/plain.py": """
        class Mixin:
            not_a_field: int = 1
    """,
}


def test_fields_follow_imports_reexports_and_relative_imports() -> None:
    idx = _index(
        {
            **CORE,
            "app/__init__.py": "",
            "app/model.py": """
                import dataclasses
                from core.config import BaseConfig as MCoreBase
                from core.plain import Mixin

                @dataclasses.dataclass(kw_only=True)
                class Provider(MCoreBase, Mixin):
                    seq_length: int = 1024
                    builder: "ClassVar[str]" = "x"
            """,
        }
    )
    ref = idx.resolve("app.model", "Provider")
    assert ref == fields.ClassRef("app.model", "Provider")
    # inherited through a package re-export and an alias; ClassVar/InitVar/locals/plain mixins excluded
    assert set(idx.fields(ref)) == {"num_layers", "hidden_size", "seq_length"}


def test_subclasses_anywhere_in_the_snapshot_are_found() -> None:
    idx = _index(
        {
            **CORE,
            "app/__init__.py": "from app.providers.a import AProvider\n",
            "app/providers/__init__.py": "",
            "app/providers/a.py": """
                from dataclasses import dataclass
                from core.config.base import BaseConfig

                @dataclass
                class AProvider(BaseConfig):
                    a_only: bool = False
            """,
            "app/providers/b.py": """
                from dataclasses import dataclass
                from ..providers import a as amod

                class Intermediate(amod.AProvider):  # not a dataclass: adds no fields
                    ignored: int = 0

                @dataclass
                class BProvider(Intermediate):
                    b_only: int = 1
            """,
            "app/providers/c.py": """
                from dataclasses import dataclass
                import core.config.base
                Base = core.config.base.BaseConfig

                @dataclass
                class CProvider(Base):
                    c_only: int = 0
            """,
            "app/unrelated.py": """
                from dataclasses import dataclass
                @dataclass
                class Other:
                    other_field: int = 0
            """,
        }
    )
    base = fields.ClassRef("core.config.base", "BaseConfig")
    names = {c.name for c in idx.subclasses([base])}
    assert names == {"BaseConfig", "AProvider", "Intermediate", "BProvider", "CProvider"}
    assert set(idx.fields(fields.ClassRef("app.providers.b", "BProvider"))) == {
        "num_layers",
        "hidden_size",
        "a_only",
        "b_only",
    }


def test_sections_from_the_container_annotations() -> None:
    idx = _index(
        {
            **CORE,
            "megatron/bridge/__init__.py": "",
            "megatron/bridge/training/__init__.py": "",
            "megatron/bridge/training/config.py": """
                from dataclasses import dataclass, field
                from typing import Optional, Union
                from core.config import BaseConfig

                @dataclass
                class Specs:
                    packed_sequence_size: int = -1

                @dataclass
                class DataA:
                    seq_length: int = 0
                    offline_packing_specs: Optional[Specs] = None

                @dataclass
                class DataB:
                    path: str = ""

                    def __init__(self, path: str = "", fim_rate: float = 0.0, **kwargs):
                        self.path = path

                @dataclass
                class DataC(DataA):
                    hf_dataset: "Specs | None" = None

                @dataclass(kw_only=True)
                class ConfigContainer:
                    env_vars: dict[str, str] = field(default_factory=dict)
                    model: BaseConfig
                    dataset: DataA | Union[DataB, None]
                    mixed_precision: Optional[Union[str, DataB]] = None
                    names: list[DataB] = field(default_factory=list)
            """,
        }
    )
    sections, nested = fields.read_sections(idx)
    assert sections["top"] == {"env_vars", "model", "dataset", "mixed_precision", "names"}
    assert sections["model"] == {"num_layers", "hidden_size"}
    # union over the annotated classes and their subclasses; a hand-written __init__ counts
    assert sections["dataset"] == {"seq_length", "offline_packing_specs", "path", "fim_rate", "hf_dataset"}
    assert sections["mixed_precision"] == {"path", "fim_rate"}
    assert "names" not in sections and "env_vars" not in sections  # list[...] / dict: no section
    assert nested["dataset.offline_packing_specs"] == {"packed_sequence_size"}
    assert nested["dataset.hf_dataset"] == {"packed_sequence_size"}


def test_legacy_part_lists_only_what_the_current_snapshot_lost() -> None:
    current = ({"top": {"model"}, "model": {"a", "b"}}, {"dataset.offline_packing_specs": {"x"}})
    legacy = ({"top": {"model", "old_top"}, "model": {"a", "gone"}}, {"dataset.packed_sequence_specs": {"x"}})
    doc = fields.build_document(current, legacy)
    assert doc["sections"] == {"top": ["model"], "model": ["a", "b"]}
    assert doc["legacy"]["sections"] == {"top": ["old_top"], "model": ["gone"]}
    assert doc["legacy"]["generated_from"]["megatron-bridge"] == "0.3.1"
    assert doc["generated_from"]["script"] == "scripts/bridge_data/fields.py"


# --- the schema reads the generated table -------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("dataset", "hf_dataset"),
        ("dataset", "hf_validation_proportion"),
        ("model", "vision_cuda_graph_impl"),
        ("model", "hybrid_layer_pattern"),
        ("top", "env_vars"),
        ("train", "num_epochs"),
        ("dataset", "packing_buffer_size"),
        ("offline_packing_specs", "pad_cu_seqlens"),
    ],
)
def test_current_bridge_fields_are_known(section: str, key: str) -> None:
    assert key in schema.known_fields("current")[section]


def _sc003(config: dict, profile: str = "current") -> list:
    return [i for i in schema.validate(config, profile) if i.code == "SC003"]


def test_current_fields_draw_no_unknown_key() -> None:
    config = {
        "env_vars": {"NCCL_DEBUG": "INFO"},
        "train": {"num_epochs": 2},
        "model": {"vision_cuda_graph_impl": "none", "hybrid_layer_pattern": "M-M*"},
        "dataset": {"hf_dataset": {"path": "rajpurkar/squad"}, "hf_validation_proportion": 0.05},
    }
    assert _sc003(config) == []


def test_removed_field_is_known_only_under_the_legacy_profile() -> None:
    # `dataset_name` was a FinetuningDatasetConfig/HFDatasetConfig field in Bridge 0.3.1, gone in 0.6.2
    removed, old, new = schema.removed_fields()
    assert "dataset_name" in removed["dataset"] and (old, new) == ("0.3.1", "0.6.2")
    config = {"dataset": {"dataset_name": "rajpurkar/squad", "seq_length": 2048}}
    issues = _sc003(config)
    assert len(issues) == 1 and issues[0].severity is Severity.WARNING
    assert "0.3.1" in issues[0].message and "legacy profile" in issues[0].message
    assert _sc003(config, "legacy") == []


def test_typed_and_unknown_fields_still_checked() -> None:
    config = {"model": {"tensr_model_parallel_size": 2}, "launch": {"nodez": 1}}
    issues = {i.path: i for i in _sc003(config)}
    assert issues[("model", "tensr_model_parallel_size")].severity is Severity.WARNING
    assert "tensor_model_parallel_size" in issues[("model", "tensr_model_parallel_size")].message
    assert issues[("launch", "nodez")].severity is Severity.ERROR


def test_shipped_recipes_name_classes_current_bridge_has() -> None:
    """Every `_target_` in recipes/ resolves to a class in the pinned current Bridge snapshot."""
    import yaml

    dest = _wheels_or_skip()
    paths = [fields.wheel_path(dest, d, v) for d, v in fields.PINS["current"].items()]
    idx = fields.ClassIndex(fields.SourceTree.from_wheels(paths))

    def targets(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_target_" and isinstance(v, str):
                    yield v
                else:
                    yield from targets(v)

    missing = []
    for recipe in sorted((REPO / "recipes").glob("*.yaml")):
        for target in targets(yaml.safe_load(recipe.read_text(encoding="utf-8"))):
            module, _, name = target.rpartition(".")
            if not isinstance(idx.resolve(module, name), fields.ClassRef):
                missing.append(f"{recipe.name}: {target}")
    assert missing == []


def test_lint_profile_reaches_the_known_fields() -> None:
    """`packcfg lint --profile legacy` (lint_text's profile) picks the legacy field set."""
    from packcfg.lint.engine import lint_text

    text = "dataset:\n  seq_length: 2048\n  maker_name: make_raven_dataset\n"
    current = [d for d in lint_text(text, "x.yaml") if d.code == "SC003"]
    assert [(d.line, d.path) for d in current] == [(3, "dataset.maker_name")]
    assert [d for d in lint_text(text, "x.yaml", profile="legacy") if d.code == "SC003"] == []
