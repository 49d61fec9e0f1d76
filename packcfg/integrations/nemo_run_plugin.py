"""`PackcfgCheck`: a NeMo-Run plugin that runs `packcfg.check()` on a task's config when the task is added to an
experiment (`exp.add(task, plugins=[PackcfgCheck()])`, `run.run(task, executor, plugins=...)`), and refuses the
launch with `packcfg.CheckError`, naming each finding, when the config has findings that block.

Where the config is found (NeMo-Run 0.11.1 calls `plugin.setup(task, executor)` from `Experiment.add`):
- a `run.Partial` (Bridge's `run.Partial(finetune, config=cfg, forward_step_func=...)`): the argument named
  `config_arg` ("config"): a ConfigContainer, a `run.Config` of one (built first), an OmegaConf DictConfig, a
  mapping or a YAML path;
- a `run.Script` (Bridge's `scripts/training/run_recipe.py`-style scripts): the file after `--config-file` (or
  `--config_file`) in its arguments, with the arguments that are Hydra overrides (`KEY=VALUE`, `+KEY=VALUE`,
  `++KEY=VALUE`, `~KEY`) applied on top, as the script applies them.
A task in which no config is found is refused too (ValueError naming `config_arg`): a check that silently did
not run would read as a pass. Importing this module imports nemo_run (the `nemo-run` extra).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import nemo_run as run

from packcfg.config_check import CheckError, check
from packcfg.core.diagnostics import Diagnostic

__all__ = ["PackcfgCheck"]

_CONFIG_FILE_FLAGS = ("--config-file", "--config_file")


@dataclass(kw_only=True)
class PackcfgCheck(run.Plugin):
    """Check the task's config with packcfg's rules before NeMo-Run launches it; findings at `raise_on` severity or
    above (default: errors) refuse the launch unless their code is in `allow` (as `packcfg launch --allow`)."""

    config_arg: str = "config"
    recipe: str | None = None  # a Bridge base recipe the config is merged over (`--recipe`)
    overrides: list[str] = field(default_factory=list)  # Hydra overrides on top
    allow: list[str] = field(default_factory=list)
    raise_on: str = "error"
    diagnostics: list[Diagnostic] = field(init=False, default_factory=list)  # every finding of the last check

    def setup(self, task: run.Partial | run.Script, executor: run.Executor) -> None:
        config, overrides = self._config(task)
        name = task.get_name() if isinstance(task, run.Script) else _function_name(task)
        try:
            self.diagnostics = check(
                config,
                recipe=self.recipe,
                overrides=[*overrides, *self.overrides],
                allow=self.allow,
                raise_on=self.raise_on,
            )
        except CheckError as exc:
            self.diagnostics = list(exc.diagnostics)
            raise CheckError(exc.diagnostics, f"the launch of {name} ({exc.source})") from None

    def _config(self, task: Any) -> tuple[Any, list[str]]:
        if isinstance(task, run.Script):
            return _script_config(task)
        arguments = getattr(task, "__arguments__", {})
        if self.config_arg not in arguments:
            raise ValueError(
                f"packcfg: task {_function_name(task)} has no argument {self.config_arg!r} to check; "
                "name the one that holds the config with PackcfgCheck(config_arg=...)"
            )
        value = arguments[self.config_arg]
        if isinstance(value, run.Config):  # a run.Config(ConfigContainer, ...): the object the task will get
            import fiddle as fdl

            value = fdl.build(value)
        return value, []


def _function_name(task: Any) -> str:
    fn = getattr(task, "__fn_or_cls__", None)
    return getattr(fn, "__qualname__", None) or repr(fn)


def _script_config(task: run.Script) -> tuple[str, list[str]]:
    from packcfg.core.overrides import looks_like_override

    args = [str(a) for a in task.args]
    path = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if flag in _CONFIG_FILE_FLAGS:
            path = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    if path is None:
        raise ValueError(
            f"packcfg: script {task.get_name()} has no --config-file argument to check; "
            "check its config with packcfg.check() before building the task"
        )
    overrides = [a for a in args if not a.startswith("-") and looks_like_override(a)]
    return path, overrides
