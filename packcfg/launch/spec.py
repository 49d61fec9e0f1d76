"""The `launch` section as checked, typed data: what the templates may put into a script.

Safety model (docs/launch.md, "Safety"): every value that reaches a script body is shell-quoted by the
templates; values that end up where quoting cannot help (an `#SBATCH` directive line, which sbatch parses
itself, or a container reference handed on to pyxis/NeMo-Run unquoted) must match a strict pattern or
the render is refused with a one-line error. Secrets never appear in a script: they are passed by the
NAME of an environment variable of the submitting environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packcfg.launch import LaunchError
from packcfg.launch.secrets import env_reference, looks_secret

BACKENDS = ("local", "slurm", "nemo-run")
DEVICES = ("gpu", "cpu")
ENGINES = ("packcfg", "bridge")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# `#SBATCH` values: sbatch parses these lines itself (no shell), and a newline would start a new line
# of the script, so only plain tokens are allowed.
_SBATCH_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")
_SBATCH_TIME = re.compile(r"\d+(-\d+)?(:\d+){0,2}\Z")
# A container image reference (docker `registry/name:tag@sha256:...`, enroot `registry#name`).
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@#+-]*\Z")
# One `src:dst[:flags]` mount for pyxis; commas separate mounts, so none inside one.
_MOUNT = re.compile(r"[A-Za-z0-9._/@+=-]+(:[A-Za-z0-9._/@+=-]+){0,2}\Z")


@dataclass(frozen=True)
class EnvVar:
    """One variable exported by the job: a literal `value`, or `ref`, the name of a variable of the
    submitting environment (its value is read at run time, never written into the script)."""

    name: str
    value: str | None = None
    ref: str | None = None


@dataclass(frozen=True)
class LaunchSpec:
    backend: str
    nodes: int
    gpus_per_node: int
    device: str
    job_name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    exclusive: bool = False
    container_image: str | None = None
    mounts: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[str, ...] = ()
    engine: str = "packcfg"
    bridge: Any = None  # a packcfg.launch.bridge.BridgeSpec when engine == "bridge"
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def nproc_per_node(self) -> int:
        """torchrun processes per node: one per GPU (on CPU, `gpus_per_node` counts processes)."""
        return self.gpus_per_node


def _fail(key: str, value: Any, why: str) -> LaunchError:
    return LaunchError(f"launch.{key} = {value!r}: {why}")


def _opt_str(section: Mapping[str, Any], key: str) -> str | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise _fail(key, value, "expected a string")
    return str(value)


def _sbatch_token(section: Mapping[str, Any], key: str) -> str | None:
    value = _opt_str(section, key)
    if value is not None and not _SBATCH_TOKEN.match(value):
        raise _fail(key, value, "must be letters, digits and . _ + - only (it becomes an #SBATCH line)")
    return value


def _positive(section: Mapping[str, Any], key: str, default: int) -> int:
    value = section.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(key, value, "expected a positive integer")
    return value


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    raise LaunchError(f"launch.env value {value!r}: expected a string, number or boolean")


def parse_env(env: Any, env_from: Any) -> tuple[tuple[EnvVar, ...], tuple[str, ...]]:
    if env is None:
        env = {}
    if not isinstance(env, Mapping):
        raise _fail("env", env, "expected a mapping NAME: value")
    out: list[EnvVar] = []
    for name, raw in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise LaunchError(f"launch.env: {name!r} is not a valid environment variable name")
        value = _env_value(raw)
        # `${NAME}`, `$NAME` or `${oc.env:NAME}` as the whole value: read from the submitting
        # environment at run time, passed by name.
        ref = env_reference(value, shell=True)
        if ref:
            out.append(EnvVar(name, ref=ref))
            continue
        if looks_secret(name) and value:
            # A literal credential would be written into config.yaml and the scripts of the bundle.
            raise LaunchError(
                f"launch.env.{name} looks like a secret: pass it by name instead "
                f"(launch.env_from: [{name}], or {name}: '${{{name}}}')"
            )
        out.append(EnvVar(name, value=value))
    names: list[str] = []
    if env_from is None:
        env_from = []
    if isinstance(env_from, str) or not isinstance(env_from, list):
        raise _fail("env_from", env_from, "expected a list of environment variable names")
    for name in env_from:
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise LaunchError(f"launch.env_from: {name!r} is not a valid environment variable name")
        if name not in names:
            names.append(name)
    # A reference `${NAME}` also needs NAME in the submitting environment.
    for var in out:
        if var.ref and var.ref not in names:
            names.append(var.ref)
    return tuple(out), tuple(names)


def launch_spec(
    config: Mapping[str, Any], backend: str | None = None, engine: str | None = None
) -> LaunchSpec:
    """Check the `launch` section of a resolved config; raises LaunchError naming the bad key."""
    section = config.get("launch") or {}
    if not isinstance(section, Mapping):
        raise LaunchError("launch: expected a mapping")
    chosen = backend or section.get("backend") or "local"
    if chosen not in BACKENDS:
        raise _fail("backend", chosen, f"expected one of {', '.join(BACKENDS)}")
    device = section.get("device") or "gpu"
    if device not in DEVICES:
        raise _fail("device", device, f"expected one of {', '.join(DEVICES)}")
    engine = engine or section.get("engine") or "packcfg"
    if engine not in ENGINES:
        raise _fail("engine", engine, f"expected one of {', '.join(ENGINES)}")
    bridge = None
    if engine == "bridge":
        from packcfg.launch.bridge import bridge_spec

        bridge = bridge_spec(section.get("bridge"))
    elif section.get("bridge") is not None and not isinstance(section.get("bridge"), Mapping):
        raise _fail("bridge", section.get("bridge"), "expected a mapping")

    recipe = config.get("recipe") or {}
    default_name = recipe.get("name") if isinstance(recipe, Mapping) else None
    job_name = _opt_str(section, "job_name")
    if job_name is None:
        # Derived from recipe.name: made a safe token rather than refused (the user did not write it).
        derived = re.sub(r"[^A-Za-z0-9._+-]", "_", str(default_name or "packcfg"))[:128]
        job_name = derived if _SBATCH_TOKEN.match(derived) else f"job{derived}"[:128]
    if not _SBATCH_TOKEN.match(job_name):
        raise _fail(
            "job_name", job_name, "must be letters, digits and . _ + - only (it becomes an #SBATCH line)"
        )

    time = _opt_str(section, "time")
    if time is not None and not _SBATCH_TIME.match(time):
        raise _fail("time", time, "expected minutes or [D-]HH:MM:SS as sbatch takes it")

    exclusive = section.get("exclusive", False)
    if not isinstance(exclusive, bool):
        raise _fail("exclusive", exclusive, "expected true or false")

    image = _opt_str(section, "container_image")
    if image is not None and not _IMAGE.match(image):
        raise _fail("container_image", image, "not a container image reference")
    mounts_raw = section.get("mounts") or []
    if not isinstance(mounts_raw, list):
        raise _fail("mounts", mounts_raw, "expected a list of SRC:DST[:FLAGS]")
    for mount in mounts_raw:
        if not isinstance(mount, str) or not _MOUNT.match(mount):
            raise _fail("mounts", mount, "each mount is SRC:DST[:FLAGS] with plain path characters")
    if mounts_raw and not image:
        raise _fail("mounts", mounts_raw, "mounts need launch.container_image")

    env, env_from = parse_env(section.get("env"), section.get("env_from"))
    spec = LaunchSpec(
        backend=chosen,
        nodes=_positive(section, "nodes", 1),
        gpus_per_node=_positive(section, "gpus_per_node", 1),
        device=device,
        job_name=job_name,
        partition=_sbatch_token(section, "partition"),
        account=_sbatch_token(section, "account"),
        qos=_sbatch_token(section, "qos"),
        time=time,
        exclusive=exclusive,
        container_image=image,
        mounts=tuple(mounts_raw),
        env=env,
        env_from=env_from,
        engine=engine,
        bridge=bridge,
    )
    if spec.backend == "local" and spec.nodes > 1:
        raise _fail("nodes", spec.nodes, "the local backend runs one node; use --backend slurm or nemo-run")
    if spec.backend == "local" and spec.container_image:
        raise _fail("container_image", image, "the local backend runs no container; use slurm or nemo-run")
    return spec
