"""The job bundle: the resolved config, the rendered scripts and a manifest, written as one folder.

Reproducibility: rendering the same resolved config gives the same bytes, wherever the bundle is
written. Nothing time-, host- or path-of-the-bundle-dependent goes into the files: scripts find their
bundle at run time (`dirname $0`, `$SLURM_SUBMIT_DIR`), the rendezvous id is `$SLURM_JOB_ID` (NeMo-Run
would put a random one), and the manifest's `created_at` is `SOURCE_DATE_EPOCH` when set, else null
for `packcfg render`; `packcfg launch` stamps the submission time (an event, not a render) into the
bundle it submits and into the job record.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packcfg import __version__
from packcfg.core.atomic import atomic_write_bytes
from packcfg.launch import LaunchError
from packcfg.launch.bridge import PATH_KEY
from packcfg.launch.spec import LaunchSpec, launch_spec

SCRIPTS = ("torchrun.sh", "sbatch.sh", "pack.sbatch.sh")
DRIVER = "nemo_run_driver.py"
LAUNCHER = "launchers/train.py"
MANIFEST_VERSION = 1
_PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the `packcfg` package folder


@dataclass(frozen=True)
class AllowedRule:
    """A lint error the user let through with `--allow CODE`: recorded with who and when."""

    code: str
    messages: tuple[str, ...]
    by: str
    at: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "findings": list(self.messages), "by": self.by, "at": self.at}


@dataclass
class JobBundle:
    """What `packcfg render` writes: file name -> bytes, plus the facts the backends need.

    `directory` is the folder the files were rendered for (`#SBATCH --chdir` names it), None before a
    folder is chosen; `write` re-renders for the folder it writes into."""

    config: dict[str, Any]
    config_hash: str
    spec: LaunchSpec
    files: dict[str, bytes]
    packed_data: str | None
    manifest: dict[str, Any] = field(default_factory=dict)
    directory: Path | None = None
    render_args: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def private(self) -> bool:
        """True when a file holds something from `launch.env` (or names variables it reads): the
        bundle is then readable by its owner only (files 0600, scripts 0700, a new folder 0700)."""
        return bool(self.spec.env or self.spec.env_from)

    def for_directory(self, directory: Path) -> JobBundle:
        """This bundle rendered for `directory` (absolute)."""
        if self.directory == directory or not self.render_args:
            return self
        return render_bundle(self.config, **{**self.render_args, "directory": directory})

    def write(self, directory: Path, *, force: bool = False, inputs: Sequence[str | Path] = ()) -> Path:
        """Write every file atomically into `directory` (created, with an empty `logs/`); returns it,
        absolute. Refused (LaunchError, nothing written) when the folder holds files that no earlier
        bundle of this experiment wrote, or a file that was changed since it was rendered, unless
        `force`; never over an input of the command (`inputs`), a special file or through a symlink."""
        from packcfg.core.atomic import OutputRefused, check_output, clean_stale_temps

        directory = directory.expanduser().resolve()
        final = self.for_directory(directory)
        self.files, self.manifest, self.directory = final.files, final.manifest, directory
        private = self.private
        try:
            if directory.exists() and not directory.is_dir():
                raise LaunchError(f"bundle folder {directory}: is not a folder")
            previous = _check_folder(directory, self, force=force)
            for name in sorted(self.files):
                check_output(
                    directory / name,
                    inputs=inputs,
                    force=force,
                    may_replace=lambda p, n=name: _unchanged(previous, n, p),
                    what="bundle file",
                )
            created = not directory.exists()
            directory.mkdir(parents=True, exist_ok=True)
            if created and private:
                os.chmod(directory, 0o700)
            (directory / "logs").mkdir(mode=0o700 if private else 0o777, exist_ok=True)
            # The manifest last: a folder with a manifest holds a complete bundle.
            for name, data in sorted(self.files.items(), key=lambda kv: (kv[0] == "manifest.json", kv[0])):
                path = directory / name
                clean_stale_temps(path.parent, path.name)
                executable = name.endswith(".sh") or name == DRIVER
                mode = (0o700 if executable else 0o600) if private else (0o755 if executable else 0o644)
                atomic_write_bytes(path, data, mode, inputs=inputs, force=True, what="bundle file")
            _remove_stale(directory, previous, self.files)
        except OutputRefused as exc:
            raise LaunchError(str(exc)) from None
        except OSError as exc:
            raise LaunchError(f"cannot write the job bundle to {directory}: {exc.strerror or exc}") from None
        return directory


def _sha256_file(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _previous_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest of a bundle rendered into `directory` before, or None (absent, unreadable, not one)."""
    path = directory / "manifest.json"
    try:
        if path.is_symlink() or not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    return data


def _check_folder(directory: Path, bundle: JobBundle, *, force: bool) -> dict[str, Any] | None:
    """Refuse a non-empty folder that holds no earlier bundle of this experiment (unless `force`);
    returns the earlier bundle's manifest when there is one."""
    try:
        entries = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    except OSError as exc:
        raise LaunchError(f"bundle folder {directory}: cannot list it ({exc.strerror or exc})") from None
    if not entries:
        return None
    previous = _previous_manifest(directory)
    if previous is not None and previous.get("recipe") == bundle.spec.job_name:
        return previous
    if force:
        return previous
    shown = ", ".join(entries[:4]) + (f" and {len(entries) - 4} more" if len(entries) > 4 else "")
    why = (
        f"holds the bundle of another experiment ({previous.get('recipe')})"
        if previous is not None
        else f"already holds files that packcfg did not write ({shown})"
    )
    raise LaunchError(
        f"bundle folder {directory}: {why}; render into a new or empty folder, or pass --force to "
        "write the bundle's files there anyway"
    )


def _unchanged(previous: dict[str, Any] | None, name: str, path: Path) -> bool:
    """True when `path` is the earlier bundle's own file `name`, unchanged since it was rendered."""
    if previous is None:
        return False
    if name == "manifest.json":
        return True  # the earlier bundle's own manifest (it was read as one)
    recorded = previous["files"].get(name)
    return isinstance(recorded, str) and recorded == _sha256_file(path)


def _remove_stale(directory: Path, previous: dict[str, Any] | None, files: Mapping[str, bytes]) -> None:
    """Remove the earlier bundle's files that this one does not have (e.g. a module of an older
    packcfg under lib/), when unchanged since they were rendered."""
    if previous is None:
        return
    for name in previous["files"]:
        if name in files or not isinstance(name, str) or name.startswith("/") or ".." in Path(name).parts:
            continue
        path = directory / name
        if path.is_file() and not path.is_symlink() and _unchanged(previous, name, path):
            path.unlink(missing_ok=True)


def current_user() -> str:
    for var in ("USER", "LOGNAME"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.getuid()}"


def source_date() -> str | None:
    """`SOURCE_DATE_EPOCH` (reproducible-builds convention) as ISO 8601 UTC, or None."""
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if not raw:
        return None
    try:
        return datetime.fromtimestamp(int(raw), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError):
        raise LaunchError(f"SOURCE_DATE_EPOCH={raw!r}: expected seconds since the epoch") from None


def now_utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def config_hash(config: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the resolved config (key order does not matter)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def git_commit(path: Path, *, toplevel: Path | None = None) -> str | None:
    """The commit of the git checkout holding `path`, or None when it is not in one (or, with
    `toplevel`, when the checkout's root is not that folder: an installed packcfg inside some other
    repository's virtualenv must not report that repository's commit)."""
    folder = path if path.is_dir() else path.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel", "--verify", "-q", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2:
        return None
    root, commit = lines
    if toplevel is not None and Path(root).resolve() != toplevel.resolve():
        return None
    return commit


def packed_data_path(config: Mapping[str, Any]) -> str | None:
    """The packed training file the job needs when the config packs offline (None otherwise).

    `@packcfg/...` names a bundled file and is made absolute; a relative path stays relative to the
    bundle, the job's working directory."""
    dataset = config.get("dataset")
    if not isinstance(dataset, Mapping):
        return None
    specs = dataset.get("offline_packing_specs")
    if dataset.get("enable_offline_packing") is False or not isinstance(specs, Mapping):
        return None
    path = specs.get("packed_train_data_path")
    if not path:
        return None
    text = str(path)
    from packcfg.resources import BUNDLED_PREFIX, resolve_path

    return str(resolve_path(text)) if text.startswith(BUNDLED_PREFIX) else text


def _pyrepr(value: Any) -> str:
    """A Python literal for the NeMo-Run driver; only plain data types (repr of these is safe)."""

    def check(v: Any) -> None:
        if v is None or isinstance(v, bool | int | float | str):
            return
        if isinstance(v, list | tuple):
            for item in v:
                check(item)
            return
        if isinstance(v, dict):
            for k, item in v.items():
                check(k)
                check(item)
            return
        raise LaunchError(f"internal: cannot render {type(v).__name__} into the NeMo-Run driver")

    check(value)
    return repr(value)


def _environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from packcfg.resources import bundled_dir

    env = Environment(
        loader=FileSystemLoader(str(bundled_dir("templates"))),
        undefined=StrictUndefined,  # a misspelt variable is an error, never an empty string
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda value: shlex.quote(str(value))
    env.filters["pyrepr"] = _pyrepr
    return env


def slurm_options(spec: LaunchSpec) -> dict[str, Any]:
    """The SlurmExecutor fields for the NeMo-Run driver (same request as sbatch.sh)."""
    options: dict[str, Any] = {}
    for key in ("partition", "account", "qos", "time"):
        value = getattr(spec, key)
        if value is not None:
            options[key] = value
    if spec.device == "gpu":
        options["gpus_per_node"] = spec.gpus_per_node
    else:
        options["cpus_per_task"] = spec.nproc_per_node
    if spec.exclusive:
        options["exclusive"] = True
    return options


_FILE_KEY = re.compile(r"(_path|_file|^path|^tokenizer_model)\Z")
_MOUNT_PATH = re.compile(r"/[A-Za-z0-9._/@+=-]*\Z")
_PATH_SECTIONS = ("dataset", "checkpoint", "tokenizer", "logger", "model", "peft", "validation")


def derived_mounts(config: Mapping[str, Any], spec: LaunchSpec) -> list[str]:
    """Container mounts for the absolute paths the config's data, checkpoint, tokenizer and logger
    settings name, each at its own path (`SRC:SRC`): the folder itself for a folder setting
    (`checkpoint.save`, `dataset.dataset_root`, `*_dir`), the parent folder for a file setting
    (`*_path`, `*_file`, `tokenizer.tokenizer_model`). Relative paths resolve inside the bundle (mounted
    already), `@packcfg/...` inside the bundle's copy of packcfg. Paths already under a `launch.mounts`
    destination, or under another derived mount, are left out."""
    if not spec.container_image:
        return []
    found: list[tuple[str, str]] = []

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, (*path, str(key)))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, str):
                    walk(value, (*path[:-1], path[-1]))  # a list of paths: the key of the list
                else:
                    walk(value, (*path, str(i)))
        elif isinstance(node, str) and path and PATH_KEY.search(path[-1]) and node.startswith("/"):
            folder = os.path.normpath(node)
            if _FILE_KEY.search(path[-1]):
                folder = os.path.dirname(folder) or "/"
            found.append((".".join(path), folder))

    for section in _PATH_SECTIONS:
        walk(config.get(section), (section,))
    user_targets = [m.split(":")[1] if ":" in m else m for m in spec.mounts]
    out: list[str] = []
    for key, folder in sorted(found, key=lambda kv: kv[1]):
        if folder == "/":
            raise LaunchError(
                f"{key}: a path directly under / cannot be mounted on its own; add launch.mounts"
            )
        if not _MOUNT_PATH.match(folder):
            raise LaunchError(
                f"{key} = {folder!r}: cannot be mounted into the container (only plain path characters); "
                "add a launch.mounts entry for it"
            )
        if any(folder == t or folder.startswith(t.rstrip("/") + "/") for t in user_targets):
            continue
        if any(folder == m.split(":")[0] or folder.startswith(m.split(":")[0] + "/") for m in out):
            continue
        out.append(f"{folder}:{folder}")
    return out


def anchored_paths(data: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """`data` with each relative path under a path key (as `derived_mounts` finds them) made absolute
    under `base`, the bundle folder. For NeMo-Run's SlurmExecutor, which starts every task in its own
    `<job dir>/code` folder (`srun --chdir`, or `--container-workdir /nemo_run/code` in a container;
    nemo_run 0.11.1 `core/execution/slurm.py`), where the bundle-relative paths local and Slurm jobs use
    would not resolve; the bundle is mounted at its own path, so the absolute ones do. A relative
    `tokenizer_model` stays as it is: it may be a Hugging Face model id."""

    def walk(node: Any, key: str, in_section: bool) -> Any:
        if isinstance(node, Mapping):
            return {str(k): walk(v, str(k), in_section) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, key, in_section) for v in node]
        if (
            in_section
            and isinstance(node, str)
            and node
            and PATH_KEY.search(key)
            and key != "tokenizer_model"
            and not node.startswith("/")
            and "://" not in node
        ):
            return str(base / node)
        return node

    return {str(k): walk(v, str(k), str(k) in _PATH_SECTIONS) for k, v in data.items()}


_BUNDLE_ENV = "PACKCFG_BUNDLE"


def _bundle_named(data: Any, directory: Path) -> Any:
    """`data` with the bundle-folder interpolation (packcfg.launch.bridge.BUNDLE_REF) replaced by the
    folder itself: a NeMo-Run task does not run the bundle's scripts that export it."""
    from packcfg.launch.bridge import BUNDLE_REF

    if isinstance(data, Mapping):
        return {k: _bundle_named(v, directory) for k, v in data.items()}
    if isinstance(data, list):
        return [_bundle_named(v, directory) for v in data]
    if isinstance(data, str) and BUNDLE_REF in data:
        return data.replace(BUNDLE_REF, str(directory))
    return data


def container_args(spec: LaunchSpec, mounts: Sequence[str] | None = None) -> list[str]:
    """srun's pyxis flags, each one shell word (quoted here); the bundle is mounted at its own path
    because the job runs from it."""
    if not spec.container_image:
        return []
    mounts = list(spec.mounts) if mounts is None else list(mounts)
    joined = shlex.quote(",".join(mounts) + ",") if mounts else ""
    return [
        f"--container-image={shlex.quote(spec.container_image)}",
        f'--container-mounts={joined}"$PWD:$PWD"',
        '--container-workdir="$PWD"',
    ]


# Characters an `#SBATCH --chdir=` value may hold (sbatch parses the line itself, no shell).
_CHDIR = re.compile(r"/[A-Za-z0-9._/+=@,:-]*\Z")
PACKCFG_LIB = "lib"
_SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".j2", ".typed")
_SOURCE_CACHE: dict[tuple[Any, ...], dict[str, bytes]] = {}


def packcfg_source() -> dict[str, bytes]:
    """The running packcfg package as bundle files `lib/packcfg/...`: its modules and package data (the
    sample data, the family table), byte for byte, sorted; no `__pycache__`, no `_bundled` (templates,
    recipes and launchers are rendered or copied into the bundle itself). The job puts `lib/` first
    on PYTHONPATH, so it runs exactly the packcfg that rendered it, installed on the node or not."""
    root = _PACKAGE_ROOT
    paths: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "_bundled") and not d.startswith("."))
        rel_folder = Path(folder).relative_to(root)
        in_data = rel_folder.parts[:1] == ("data",)
        for name in sorted(names):
            if name.startswith(".") or name.endswith((".pyc", ".pyo", ".tmp")):
                continue
            if in_data or name.endswith(_SOURCE_SUFFIXES):
                paths.append(Path(folder) / name)
    key = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in paths)
    cached = _SOURCE_CACHE.get(key)
    if cached is None:
        cached = {f"{PACKCFG_LIB}/packcfg/{p.relative_to(root).as_posix()}": p.read_bytes() for p in paths}
        _SOURCE_CACHE.clear()
        _SOURCE_CACHE[key] = cached
    return dict(cached)


def _redacted(override: str) -> str:
    """An override as the manifest records it: a `launch.env` value is never written there (names are,
    in the manifest's `env`)."""
    key, sep, _ = override.partition("=")
    bare = key.strip().lstrip("+~")
    if sep and (bare == "launch.env" or bare.startswith("launch.env.")):
        return f"{key}=<value not recorded>"
    return override


def render_bundle(
    config: dict[str, Any],
    *,
    sources: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    allowed: Sequence[AllowedRule] = (),
    lint_summary: Mapping[str, Any] | None = None,
    created_at: str | None = None,
    backend: str | None = None,
    directory: Path | None = None,
    engine: str | None = None,
) -> JobBundle:
    """Render every file of the bundle in memory (raises LaunchError on an unsafe or bad config).

    `directory`: the absolute folder the bundle is for (it goes into `#SBATCH --chdir`); None renders
    a preview whose Slurm scripts change into the submission folder instead."""
    import yaml
    from jinja2 import TemplateError

    from packcfg.resources import bundled_dir

    spec = launch_spec(config, backend, engine)
    bridge_data = bridge_args = bridge_plan = None
    if spec.engine == "bridge":
        from packcfg.launch import bridge as _bridge

        bridge_plan = _bridge.plan(config, spec.bridge)
        bridge_data = bridge_plan.data
        overlay_file = None
        if spec.backend == "nemo-run" and directory is not None:
            # NeMo-Run runs Bridge outside the bundle folder: see anchored_paths.
            bridge_data = anchored_paths(_bundle_named(bridge_data, directory), directory)
            overlay_file = str(directory / _bridge.OVERLAY)
        bridge_args = _bridge.command_args(spec.bridge, bridge_data, overlay_file, bridge_plan.whole)
    digest = config_hash(config)
    packed = packed_data_path(config)
    derived = derived_mounts(config, spec)
    mounts = [*spec.mounts, *derived]
    chdir = str(directory) if directory is not None else None
    from packcfg.launch import jobenv

    context = {
        "version": __version__,
        "config_hash": digest,
        "spec": spec,
        "packed_data": packed,
        "slurm_options": slurm_options(spec),
        "container_args": container_args(spec, mounts),
        "mounts": mounts,
        "derived_mounts": derived,
        "bundle_dir": chdir,
        # sbatch reads #SBATCH lines itself: a folder name it cannot take is left to `cd` below.
        "sbatch_chdir": chdir if chdir is not None and _CHDIR.match(chdir) else None,
        "lib": PACKCFG_LIB,
        "bridge_args": bridge_args,
        # The data prep's commands after the training pack: verify it, Bridge 0.3.1's .npy copies, the
        # validation packs (packcfg.launch.bridge.BridgePlan.prep_commands).
        "bridge_prep": bridge_plan.prep_commands() if bridge_plan and packed else [],
        "bundle_env": _BUNDLE_ENV,
        # NeMo-Run: run.Script(path=script, args=the rest); literal launch.env values as env_vars
        # (a `${NAME}` reference or env_from name is passed from the submitting environment, unwritten).
        "bridge_script": bridge_args[0] if bridge_args else None,
        "bridge_script_args": bridge_args[1:] if bridge_args else None,
        "bridge_env": {v.name: v.value for v in spec.env if v.value is not None},
        # Each script's first step: the job's Python imports what it needs, else one line and exit 2.
        "env_check": jobenv.command(jobenv.requirements(config, spec, packed)),
        "env_check_pack": jobenv.command(jobenv.requirements(config, spec, packed, job="pack")),
    }
    files: dict[str, bytes] = {}
    files["config.yaml"] = yaml.safe_dump(config, sort_keys=False, allow_unicode=True).encode("utf-8")
    if bridge_data is not None:
        files["bridge_overlay.yaml"] = yaml.safe_dump(
            bridge_data, sort_keys=False, allow_unicode=True
        ).encode("utf-8")
        files.update(bridge_plan.files)
    env = _environment()
    try:
        for name in (*SCRIPTS, DRIVER):
            files[name] = env.get_template(f"{name}.j2").render(context).encode("utf-8")
    except TemplateError as exc:
        raise LaunchError(f"cannot render {name}: {exc}") from None
    launcher = bundled_dir("launchers") / "train.py"
    if not launcher.is_file():
        raise LaunchError(f"{launcher} not found: this installation has no training entry point")
    files[LAUNCHER] = launcher.read_bytes()
    vendored = packcfg_source()
    files.update(vendored)

    source_paths = [Path(p).expanduser().resolve() for p in sources]
    env_names = [v.name for v in spec.env]
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "packcfg_version": __version__,
        "config_sha256": digest,
        "recipe": spec.job_name,
        "backend": spec.backend,
        "engine": spec.engine,
        "sources": {
            "files": [str(p) for p in source_paths],
            "overrides": [_redacted(o) for o in overrides],
            "backend_flag": backend,
        },
        "git": {
            "packcfg": git_commit(_PACKAGE_ROOT, toplevel=_PACKAGE_ROOT.parent),
            "config": git_commit(source_paths[0]) if source_paths else None,
        },
        "gate": {
            "lint": dict(lint_summary) if lint_summary else None,
            "allowed": [a.to_dict() for a in allowed],
        },
        # Names only: values never go into the manifest.
        "env": {"names": env_names, "from_environment": list(spec.env_from)},
        "packcfg_source": {
            "path": f"{PACKCFG_LIB}/packcfg",
            "files": len(vendored),
            "sha256": hashlib.sha256(
                "".join(
                    f"{n}\0{hashlib.sha256(d).hexdigest()}\n" for n, d in sorted(vendored.items())
                ).encode()
            ).hexdigest(),
        },
        "mounts": mounts,
        "directory": chdir,
        "packed_data": packed,
        "created_at": created_at,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8")
    render_args = {
        "sources": tuple(sources),
        "overrides": tuple(overrides),
        "allowed": tuple(allowed),
        "lint_summary": dict(lint_summary) if lint_summary else None,
        "created_at": created_at,
        "backend": backend,
        "engine": engine,
    }
    return JobBundle(config, digest, spec, files, packed, manifest, directory, render_args)
