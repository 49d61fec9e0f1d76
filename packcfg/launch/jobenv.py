"""What a job's Python environment needs, checked before the job does anything.

Every rendered job script first runs `python3 -m packcfg.launch.jobenv INSTALL:MODULE,... ...` (with the
bundle's `lib/` on PYTHONPATH): a missing module is one line naming each one and the command that installs
it, and exit 2, instead of a traceback halfway through the job. Only the standard library and
`packcfg.core.extras` are imported here (packcfg's top-level packages import nothing else at import time), so
the check runs where every dependency of packcfg is missing. `launch --backend local` runs the same check
in this installation, and in the `python3` the job will run, before submitting.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from packcfg.core.extras import EXTRAS, missing_modules

# packcfg's own dependencies (pyproject `dependencies`), as import names: every packcfg command the job runs
# (train, pack, verify) needs them; `pip install 'packcfg[EXTRA]'` installs them with the extra.
BASE = ("yaml", "ruamel.yaml", "pydantic", "jinja2", "numpy")
EXIT_MISSING = 2

Requirement = tuple[str, tuple[str, ...]]  # (what to pip install, the import names it provides)


def _extra(name: str) -> str:
    return f"packcfg[{name}]"


def requirements(
    config: Mapping[str, Any], spec: Any, packed_data: str | None, job: str = "train"
) -> list[Requirement]:
    """What the job's Python must import: `job` "train" (torchrun.sh, sbatch.sh and the NeMo-Run tasks) or
    "pack" (pack.sbatch.sh: data prep only)."""
    if job == "pack":
        return [(_extra("pack"), (*BASE, *EXTRAS["pack"]))]
    out: list[Requirement] = []
    if spec.engine == "bridge":
        # packcfg runs only the data prep (pack, verify); Megatron Bridge's script runs the training.
        if packed_data:
            out.append((_extra("pack"), (*BASE, *EXTRAS["pack"])))
        bridge = spec.bridge
        from packcfg.launch.bridge import DEFAULT_SCRIPT

        if bridge is not None and bridge.entry is None and bridge.script == DEFAULT_SCRIPT:
            version = "" if bridge.version == "head" else f"=={bridge.version}"
            out.append((f"megatron-bridge{version}", ("torch", "megatron.core", "megatron.bridge")))
        else:
            # Your own script (launch.bridge.entry or script): packcfg knows only that torchrun runs it.
            out.append(("torch", ("torch",)))
        return out
    out.append((_extra("train"), (*BASE, *EXTRAS["train"])))
    logger = config.get("logger")
    if isinstance(logger, Mapping):
        for key, extra in (("tensorboard_dir", "tensorboard"), ("wandb_project", "wandb")):
            if logger.get(key) not in (None, ""):
                out.append((_extra(extra), EXTRAS[extra]))
    model = config.get("model")
    if isinstance(model, Mapping) and model.get("hf_path"):
        out.append((_extra("hf"), ("safetensors",)))  # weights from a Hugging Face folder
    return out


def command(reqs: Sequence[Requirement]) -> str:
    """The check as one shell command line for a job script (arguments shell-quoted)."""
    import shlex

    return " ".join(["python3", "-m", "packcfg.launch.jobenv", *(shlex.quote(a) for a in arguments(reqs))])


def arguments(reqs: Sequence[Requirement]) -> list[str]:
    return [f"{install}:{','.join(modules)}" for install, modules in reqs]


def problem(reqs: Sequence[Requirement], who: str | None = None) -> str | None:
    """One line naming every missing module and the command that installs it (None: nothing missing);
    `who` names the interpreter (default: this job's Python, its path and host)."""
    groups: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    for install, modules in reqs:
        lacking = missing_modules([m for m in modules if m not in seen])
        seen.update(modules)
        if lacking:
            groups.append((install, lacking))
    if not groups:
        return None
    who = who or f"this job's Python ({sys.executable} on {socket.gethostname()})"
    if len(groups) == 1:
        install, lacking = groups[0]
        return f"{who} lacks {', '.join(lacking)}: pip install '{install}'"
    parts = [f"{', '.join(lacking)} (pip install '{install}')" for install, lacking in groups]
    return f"{who} lacks {'; '.join(parts)}"


def parse(args: Sequence[str]) -> list[Requirement]:
    out = []
    for arg in args:
        install, sep, modules = arg.partition(":")
        if not sep or not install or not modules:
            raise ValueError(f"expected INSTALL:MODULE[,MODULE...], got {arg!r}")
        out.append((install, tuple(m for m in modules.split(",") if m)))
    return out


def check_local(reqs: Sequence[Requirement], with_torch_hint: bool = True) -> str | None:
    """Why this machine cannot run the job (the local backend): this installation lacks a module, or the
    `python3` or `torchrun` the job script runs is missing or lacks one; None when it can run it."""
    from packcfg.core.extras import TORCH_HINT

    found = problem(reqs, who=f"this installation ({sys.executable})")
    if found:
        hint = TORCH_HINT if with_torch_hint and any(m in found for m in ("torch", "megatron.core")) else ""
        return f"{found}{hint}"
    for tool in ("python3", "torchrun"):
        if shutil.which(tool) is None:
            return f"the job runs {tool}, which is not on PATH (activate the environment packcfg is installed in)"
    python3 = os.path.realpath(shutil.which("python3") or "")
    if python3 != os.path.realpath(sys.executable):
        # The job's own interpreter (first on PATH) is another one: check it as the job will.
        import packcfg

        lib = os.path.dirname(os.path.dirname(os.path.abspath(packcfg.__file__)))
        env = {**os.environ, "PYTHONPATH": lib + os.pathsep + os.environ.get("PYTHONPATH", "")}
        try:
            out = subprocess.run(
                [python3, "-m", "packcfg.launch.jobenv", *arguments(reqs)],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"the job's python3 ({python3}) does not run: {exc}"
        if out.returncode != 0:
            lines = (out.stderr or out.stdout).strip().splitlines()
            return lines[-1].removeprefix("packcfg: ") if lines else f"{python3} exited {out.returncode}"
    return None


def main(argv: Sequence[str]) -> int:
    try:
        reqs = parse(argv)
    except ValueError as exc:
        print(f"packcfg: jobenv: {exc}", file=sys.stderr)
        return EXIT_MISSING
    found = problem(reqs)
    if found:
        print(f"packcfg: {found}", file=sys.stderr, flush=True)
        return EXIT_MISSING
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
