"""Regenerate packcfg/core/bridge_fields.json: the field names Megatron Bridge accepts, per config section.

The table is read from a pinned source snapshot, the PyPI wheels of megatron-bridge and megatron-core
(wheels are zip files: nothing is installed or imported, so this runs on any Python and any platform).
Each config dataclass is read with `ast`: `ConfigContainer` in `megatron/bridge/training/config.py` names
the sections; a section's fields are the dataclass fields of the classes its annotation names (through
`Optional`/`Union`/`|`) and of every subclass of those classes found in the snapshot (every model provider,
every dataset provider), with inherited fields followed through imports and re-exports into
megatron-core and megatron.training. One level of nested dataclass fields is recorded too
(`dataset.offline_packing_specs`, `model.transformer`, ...).

Fields present in the legacy snapshot (Bridge 0.3.1 + megatron-core 0.16.1, what `[oracle]` installs) and
gone from the current one are recorded separately: the `legacy` profile still knows them.

    python scripts/gen_bridge_fields.py --download   # fetch the four pinned wheels into the cache
    python scripts/gen_bridge_fields.py              # rewrite packcfg/core/bridge_fields.json
    python scripts/gen_bridge_fields.py --check      # exit 1 when the committed table is stale

The wheel cache is $PACKCFG_BRIDGE_WHEELS, else ~/.cache/packcfg/bridge-wheels.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "packcfg" / "core" / "bridge_fields.json"
SCRIPT = "scripts/bridge_data/fields.py"

# The pinned snapshots. `current`: the newest megatron-bridge on PyPI and the newest megatron-core
# (Bridge 0.6.2 requires megatron-core without an upper bound). `legacy`: what runs on Python 3.11
# beside the project's megatron-core (shared/spec/environment.md, "Megatron Bridge on CPU").
PINS: dict[str, dict[str, str]] = {
    "current": {"megatron-bridge": "0.6.2", "megatron-core": "0.19.2"},
    "legacy": {"megatron-bridge": "0.3.1", "megatron-core": "0.16.1"},
}
# The exact wheel files (megatron-core ships CPython 3.12 x86-64 wheels only; they are only unzipped here).
WHEELS: dict[tuple[str, str], tuple[str, str]] = {
    ("megatron-bridge", "0.6.2"): (
        "megatron_bridge-0.6.2-py3-none-any.whl",
        "bcb7274ab9327167c345aa24b96b95790ce5090df1945d883bdc41065d5649e2",
    ),
    ("megatron-core", "0.19.2"): (
        "megatron_core-0.19.2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "8e3e486f13f559450415b9b9dc0ff3331a0bb83dd154553f7f350a75ff9c42b5",
    ),
    ("megatron-bridge", "0.3.1"): (
        "megatron_bridge-0.3.1-py3-none-any.whl",
        "4d9a9ad679bd927a84f923e5239512d72af7fa47331b749a8f275592c2920616",
    ),
    ("megatron-core", "0.16.1"): (
        "megatron_core-0.16.1-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "3fb26cb407aa3c4b609c08664022c08146f1648b3d6f2ef2bbe9d3b1294ace61",
    ),
}
# The pip options that select those files from any machine (the wheels are read, never installed).
PIP_PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    "--abi",
    "cp312",
    "--platform",
    "manylinux_2_28_x86_64",
]
CONTAINER = ("megatron.bridge.training.config", "ConfigContainer")
# Only these packages are read from the wheels (megatron-core also ships megatron.training in 0.17+).
PACKAGES = ("megatron/bridge/", "megatron/core/", "megatron/training/")
# Nested blocks whose fields count as fields of the enclosing section (rules.md rev 3, builder-backed dumps).
FLATTENED = (("model", "transformer"),)


class SnapshotError(Exception):
    """The pinned snapshot is missing or is not what the pins name."""


def wheel_dir() -> Path:
    env = os.environ.get("PACKCFG_BRIDGE_WHEELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "packcfg" / "bridge-wheels"


def download_command(dist: str, version: str, dest: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        *PIP_PLATFORM,
        "-d",
        str(dest),
        f"{dist}=={version}",
    ]


def download(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for profile in PINS.values():
        for dist, version in profile.items():
            name, _ = WHEELS[(dist, version)]
            if (dest / name).is_file():
                continue
            subprocess.run(download_command(dist, version, dest), check=True)


def wheel_path(dest: Path, dist: str, version: str) -> Path:
    """The pinned wheel in `dest`, its sha256 checked."""
    name, sha = WHEELS[(dist, version)]
    path = dest / name
    if not path.is_file():
        raise SnapshotError(f"{path} is missing; run: python scripts/gen_bridge_fields.py --download")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha:
        raise SnapshotError(f"{path}: sha256 {digest} is not the pinned {sha}")
    return path


# --- the source snapshot ---------------------------------------------------------------------------


class SourceTree:
    """Python modules by dotted name (from wheels or, in tests, from a dict of sources)."""

    def __init__(self, sources: dict[str, str], packages: Iterable[str] = ()) -> None:
        self.sources = sources
        self.packages = set(packages)

    @classmethod
    def from_files(cls, files: dict[str, str]) -> SourceTree:
        """`files`: relative paths ("a/b/__init__.py", "a/b/c.py") -> source."""
        sources: dict[str, str] = {}
        packages: set[str] = set()
        for rel, text in files.items():
            mod = rel[: -len(".py")].replace("/", ".")
            if mod.endswith(".__init__"):
                mod = mod[: -len(".__init__")]
                packages.add(mod)
            sources[mod] = text
        # namespace packages (megatron/ has no __init__ in megatron-core wheels)
        for mod in list(sources):
            parts = mod.split(".")
            for i in range(1, len(parts)):
                packages.add(".".join(parts[:i]))
        return cls(sources, packages)

    @classmethod
    def from_wheels(cls, paths: Iterable[Path]) -> SourceTree:
        files: dict[str, str] = {}
        for path in paths:
            with zipfile.ZipFile(path) as zf:
                for name in zf.namelist():
                    if name.endswith(".py") and name.startswith(PACKAGES):
                        files[name] = zf.read(name).decode("utf-8", errors="replace")
        return cls.from_files(files)


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class ModuleRef:
    module: str


@dataclass
class _Module:
    name: str
    is_package: bool
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    # local name -> ("module", dotted) | ("from", dotted module, attribute)
    imports: dict[str, tuple[str, ...]] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)  # NAME = <expr> at module level
    star: list[str] = field(default_factory=list)


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, looking into `if`/`try` blocks (TYPE_CHECKING, optional imports)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
        else:
            yield node


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name) and target.id == "dataclass":
            return True
        if isinstance(target, ast.Attribute) and target.attr == "dataclass":
            return True
    return False


def _annotation_root(ann: ast.expr) -> str | None:
    """The outermost name of an annotation (`ClassVar` for `ClassVar[int]`, also inside strings)."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(ann, ast.Subscript):
        ann = ann.value
    if isinstance(ann, ast.Name):
        return ann.id
    if isinstance(ann, ast.Attribute):
        return ann.attr
    return None


_NOT_FIELDS = {"ClassVar", "InitVar", "KW_ONLY"}
# Text patterns for the subclass search's first pass (the AST decides; these only pick modules to parse).
_CLASS_HEADER = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.MULTILINE)
_ALIAS = re.compile(r"\b([A-Za-z_]\w*)[ \t]+as[ \t]+([A-Za-z_]\w*)")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)[ \t]*=[ \t]*([A-Za-z_][\w.]*)[ \t]*$", re.MULTILINE)


def own_fields(node: ast.ClassDef) -> list[tuple[str, ast.expr]]:
    """A dataclass body's own fields in order: annotated names that are not ClassVar/InitVar/KW_ONLY."""
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if _annotation_root(stmt.annotation) in _NOT_FIELDS:
                continue
            out.append((stmt.target.id, stmt.annotation))
    return out


def init_params(node: ast.ClassDef) -> list[tuple[str, ast.expr]]:
    """Named parameters of a class's own `__init__` (GPTFIMDatasetConfig takes its fields so)."""
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            args = stmt.args
            named = [*args.posonlyargs, *args.args, *args.kwonlyargs][1:]  # drop self
            return [(a.arg, a.annotation or ast.Constant(None)) for a in named]
    return []


class ClassIndex:
    """Resolves names across the snapshot's modules and reads dataclass fields, all from source."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._modules: dict[str, _Module | None] = {}
        self._bases: dict[ClassRef, list[ClassRef]] = {}
        self._fields: dict[ClassRef, dict[str, tuple[ClassRef, ast.expr]]] = {}
        self._subclasses: dict[frozenset[ClassRef], set[ClassRef]] = {}
        self._index: dict[str, set[str]] | None = None

    # -- modules ----------------------------------------------------------------------------------
    def module(self, name: str) -> _Module | None:
        if name in self._modules:
            return self._modules[name]
        text = self.tree.sources.get(name)
        if text is None:
            self._modules[name] = None
            return None
        try:
            body = ast.parse(text).body
        except SyntaxError:
            body = []
        mod = _Module(name, name in self.tree.packages)
        for node in _top_level(body):
            if isinstance(node, ast.ClassDef):
                mod.classes.setdefault(node.name, node)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        mod.imports.setdefault(alias.asname, ("module", alias.name))
                    else:  # `import a.b` binds `a`
                        top = alias.name.split(".")[0]
                        mod.imports.setdefault(top, ("module", top))
            elif isinstance(node, ast.ImportFrom):
                source = self._absolute(mod, node.module, node.level)
                for alias in node.names:
                    if alias.name == "*":
                        mod.star.append(source)
                    else:
                        mod.imports.setdefault(alias.asname or alias.name, ("from", source, alias.name))
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                if isinstance(node.value, ast.Name | ast.Attribute):
                    mod.aliases.setdefault(node.targets[0].id, node.value)
        self._modules[name] = mod
        return mod

    @staticmethod
    def _absolute(mod: _Module, module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        parts = mod.name.split(".")
        base = parts if mod.is_package else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join([*base, module] if module else base)

    # -- names ------------------------------------------------------------------------------------
    def resolve(self, module: str, name: str, _seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
        """What `name` means in `module`: a ClassRef, a ModuleRef, or None (outside the snapshot)."""
        if (module, name) in _seen or len(_seen) > 50:
            return None
        seen = _seen | {(module, name)}
        mod = self.module(module)
        if mod is None:
            sub = f"{module}.{name}"
            return ModuleRef(sub) if sub in self.tree.sources or sub in self.tree.packages else None
        if name in mod.classes:
            return ClassRef(module, name)
        if name in mod.imports:
            imp = mod.imports[name]
            if imp[0] == "module":
                return ModuleRef(imp[1])
            source, attr = imp[1], imp[2]
            sub = f"{source}.{attr}"
            if sub in self.tree.sources or sub in self.tree.packages:
                return ModuleRef(sub)
            return self.resolve(source, attr, seen)
        if name in mod.aliases:
            return self.resolve_expr(module, mod.aliases[name], seen)
        for star in mod.star:
            found = self.resolve(star, name, seen)
            if found is not None:
                return found
        sub = f"{module}.{name}"
        if sub in self.tree.sources or sub in self.tree.packages:
            return ModuleRef(sub)
        return None

    def resolve_expr(
        self, module: str, expr: ast.expr, _seen: frozenset[tuple[str, str]] = frozenset()
    ) -> Any:
        if isinstance(expr, ast.Name):
            return self.resolve(module, expr.id, _seen)
        if isinstance(expr, ast.Attribute):
            base = self.resolve_expr(module, expr.value, _seen)
            if isinstance(base, ModuleRef):
                return self.resolve(base.module, expr.attr, _seen)
            return None
        if isinstance(expr, ast.Subscript):  # Generic[T], ModelProviderMixin[GPTModel]
            return self.resolve_expr(module, expr.value, _seen)
        return None

    # -- classes ----------------------------------------------------------------------------------
    def classdef(self, ref: ClassRef) -> ast.ClassDef:
        mod = self.module(ref.module)
        assert mod is not None
        return mod.classes[ref.name]

    def bases(self, ref: ClassRef) -> list[ClassRef]:
        if ref not in self._bases:
            out = []
            for base in self.classdef(ref).bases:
                found = self.resolve_expr(ref.module, base)
                if isinstance(found, ClassRef):
                    out.append(found)
            self._bases[ref] = out
        return self._bases[ref]

    def mro(self, ref: ClassRef) -> list[ClassRef]:
        """The class and its ancestors inside the snapshot (C3 order is not needed for a set of names)."""
        out: list[ClassRef] = []
        stack = [ref]
        while stack:
            cur = stack.pop()
            if cur in out:
                continue
            out.append(cur)
            stack.extend(reversed(self.bases(cur)))
        return out

    def fields(self, ref: ClassRef) -> dict[str, tuple[ClassRef, ast.expr]]:
        """Dataclass fields of `ref` (inherited included): name -> (declaring class, annotation)."""
        if ref in self._fields:
            return self._fields[ref]
        out: dict[str, tuple[ClassRef, ast.expr]] = {}
        self._fields[ref] = out
        for cls in reversed(self.mro(ref)):
            node = self.classdef(cls)
            if _is_dataclass(node):
                for name, ann in own_fields(node):
                    out[name] = (cls, ann)
            for name, ann in init_params(node):  # a hand-written __init__ (dataclass keeps it)
                out.setdefault(name, (cls, ann))
        return out

    def annotation_classes(self, module: str, ann: ast.expr) -> list[ClassRef]:
        """Classes an annotation names directly: X, Optional[X], Union[X, Y], X | Y, "X" (not list[X])."""
        if isinstance(ann, ast.Constant):
            if not isinstance(ann.value, str):
                return []
            try:
                return self.annotation_classes(module, ast.parse(ann.value, mode="eval").body)
            except SyntaxError:
                return []
        if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
            return self.annotation_classes(module, ann.left) + self.annotation_classes(module, ann.right)
        if isinstance(ann, ast.Subscript):
            root = _annotation_root(ann)
            if root in ("Optional", "Union"):
                inner = ann.slice
                items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
                return [c for item in items for c in self.annotation_classes(module, item)]
            return []
        found = self.resolve_expr(module, ann)
        return [found] if isinstance(found, ClassRef) and _is_dataclass_like(self, found) else []

    def _mentions(self) -> dict[str, set[str]]:
        """class name -> modules that may derive a class from it (built once, from text alone).

        A module counts for a name when the name is in one of its class headers' base lists, or is bound
        (`import X as Y`, `Y = X`) to a name that is: only those modules need parsing."""
        if self._index is None:
            self._index = {}
            word = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
            for module, text in self.tree.sources.items():
                tokens = {t for m in _CLASS_HEADER.finditer(text) for t in word.findall(m.group(1))}
                if not tokens:
                    continue
                for m in _ALIAS.finditer(text):
                    if m.group(2) in tokens:
                        tokens.add(m.group(1))
                for m in _ASSIGN.finditer(text):
                    if m.group(1) in tokens:
                        tokens.add(m.group(2).rsplit(".", 1)[-1])
                for name in tokens:
                    self._index.setdefault(name, set()).add(module)
        return self._index

    def subclasses(self, roots: Iterable[ClassRef]) -> set[ClassRef]:
        """`roots` and every class in the snapshot that derives from one of them."""
        key = frozenset(roots)
        if key in self._subclasses:
            return self._subclasses[key]
        closure = set(key)
        new = set(key)
        while new:
            # A class that derives from a newly added class names it in its module (in the base list
            # or in the import that binds it): only those modules are parsed.
            modules = sorted(set().union(*(self._mentions().get(c.name, ()) for c in new)))
            new = set()
            for module in modules:
                mod = self.module(module)
                if mod is None:
                    continue
                for cname in mod.classes:
                    ref = ClassRef(module, cname)
                    if ref not in closure and any(b in closure for b in self.bases(ref)):
                        closure.add(ref)
                        new.add(ref)
        self._subclasses[key] = closure
        return closure


def _is_dataclass_like(index: ClassIndex, ref: ClassRef) -> bool:
    return any(_is_dataclass(index.classdef(c)) for c in index.mro(ref))


# --- the table -------------------------------------------------------------------------------------


def read_sections(index: ClassIndex) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(sections, nested) read from ConfigContainer: section -> field names, "section.field" -> names."""
    container = index.resolve(*CONTAINER)
    if not isinstance(container, ClassRef):
        raise SnapshotError(f"{'.'.join(CONTAINER)} is not in the snapshot")
    sections: dict[str, set[str]] = {"top": set()}
    nested: dict[str, set[str]] = {}
    for name, (owner, ann) in index.fields(container).items():
        sections["top"].add(name)
        roots = index.annotation_classes(owner.module, ann)
        if not roots:
            continue
        members = sections.setdefault(name, set())
        for cls in sorted(index.subclasses(roots), key=lambda c: c.qualname):
            for fname, (fowner, fann) in index.fields(cls).items():
                members.add(fname)
                inner = index.annotation_classes(fowner.module, fann)
                if inner:
                    bucket = nested.setdefault(f"{name}.{fname}", set())
                    for sub in index.subclasses(inner):
                        bucket.update(index.fields(sub))
    # Builder-backed model configs nest the transformer fields (`model.transformer.num_layers`); Bridge's
    # readers (and packcfg's) take them as `model` fields, so the `model` section knows those names too.
    for section, inner in FLATTENED:
        sections.setdefault(section, set()).update(nested.get(f"{section}.{inner}", set()))
    return sections, nested


def read_snapshot(paths: Iterable[Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    return read_sections(ClassIndex(SourceTree.from_wheels(paths)))


def _sorted(table: dict[str, set[str]]) -> dict[str, list[str]]:
    return {k: sorted(v) for k, v in sorted(table.items(), key=lambda kv: (kv[0] != "top", kv[0])) if v}


def build_document(
    current: tuple[dict[str, set[str]], dict[str, set[str]]],
    legacy: tuple[dict[str, set[str]], dict[str, set[str]]],
) -> dict[str, Any]:
    sections, nested = current
    old_sections, old_nested = legacy
    removed = {k: v - sections.get(k, set()) for k, v in old_sections.items()}
    removed_nested = {k: v - nested.get(k, set()) for k, v in old_nested.items()}

    def origin(profile: str) -> dict[str, Any]:
        pins = PINS[profile]
        return {
            **pins,
            "wheels": {WHEELS[(d, v)][0]: WHEELS[(d, v)][1] for d, v in pins.items()},
        }

    return {
        "_comment": (
            "Generated by scripts/bridge_data/fields.py from the pinned wheels named below; do not edit "
            "(regenerate: python scripts/gen_bridge_fields.py). Names only: packcfg/core/schema.py types "
            "the fields the rules read. `sections`: the fields of each ConfigContainer section (every "
            "subclass of the section's classes included); `nested`: one level of nested dataclass fields; "
            "`legacy`: fields of the legacy snapshot that the current one lacks (known under the legacy profile)."
        ),
        "generated_from": {**origin("current"), "script": SCRIPT},
        "sections": _sorted(sections),
        "nested": _sorted(nested),
        "legacy": {
            "generated_from": origin("legacy"),
            "sections": _sorted(removed),
            "nested": _sorted(removed_nested),
        },
    }


def generate(dest: Path | None = None) -> dict[str, Any]:
    """The whole document from the pinned wheels in `dest` (default: the wheel cache)."""
    dest = dest or wheel_dir()

    def snapshot(profile: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
        pins = PINS[profile]
        return read_snapshot(wheel_path(dest, d, v) for d, v in pins.items())

    return build_document(snapshot("current"), snapshot("legacy"))


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gen_bridge_fields", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheels", type=Path, help="wheel cache (default: $PACKCFG_BRIDGE_WHEELS or ~/.cache/...)"
    )
    parser.add_argument("--download", action="store_true", help="pip download the pinned wheels first")
    parser.add_argument("--download-only", action="store_true", help="only download the pinned wheels")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    dest = args.wheels or wheel_dir()
    try:
        if args.download or args.download_only:
            download(dest)
            if args.download_only:
                return 0
        text = render(generate(dest))
    except (SnapshotError, subprocess.CalledProcessError) as exc:
        print(f"gen_bridge_fields: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is stale; run: python scripts/gen_bridge_fields.py", file=sys.stderr)
            return 1
        print(f"{args.output} matches the pinned snapshot")
        return 0
    sys.path.insert(0, str(REPO))
    from packcfg.core.atomic import atomic_write_text

    atomic_write_text(args.output, text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
