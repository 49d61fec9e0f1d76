"""`launch.engine: bridge` (issue 13): Megatron Bridge's run_recipe.py as the job, in the main environment.

Bridge itself is checked in tests/oracle/test_bridge_launch.py (its own parser and validate()); here: the
spec's errors, the command forms of each Bridge version, byte-for-byte renders, the 4 x 8 sbatch line by
line, and a local end-to-end run with a stand-in entry point that records its argv and environment.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from packcfg.launch import LaunchError
from packcfg.launch.bridge import BUNDLE_REF, bridge_spec, command_args, overlay, overrides, plan
from packcfg.launch.bundle import _bundle_named, anchored_paths, render_bundle
from packcfg.launch.state import JobStore

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "llama32_1b_sft_bridge.yaml"


def _config(**bridge) -> dict:
    config = yaml.safe_load(RECIPE.read_text())
    if bridge:
        config["launch"]["bridge"] = bridge
    return config


def _words(config: dict, nemo_run_dir: Path | None = None) -> list[str]:
    """The KEY=VALUE words the bundle hands run_recipe.py (NeMo-Run: the bundle folder written in)."""
    got = plan(config, bridge_spec(config["launch"]["bridge"]))
    data = (
        got.data
        if nemo_run_dir is None
        else anchored_paths(_bundle_named(got.data, nemo_run_dir), nemo_run_dir)
    )
    return overrides(data, got.whole)


def _packcfg(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "packcfg", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({}, "exactly one of recipe"),
        ({"recipe": "llama32_1b_sft_config", "entry": "/x.py"}, "exactly one of recipe"),
        ({"recipe": "llama32 1b"}, "launch.bridge.recipe"),
        ({"entry": "relative.py"}, "launch.bridge.entry"),
        ({"recipe": "r", "version": "0.2.0"}, "launch.bridge.version"),
        ({"recipe": "r", "mode": "sft"}, "--mode finetune, pretrain"),  # 0.3.1's choices
        ({"recipe": "r", "step_func": "my_step"}, "launch.bridge.step_func"),
        ({"recipe": "r", "recipee": "x"}, "launch.bridge.recipee: unknown key"),
    ],
)
def test_bad_bridge_section_is_one_line(section: dict, message: str) -> None:
    with pytest.raises(LaunchError, match=message.replace("(", r"\(")) as info:
        bridge_spec(section)
    assert "\n" not in str(info.value)


def test_command_forms_per_version() -> None:
    data = {"train": {"global_batch_size": 8}}
    # v0.3.1: --step_func (underscore), modes pretrain/finetune.
    old = bridge_spec({"recipe": "llama32_1b_sft_config", "mode": "finetune", "step_func": "gpt_step"})
    assert command_args(old, data) == [
        "/opt/Megatron-Bridge/scripts/training/run_recipe.py",
        "--recipe",
        "llama32_1b_sft_config",
        "--mode",
        "finetune",
        "--step_func",
        "gpt_step",
        "train.global_batch_size=8",
    ]
    # HEAD: --step-func (its parser also takes --step_func), modes pretrain/sft/lora/dora.
    head = bridge_spec(
        {"recipe": "llama32_1b_sft_config", "version": "head", "mode": "sft", "step_func": "vlm"}
    )
    assert command_args(head, data)[3:7] == ["--mode", "sft", "--step-func", "vlm"]
    # A user's own script takes the overlay file.
    entry = bridge_spec({"entry": "/workspace/finetune.py"})
    assert command_args(entry, data) == ["/workspace/finetune.py", "--config-file", "bridge_overlay.yaml"]


def test_overrides_are_hydra_values_and_leave_targets_to_the_recipe() -> None:
    got = overrides(
        {
            "model": {"_target_": "x.Y", "seq_length": 512, "bf16": False, "name": "a b", "k": None},
            "optimizer": {"lr": 3e-4},
            "dataset": {"splits": [1, 2], "kw": {}},
        }
    )
    assert got == [
        "model.seq_length=512",
        "model.bf16=false",
        "model.name='a b'",
        "model.k=null",
        "optimizer.lr=0.0003",
        "dataset.splits=[1,2]",
        "dataset.kw={}",
    ]


def test_overlay_keeps_packcfg_sections_out_and_uses_031_packing_spelling() -> None:
    config = _config()
    data = overlay(config, "0.3.1")
    assert "recipe" not in data and "launch" not in data
    # 0.3.1: the dataset goes whole, as a FinetuningDatasetConfig (the recipe's HFDatasetConfig downloads)
    assert data["dataset"]["_target_"] == "megatron.bridge.training.config.FinetuningDatasetConfig"
    assert "offline_packing_specs" not in data["dataset"] and "enable_offline_packing" not in data["dataset"]
    assert "dataset_name" not in data["dataset"]  # nothing of HFDatasetConfig's own
    specs = data["dataset"]["packed_sequence_specs"]
    # 0.3.1 reads packs only as .npy: it is given the Parquet's .npy sibling, which the data prep writes;
    # bundle-relative paths reach Bridge through the bundle variable (absolute when Bridge resolves them)
    assert config["dataset"]["offline_packing_specs"]["packed_train_data_path"].endswith("/train.parquet")
    assert specs["packed_train_data_path"] == f"{BUNDLE_REF}/runs/llama32_1b_sft_bridge/packed/train.npy"
    assert specs["packed_val_data_path"] == f"{BUNDLE_REF}/runs/llama32_1b_sft_bridge/packed/validation.npy"
    assert specs["packed_metadata_path"] == f"{BUNDLE_REF}/runs/llama32_1b_sft_bridge/packed/metadata.json"
    # `@packcfg/data/...` is the bundle's vendored copy; the tokenizer.json becomes the bundle's HF folder
    assert data["dataset"]["dataset_root"] == f"{BUNDLE_REF}/lib/packcfg/data/sample_sft"
    assert data["tokenizer"]["tokenizer_model"] == f"{BUNDLE_REF}/tokenizer"
    head = overlay(config, "0.6")
    assert head["dataset"]["enable_offline_packing"] is True
    assert head["dataset"]["hf_dataset"] is None and head["dataset"]["hf_validation_proportion"] is None
    assert head["dataset"]["offline_packing_specs"]["packed_train_data_path"].endswith("packed/train.parquet")


def _plan(version: str = "0.3.1", **dataset):
    config = _config(recipe="llama32_1b_sft_config", version=version)
    for key, value in dataset.items():
        node, *path = key.split("__")
        target = config.setdefault(node, {})
        for part in path[:-1]:
            target = target.setdefault(part, {})
        if path:
            target[path[-1]] = value
        else:
            config[node] = value
    return plan(config, bridge_spec(config["launch"]["bridge"]))


def test_plan_bundle_tokenizer_folder_and_data_prep() -> None:
    got = _plan()
    config = json.loads(got.files["tokenizer/tokenizer_config.json"])
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["eos_token"] == "<eos>"
    assert (
        got.files["tokenizer/tokenizer.json"]
        == (ROOT / "packcfg/data/sample_sft/tokenizer.json").read_bytes()
    )
    # the recipe's settings for its own tokenizer do not reach this one: the section goes whole
    assert got.data["tokenizer"]["_target_"].endswith("TokenizerConfig")
    assert set(got.whole) == {"tokenizer", "dataset"}
    packed = "runs/llama32_1b_sft_bridge/packed"
    assert got.prep_commands() == [
        "python3 -m packcfg verify config.yaml",
        f"python3 -m packcfg pack config.yaml -q --bridge-npy {packed}/train.npy",
        f"python3 -m packcfg pack config.yaml -q --split validation --parquet {packed}/validation.parquet "
        f"--metadata {packed}/validation_metadata.json --bridge-npy {packed}/validation.npy",
    ]
    words = overrides(got.data, got.whole)
    assert words[:2] == ["tokenizer=null", words[1]] and words[1].startswith("tokenizer={_target_:")
    assert "dataset=null" in words and words[words.index("dataset=null") + 1].startswith("dataset={_target_:")
    # outputs land in the bundle, not under the runner's folder (the recipes' ${oc.env:PWD}/nemo_experiments)
    assert got.data["checkpoint"]["load"] == got.data["checkpoint"]["save"]
    assert got.data["logger"]["tensorboard_dir"] == f"{BUNDLE_REF}/output/tb_logs"
    # 0.6.x: the Parquet packs, no .npy
    assert [c for c in _plan("0.6.2").prep_commands() if "npy" in c] == []


@pytest.mark.parametrize(
    ("version", "change", "message"),
    [
        ("0.3.1", {"dataset__hf_dataset": {"dataset_name": "squad"}}, "dataset.hf_dataset = {'dataset_name'"),
        (
            "0.6",
            {"dataset__hf_validation_proportion": 0.1},
            "dataset.hf_validation_proportion = 0.1: a Hugging",
        ),
        (
            "0.3.1",
            {"dataset__dataset_name": "my/sft"},
            "dataset.dataset_name = 'my/sft': a Hugging Face source",
        ),
        ("0.6", {"dataset__dataset_root": None}, "dataset.dataset_root: not set"),
        ("0.3.1", {"dataset__preprocessing": {"prompt_column": "q"}}, "dataset.preprocessing = "),
        (
            "0.3.1",
            {"validation": {"full_validation": True}},
            "validation.full_validation = True: Bridge 0.3.1",
        ),
        ("0.3.1", {"model__no_such_field": 1}, "model.no_such_field = 1: not a field of the Bridge 0.3.1"),
        (
            "0.6",
            {"dataset__offline_packing_specs__packed_sequence_size": 1024},
            "packed_sequence_size = 1024: Bridge 0.6's run_recipe.py packs at dataset.seq_length (512)",
        ),
        (
            "0.6",
            {"model__context_parallel_size": 2},
            "pad_seq_to_mult = 1: Bridge 0.6's run_recipe.py raises it to 4",
        ),
        (
            "0.3.1",
            {"dataset__offline_packing_specs__packed_val_data_path": "v.npy"},
            "packed_val_data_path = 'v.npy'",
        ),
        ("0.3.1", {"tokenizer__tokenizer_model": "/nowhere/tokenizer.json"}, "file not found"),
        ("0.6", {"dataset__enable_in_batch_packing": True}, "in-batch packing"),
    ],
)
def test_plan_refuses_what_the_job_could_not_run(version: str, change: dict, message: str) -> None:
    with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        _plan(version, **change)
    assert "\n" not in str(info.value)


def test_plan_translates_renamed_fields() -> None:
    # 0.6's validation section is 0.3.1's train.eval_*
    got = _plan("0.3.1", validation={"eval_interval": 50, "eval_iters": 4})
    assert "validation" not in got.data
    assert got.data["train"]["eval_interval"] == 50 and got.data["train"]["eval_iters"] == 4
    # 0.3.1's packing spelling for a 0.6 target; packed_sequence_size <= 0 is 0.3.1's "packing off"
    config = _config(recipe="llama32_1b_sft_config", version="0.6")
    specs = config["dataset"].pop("offline_packing_specs")
    config["dataset"].pop("enable_offline_packing")
    config["dataset"]["packed_sequence_specs"] = specs
    got = plan(config, bridge_spec(config["launch"]["bridge"]))
    assert got.data["dataset"]["enable_offline_packing"] is True
    assert got.data["dataset"]["offline_packing_specs"]["packed_sequence_size"] == 512
    config["launch"]["bridge"]["version"] = "0.3.1"
    config["dataset"]["packed_sequence_specs"] = {**specs, "packed_sequence_size": 0}
    off = plan(config, bridge_spec(config["launch"]["bridge"]))
    assert off.data["dataset"]["packed_sequence_specs"] is None and off.preps == []
    # the 0.6 runner's alignment: CP 2 wants pad 4 (2 x CP); with it the plan passes
    ok = _plan("0.6", model__context_parallel_size=2, dataset__offline_packing_specs__pad_seq_to_mult=4)
    assert ok.data["dataset"]["offline_packing_specs"]["pad_seq_to_mult"] == 4


def test_bundle_holds_overlay_and_bridge_command() -> None:
    bundle = render_bundle(_config())
    assert yaml.safe_load(bundle.files["bridge_overlay.yaml"]) == overlay(_config(), "0.3.1")
    script = bundle.files["torchrun.sh"].decode()
    assert "launchers/train.py" not in script
    tail = script[script.index("exec torchrun") :].replace("\\\n", " ")
    words = shlex.split(tail.replace('"${rdzv[@]}"', ""))
    assert words[:4] == [
        "exec",
        "torchrun",
        "--nproc-per-node=2",
        "/opt/Megatron-Bridge/scripts/training/run_recipe.py",
    ]
    assert words[4:6] == ["--recipe", "llama32_1b_sft_config"]
    got = plan(_config(), bridge_spec(_config()["launch"]["bridge"]))
    assert words[6:] == overrides(got.data, got.whole)
    # Pack, then verify, then Bridge.
    assert (
        script.index("packcfg pack config.yaml")
        < script.index("packcfg verify config.yaml")
        < script.index("exec torchrun")
    )
    assert bundle.manifest["engine"] == "bridge"


def test_packcfg_engine_bundle_has_no_overlay() -> None:
    config = _config()
    config["launch"]["engine"] = "packcfg"
    bundle = render_bundle(config)
    assert "bridge_overlay.yaml" not in bundle.files
    assert "launchers/train.py config.yaml --out output" in bundle.files["torchrun.sh"].decode()


def test_engine_flag_and_byte_for_byte(tmp_path: Path) -> None:
    tiny = ROOT / "recipes" / "tiny_cpu_sft.yaml"
    outs = []
    for i in range(2):
        out = tmp_path / f"b{i}"
        run = _packcfg(
            "render",
            str(tiny),
            "--engine",
            "bridge",
            "launch.bridge.recipe=llama32_1b_sft_config",
            "--out",
            str(out),
        )
        assert run.returncode == 0, run.stderr
        outs.append(out)
    a, b = outs
    # lib/ is packcfg's vendored source: others editing this checkout between the two renders change it
    # (a different packcfg, not irreproducibility; tests/launch/test_render.py freezes it in-process).
    names = sorted(
        p.relative_to(a).as_posix()
        for p in a.rglob("*")
        if p.is_file() and not p.relative_to(a).as_posix().startswith("lib/")
    )
    assert "bridge_overlay.yaml" in names
    for name in names:
        if name in ("sbatch.sh", "pack.sbatch.sh", "manifest.json"):
            continue  # they name their own folder (#SBATCH --chdir)
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["engine"] == "bridge"
    assert "launch.engine=bridge" in manifest["sources"]["overrides"]
    # The same folder rendered again is unchanged, byte for byte.
    first = {n: (a / n).read_bytes() for n in names}
    run = _packcfg(
        "render",
        str(tiny),
        "--engine",
        "bridge",
        "launch.bridge.recipe=llama32_1b_sft_config",
        "--out",
        str(a),
        "--force",
    )
    assert run.returncode == 0, run.stderr
    assert {n: (a / n).read_bytes() for n in names} == first


def test_sbatch_4x8_line_by_line() -> None:
    config = _config()
    config["launch"].update(backend="slurm", nodes=4, gpus_per_node=8, partition="batch", time="01:00:00")
    config["model"]["tensor_model_parallel_size"] = 2
    script = render_bundle(config, directory=Path("/shared/jobs/b1")).files["sbatch.sh"].decode()
    lines = script.splitlines()
    for line in (
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=batch",
        "#SBATCH --time=01:00:00",
        "#SBATCH --chdir=/shared/jobs/b1",
        '  --nnodes="$SLURM_NNODES" \\',
        "  --nproc-per-node=8 \\",
        '  --rdzv-endpoint="$head_node:$rdzv_port" \\',
        "  /opt/Megatron-Bridge/scripts/training/run_recipe.py \\",
        "  --recipe \\",
        "  llama32_1b_sft_config \\",
        "  model.tensor_model_parallel_size=2 \\",
        "  checkpoint.save_interval=20 \\",
    ):
        assert line in lines, line
    # the outputs the recipe would put under the runner's folder are the bundle's
    assert lines[-1] == "  'logger.tensorboard_dir='\"'\"'${oc.env:PACKCFG_BUNDLE}/output/tb_logs'\"'\"''"
    assert 'export PACKCFG_BUNDLE="$PWD"' in lines
    # data prep (one task) and verify (one task) come before the training srun
    verify = lines.index("  python3 -m packcfg verify config.yaml")
    train = next(i for i, x in enumerate(lines) if x.startswith('srun --nodes="$SLURM_NNODES"'))
    assert verify < train
    assert "launchers/train.py" not in script
    proc = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


STANDIN = """\
import json, os, socket, sys
rank = os.environ.get("RANK", "?")
out = os.environ["STANDIN_OUT"]
# what run_recipe.py v0.3.1's parse_known_args would see
args = sys.argv[1:]
assert args[0] == "--recipe" and args[1] == "llama32_1b_sft_config", args
assert all("=" in a and not a.startswith("-") for a in args[2:]), args
# Bridge opens the packs at the path it is given (resolving ${oc.env:PACKCFG_BUNDLE}, the bundle folder
# the job exports), from its own working directory: so does the stand-in.
import re
found = re.search(r"packed_train_data_path[:=]'?((?:[$][{][^}]*[}])?[^',}]+)", " ".join(args[2:]))
packed = [found.group(1).replace("${oc.env:PACKCFG_BUNDLE}", os.environ.get("PACKCFG_BUNDLE", "?"))] if found else []
assert packed and os.path.isfile(packed[0]), (packed, os.getcwd())
print(f"stand-in rank {rank}: packs at {packed[0]}", flush=True)
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"argv": sys.argv, "world": os.environ.get("WORLD_SIZE"), "cwd": os.getcwd(),
               "marker": os.environ.get("BRIDGE_MARKER"), "host": socket.gethostname()}, f)
"""


def test_local_end_to_end_with_standin_entry(tmp_path: Path) -> None:
    """The bundle's torchrun.sh on CPU: packs, verifies, then torchrun starts the stand-in in place of
    run_recipe.py with Bridge's arguments on each of 2 ranks."""
    standin = tmp_path / "run_recipe.py"
    standin.write_text(STANDIN)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    cfg = tmp_path / "exp.yaml"
    config = _config(recipe="llama32_1b_sft_config", script=str(standin))
    config["launch"]["device"] = "cpu"
    config["launch"]["env"] = {"BRIDGE_MARKER": "from-launch-env"}
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "bundle"
    run = _packcfg("render", str(cfg), "--out", str(out))
    assert run.returncode == 0, run.stderr
    env = {**os.environ, "STANDIN_OUT": str(recorded)}
    proc = subprocess.run(
        ["bash", str(out / "torchrun.sh")], capture_output=True, text=True, env=env, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    packed = out / "runs" / "llama32_1b_sft_bridge" / "packed" / "train.parquet"
    assert packed.is_file()
    records = [json.loads((recorded / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rec in records:
        assert rec["world"] == "2"
        assert rec["marker"] == "from-launch-env"
        assert rec["argv"][1:] == ["--recipe", "llama32_1b_sft_config", *_words(config)]
        # the packed path Bridge is given, relative to the job's folder, is where packcfg packed
        assert Path(rec["cwd"]).resolve() == out.resolve()


def _launch_standin(
    tmp_path: Path, backend: str, *args: str, launch: dict | None = None, env: dict | None = None
) -> tuple[Path, Path, Path, dict]:
    """`packcfg launch` of the Bridge recipe with the stand-in entry: (bundle, state dir, recorded dir,
    config). `launch`: more launch settings; `env`: the environment packcfg runs in."""
    standin = tmp_path / "run_recipe.py"
    standin.write_text(STANDIN)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    config = _config(recipe="llama32_1b_sft_config", script=str(standin))
    config["launch"].update(
        device="cpu", backend=backend, env={"BRIDGE_MARKER": "from-launch-env", "STANDIN_OUT": str(recorded)}
    )
    config["launch"].update(launch or {})
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    out, state = tmp_path / "bundle", tmp_path / "state"
    proc = _packcfg(
        "launch", str(cfg), "--out", str(out), "--state-dir", str(state), *args, cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, state, recorded, config


def _recorded_ranks(recorded: Path, config_overrides: list[str]) -> None:
    for r in (0, 1):
        rec = json.loads((recorded / f"rank{r}.json").read_text())
        assert rec["world"] == "2"
        assert rec["marker"] == "from-launch-env"
        assert rec["argv"][1] == "--recipe" and rec["argv"][2] == "llama32_1b_sft_config"
        assert rec["argv"][3:] == config_overrides


def test_nemo_run_local_executor_with_standin_entry(tmp_path: Path) -> None:
    """`packcfg launch --backend nemo-run --executor local`: the data-prep task packs and verifies first,
    then run.Script(stand-in, entrypoint="python") under launcher="torchrun" runs on 2 ranks with
    env_vars; `packcfg status` and `logs` then read the job through NeMo-Run's Experiment.from_id."""
    pytest.importorskip("nemo_run")
    out, state, recorded, config = _launch_standin(tmp_path, "nemo-run", "--executor", "local")
    assert (out / "runs" / "llama32_1b_sft_bridge" / "packed" / "train.parquet").is_file()
    store = JobStore(state)
    (rec,) = store.all()
    assert rec.status == "COMPLETED" and rec.native_state == "SUCCEEDED", rec
    assert list(rec.extra["task_dirs"]) == ["data-prep", "train"]  # NeMo-Run's tasks, in run order
    # Bridge is given the bundle's paths made absolute (NeMo-Run starts tasks outside the bundle).
    _recorded_ranks(recorded, _words(config, out))
    # A record last seen mid-run: `status` asks NeMo-Run again (Experiment.from_id(...).status()).
    rec.status, rec.native_state = "RUNNING", "RUNNING"
    store.save(rec)
    status = json.loads(_packcfg("status", rec.id, "--json", "--state-dir", str(state)).stdout)
    assert status["status"] == "COMPLETED" and status["native_state"] == "SUCCEEDED", status
    # `logs`: NeMo-Run's Experiment.logs(task) for each task, data prep first.
    logs = _packcfg("logs", rec.id, "--state-dir", str(state))
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.index("==> NeMo-Run task data-prep") < logs.stdout.index("==> NeMo-Run task train")
    assert "checked rows and source: ok" in logs.stdout  # packcfg verify ran in the data-prep task
    assert "stand-in rank 0: packs at" in logs.stdout and "stand-in rank 1: packs at" in logs.stdout
    cancel = _packcfg("cancel", rec.id, "--state-dir", str(state))
    assert cancel.returncode == 0 and "already COMPLETED" in cancel.stdout


def test_sbatch_4x8_passes_test_only(tmp_path: Path, slurm) -> None:
    """The 4 x 8 GPU engine-bridge sbatch.sh: sbatch parses every line; the resources this one-node CPU
    cluster does not have are overridden on the command line (as tests/launch/test_render.py does)."""
    config = _config()
    config["launch"].update(backend="slurm", nodes=4, gpus_per_node=8)
    directory = tmp_path / "b"
    bundle = render_bundle(config, directory=directory)
    bundle.write(directory)
    local = ["--nodes=1", "--gpus-per-node=0", "--partition=debug", "--account=", "--qos="]
    for script in ("sbatch.sh", "pack.sbatch.sh"):
        out = subprocess.run(
            ["sbatch", "--test-only", *local, script], cwd=directory, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert "to start at" in out.stderr


def test_slurm_end_to_end_with_standin_entry(tmp_path: Path, slurm) -> None:
    """`packcfg launch --backend slurm --wait` on the CI Slurm: the data-prep job packs, the training job
    verifies the packs, then torchrun starts the stand-in with Bridge's arguments on 2 ranks."""
    standin = tmp_path / "run_recipe.py"
    standin.write_text(STANDIN)
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    config = _config(recipe="llama32_1b_sft_config", script=str(standin))
    config["launch"].update(
        device="cpu",
        backend="slurm",
        env={"BRIDGE_MARKER": "from-launch-env", "STANDIN_OUT": str(recorded)},
    )
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    out = tmp_path / "bundle"
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "launch", str(cfg), "--out", str(out), "--wait"],
        capture_output=True,
        text=True,
        env={**os.environ, "PACKCFG_STATE_DIR": str(tmp_path / "state")},
        cwd=tmp_path,
        timeout=500,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "COMPLETED" in proc.stdout + proc.stderr
    for r in (0, 1):
        rec = json.loads((recorded / f"rank{r}.json").read_text())
        assert rec["world"] == "2"
        assert rec["marker"] == "from-launch-env"
        assert rec["argv"][1:] == ["--recipe", "llama32_1b_sft_config", *_words(config)]
    log = "".join(p.read_text() for p in (out / "logs").glob("train-*.out"))
    # `packcfg verify` ran in the training job, before torchrun
    assert "checked rows and source: ok" in log


def test_nemo_run_slurm_end_to_end_with_standin_entry(tmp_path: Path, slurm) -> None:
    """NeMo-Run's SlurmExecutor on the CI Slurm: the data-prep task packs into the bundle, and the
    training task, which NeMo-Run starts in `<job dir>/code`, still finds the packs (the stand-in opens
    them, as Bridge would); status and logs come from NeMo-Run's Experiment.from_id."""
    pytest.importorskip("nemo_run")
    out, state, recorded, config = _launch_standin(tmp_path, "nemo-run", "--wait", "--timeout", "400")
    (rec,) = JobStore(state).all()
    assert rec.status == "COMPLETED" and rec.native_state == "SUCCEEDED", rec
    assert rec.native_id and rec.pack_native_id and rec.native_id != rec.pack_native_id  # two Slurm jobs
    _recorded_ranks(recorded, _words(config, out))
    cwd = json.loads((recorded / "rank0.json").read_text())["cwd"]
    assert (
        Path(cwd) == Path(rec.extra["task_dirs"]["train"]) / "code"
    )  # not the bundle: why paths are absolute
    logs = _packcfg("logs", rec.id, "--state-dir", str(state))
    assert "checked rows and source: ok" in logs.stdout and "stand-in rank 1: packs at" in logs.stdout


def test_nemo_run_slurm_cancel(tmp_path: Path, slurm) -> None:
    """`packcfg cancel` of a NeMo-Run Slurm job goes through Experiment.from_id(...).cancel(task); the
    job ends CANCELLED in Slurm's own accounting."""
    pytest.importorskip("nemo_run")
    config = yaml.safe_load((ROOT / "recipes" / "tiny_cpu_sft.yaml").read_text())
    config["launch"].update(device="cpu", backend="nemo-run")
    config["train"]["train_iters"] = 100000
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    state = tmp_path / "state"
    proc = _packcfg("launch", str(cfg), "--out", str(tmp_path / "bundle"), "--state-dir", str(state))
    assert proc.returncode == 0, proc.stderr
    (rec,) = JobStore(state).all()
    out = _packcfg("cancel", rec.id, "--state-dir", str(state))
    assert out.returncode == 0 and "CANCELLED" in out.stdout, out.stdout + out.stderr
    sacct = subprocess.run(
        ["sacct", "-n", "-P", "-X", "-j", str(rec.native_id), "-o", "State"], capture_output=True, text=True
    )
    assert sacct.stdout.startswith("CANCELLED"), sacct.stdout
    assert (
        json.loads(_packcfg("status", rec.id, "--json", "--state-dir", str(state)).stdout)["status"]
        == "CANCELLED"
    )


def test_nemo_run_slurm_script_sees_bundle_paths(tmp_path: Path) -> None:
    """The sbatch script NeMo-Run renders for engine bridge in a container: Bridge's packed paths and
    checkpoint folder are absolute paths inside the bundle, the bundle is mounted at its own path, and the
    data-prep task packs from the bundle; NeMo-Run's own working directory is its job folder's code/."""
    pytest.importorskip("nemo_run")
    config = _config(recipe="llama32_1b_sft_config")
    config["launch"].update(backend="nemo-run", container_image="nvcr.io#nvidia/nemo:25.09")
    out = tmp_path / "bundle"
    render_bundle(config, directory=out).write(out)
    env = {**os.environ, "NEMORUN_HOME": str(out / "nemorun")}
    proc = subprocess.run(
        [sys.executable, "nemo_run_driver.py", "--dryrun"], cwd=out, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (train,) = (out / "nemorun").rglob("train_sbatch.sh")
    (prep,) = (out / "nemorun").rglob("data-prep_sbatch.sh")
    srun = next(line for line in train.read_text().splitlines() if line.startswith("srun "))
    words = shlex.split(srun)
    mounts = words[words.index("--container-mounts") + 1].split(",")
    assert f"{out}:{out}" in mounts
    assert words[words.index("--container-workdir") + 1] == "/nemo_run/code"
    given = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    npy = f"{out}/runs/llama32_1b_sft_bridge/packed/train.npy"  # Bridge 0.3.1 reads packs only as .npy
    # 0.3.1's dataset is handed over whole (dataset=null, then dataset={...}): the bundle's own folder in it
    assert f"packed_train_data_path:{npy}" in given["dataset"]
    assert f"packed_metadata_path:{out}/runs/llama32_1b_sft_bridge/packed/metadata.json" in given["dataset"]
    assert given["checkpoint.save"] == f"{out}/runs/llama32_1b_sft_bridge/checkpoints"
    # the data-prep task runs `packcfg pack config.yaml` from the bundle: its relative paths land there
    (script,) = (out / "nemorun").rglob("scripts/data-prep.sh")
    prep_script = script.read_text()
    assert f"cd {out} &&" in prep_script and "packcfg pack config.yaml" in prep_script
    # ...and after `packcfg verify`, writes the .npy Bridge is given
    # (the data prep runs in the bundle: config.yaml's relative paths)
    assert prep_script.index("packcfg verify config.yaml") < prep_script.index(
        "--bridge-npy runs/llama32_1b_sft_bridge/packed/train.npy"
    )
    assert "data-prep.sh" in prep.read_text()
    # local and Slurm bundles name the bundle through ${oc.env:PACKCFG_BUNDLE}, which their scripts export
    config["launch"]["backend"] = "slurm"
    slurm_bundle = render_bundle(config, directory=out)
    assert (
        "packed_train_data_path:'\"'\"'${oc.env:PACKCFG_BUNDLE}/runs/llama32_1b_sft_bridge/packed/train.npy"
        in (slurm_bundle.files["sbatch.sh"].decode())
    )


def test_anchored_paths_leaves_ids_and_absolute_paths() -> None:
    data = {
        "dataset": {
            "dataset_root": "data",
            "packed_sequence_specs": {"packed_train_data_path": "p/t.parquet"},
        },
        "tokenizer": {"tokenizer_model": "meta-llama/Llama-3.2-1B"},
        "checkpoint": {"save": "/abs/ckpt", "load": "s3://bucket/ckpt", "save_interval": 20},
        "train": {"train_iters": 4},
    }
    got = anchored_paths(data, Path("/b"))
    assert got["dataset"] == {
        "dataset_root": "/b/data",
        "packed_sequence_specs": {"packed_train_data_path": "/b/p/t.parquet"},
    }
    assert got["tokenizer"]["tokenizer_model"] == "meta-llama/Llama-3.2-1B"  # may be a hub id
    assert got["checkpoint"] == data["checkpoint"] and got["train"] == data["train"]
