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
    """What `packcfg render` writes: file name -> bytes, plus the facts the backends need."""

    config: dict[str, Any]
    config_hash: str
    spec: LaunchSpec
    files: dict[str, bytes]
    packed_data: str | None
    manifest: dict[str, Any] = field(default_factory=dict)

    def write(self, directory: Path) -> Path:
        """Write every file atomically into `directory` (created); returns it, absolute."""
        directory = directory.expanduser().resolve()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for name, data in sorted(self.files.items()):
                executable = name.endswith(".sh") or name == DRIVER
                atomic_write_bytes(directory / name, data, 0o755 if executable else 0o644)
        except OSError as exc:
            raise LaunchError(f"cannot write the job bundle to {directory}: {exc.strerror or exc}") from None
        return directory


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


def container_args(spec: LaunchSpec) -> list[str]:
    """srun's pyxis flags, each one shell word (quoted here); the bundle is mounted at its own path
    because the job runs from it."""
    if not spec.container_image:
        return []
    mounts = shlex.quote(",".join(spec.mounts) + ",") if spec.mounts else ""
    return [
        f"--container-image={shlex.quote(spec.container_image)}",
        f'--container-mounts={mounts}"$PWD:$PWD"',
        '--container-workdir="$PWD"',
    ]


def render_bundle(
    config: dict[str, Any],
    *,
    sources: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    allowed: Sequence[AllowedRule] = (),
    lint_summary: Mapping[str, Any] | None = None,
    created_at: str | None = None,
    backend: str | None = None,
) -> JobBundle:
    """Render every file of the bundle in memory (raises LaunchError on an unsafe or bad config)."""
    import yaml
    from jinja2 import TemplateError

    from packcfg.resources import bundled_dir

    spec = launch_spec(config, backend)
    digest = config_hash(config)
    packed = packed_data_path(config)
    context = {
        "version": __version__,
        "config_hash": digest,
        "spec": spec,
        "packed_data": packed,
        "slurm_options": slurm_options(spec),
        "container_args": container_args(spec),
    }
    files: dict[str, bytes] = {}
    files["config.yaml"] = yaml.safe_dump(config, sort_keys=False, allow_unicode=True).encode("utf-8")
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

    source_paths = [Path(p).expanduser().resolve() for p in sources]
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "packcfg_version": __version__,
        "config_sha256": digest,
        "recipe": spec.job_name,
        "backend": spec.backend,
        "sources": {"files": [str(p) for p in source_paths], "overrides": list(overrides)},
        "git": {
            "packcfg": git_commit(_PACKAGE_ROOT, toplevel=_PACKAGE_ROOT.parent),
            "config": git_commit(source_paths[0]) if source_paths else None,
        },
        "gate": {
            "lint": dict(lint_summary) if lint_summary else None,
            "allowed": [a.to_dict() for a in allowed],
        },
        "secrets_by_name": list(spec.env_from),
        "packed_data": packed,
        "created_at": created_at,
        "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())},
    }
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode("utf-8")
    return JobBundle(config, digest, spec, files, packed, manifest)
