"""Drives NeMo-Run's public API with the packcfg plugin, in its own process (NeMo-Run reads NEMORUN_HOME when it
is imported, so the test gives each run its own folder). Prints one JSON object per scenario.

usage: python nemo_run_driver.py OUT_DIR   (tests/api/test_nemo_run_plugin.py runs it)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

OUT = Path(sys.argv[1])
os.environ["NEMORUN_HOME"] = str(OUT / "nemorun")  # before nemo_run is imported

import nemo_run as run  # noqa: E402
import yaml  # noqa: E402
from bridge_task import finetune, forward_step, packed_config  # noqa: E402

from packcfg import CheckError  # noqa: E402
from packcfg.integrations.nemo_run_plugin import PackcfgCheck  # noqa: E402

PACKED = packed_config(2)
FIXED = packed_config(1, 32)
RAN = OUT / "ran.json"


def executor() -> run.LocalExecutor:
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    return run.LocalExecutor(env_vars={"PYTHONPATH": path, "PACKCFG_TEST_RAN": str(RAN)})


def add(title: str, task, plugin: PackcfgCheck, *, launch: bool = False) -> dict:
    """exp.add with the plugin; then, when asked and not refused, exp.run to completion."""
    with run.Experiment(title, executor=executor(), log_level="WARN") as exp:
        try:
            exp.add(task, name="finetune", plugins=[plugin])
        except CheckError as exc:
            return {"refused": str(exc), "codes": [d.code for d in exc.diagnostics]}
        except ValueError as exc:
            return {"error": str(exc)}
        result: dict = {"refused": None, "codes": [d.code for d in plugin.diagnostics]}
        if launch:
            exp.run(detach=False, tail_logs=False)  # waits for the task (LocalExecutor)
    return result


def partial(config) -> run.Partial:
    return run.Partial(finetune, config=config, forward_step_func=forward_step)


results = {
    "refused": add("refused", partial(PACKED), PackcfgCheck(), launch=True),
    "allowed": add("allowed", partial(PACKED), PackcfgCheck(allow=["PK110"])),
    "launched": add("launched", partial(FIXED), PackcfgCheck(), launch=True),
    # a run.Config that builds the config (as run.Config(ConfigContainer, ...) does): built, then checked
    "buildable": add("buildable", partial(run.Config(packed_config, micro_batch_size=2)), PackcfgCheck()),
    "no_config": add("no_config", run.Partial(finetune, forward_step_func=forward_step), PackcfgCheck()),
}
(OUT / "packed.yaml").write_text(yaml.safe_dump(PACKED))
script_args = ["--config-file", str(OUT / "packed.yaml")]
results["script_refused"] = add("script", run.Script(path="run_recipe.py", args=script_args), PackcfgCheck())
results["script_fixed"] = add(
    "script_fixed",
    run.Script(
        path="run_recipe.py", args=[*script_args, "train.micro_batch_size=1", "train.global_batch_size=32"]
    ),
    PackcfgCheck(),
)
print("@@RESULTS@@" + json.dumps(results))
