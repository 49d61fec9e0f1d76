"""Injection: a value with `$(...)`, backticks, quotes, semicolons or a newline can run nothing.

Each payload would create a marker file if any shell ever evaluated it. Values that reach a script
body are quoted: the scripts are rendered, checked with `bash -n`, and executed under a harness
(every external command stubbed) that shows the value arrives literally and the marker never appears.
Values that cannot be quoted (an `#SBATCH` line, a container reference) are refused with one line.
"""

from __future__ import annotations

import py_compile
from pathlib import Path

import pytest
import yaml

from packcfg.launch import LaunchError, service
from packcfg.launch.bundle import render_bundle
from packcfg.launch.spec import launch_spec

from .conftest import TINY, packcfg

MARKER = Path("/tmp/pwned-packcfg-launch-test")


def payloads(marker: Path) -> list[str]:
    cmd = f"touch {marker}"
    return [
        f"$({cmd})",
        f"`{cmd}`",
        f"'; {cmd}; '",
        f'"; {cmd}; "',
        f"x; {cmd}",
        f"x\n{cmd}\n",
        f"x' $({cmd}) '",
        f"${{X:-$({cmd})}}",
        f"x && {cmd} || {cmd}",
    ]


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    path = tmp_path / "pwned-XYZ"
    yield path
    assert not path.exists(), "an injected command ran"


def tiny_config(**launch: object) -> dict:
    config = yaml.safe_load(TINY.read_text())
    config["launch"].update(launch)
    return config


def write(config: dict, directory: Path) -> Path:
    return render_bundle(config).write(directory)


@pytest.mark.parametrize("index", range(len(payloads(Path("/m")))))
def test_env_values_are_literal(index: int, tmp_path: Path, marker: Path, harness) -> None:
    payload = payloads(marker)[index]
    directory = write(tiny_config(env={"USER_NOTE": payload}), tmp_path / "b")
    for script in ("torchrun.sh", "sbatch.sh", "pack.sbatch.sh"):
        assert subprocess_ok(["bash", "-n", str(directory / script)])
    slurm_env = {
        "SLURM_SUBMIT_DIR": str(directory),
        "SLURM_JOB_ID": "7",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "localhost",
    }
    for script, env, prog in (
        ("torchrun.sh", {}, "torchrun"),
        ("sbatch.sh", slurm_env, "srun"),
        ("pack.sbatch.sh", slurm_env, "srun"),
    ):
        h = harness()
        result = h.run(directory / script, env=env)
        assert result.returncode == 0, result.stderr
        launched = [c for c in h.calls() if c["prog"] == prog]
        # sbatch.sh: data prep (the packed file is missing), then training.
        assert len(launched) == (2 if script == "sbatch.sh" else 1)
        assert all(c["env"]["USER_NOTE"] == payload for c in launched)  # arrived literally, unevaluated
        assert not marker.exists()
    py_compile.compile(str(directory / "nemo_run_driver.py"), doraise=True)


@pytest.mark.parametrize("index", range(len(payloads(Path("/m")))))
def test_packed_data_path_is_quoted(index: int, tmp_path: Path, marker: Path, harness) -> None:
    payload = payloads(marker)[index]
    config = tiny_config()
    config["dataset"]["offline_packing_specs"]["packed_train_data_path"] = payload
    directory = write(config, tmp_path / "b")
    assert subprocess_ok(["bash", "-n", str(directory / "torchrun.sh")])
    h = harness()
    result = h.run(directory / "torchrun.sh")
    assert result.returncode == 0, result.stderr
    # the Python check, then (the file is missing) pack, then train
    assert [c["prog"] for c in h.calls()] == ["python3", "python3", "torchrun"]


@pytest.mark.parametrize("index", range(len(payloads(Path("/m"))) - 1))  # a folder name has no NUL/`/`
def test_bundle_folder_name_is_never_evaluated(index: int, tmp_path: Path, marker: Path, harness) -> None:
    name = payloads(marker)[index].replace("/", "_")
    directory = write(tiny_config(), tmp_path / f"b{name}")
    h = harness()
    result = h.run(directory / "torchrun.sh")
    assert result.returncode == 0, result.stderr
    assert h.calls()[-1]["cwd"] == str(directory)
    h = harness()
    slurm_env = {
        "SLURM_SUBMIT_DIR": str(directory),
        "SLURM_JOB_ID": "7",
        "SLURM_NNODES": "1",
        "SLURM_JOB_NODELIST": "localhost",
    }
    result = h.run(directory / "sbatch.sh", env=slurm_env)
    assert result.returncode == 0, result.stderr
    assert h.calls()[-1]["cwd"] == str(directory)


@pytest.mark.parametrize("key", ["job_name", "partition", "account", "qos", "time", "container_image"])
@pytest.mark.parametrize("index", range(len(payloads(Path("/m")))))
def test_unquotable_values_are_refused(key: str, index: int, marker: Path) -> None:
    payload = payloads(marker)[index]
    with pytest.raises(LaunchError, match=f"launch.{key}") as err:
        launch_spec(tiny_config(**{key: payload}))
    assert "\n" not in str(err.value).replace(repr(payload), "")


@pytest.mark.parametrize("index", range(len(payloads(Path("/m")))))
def test_mounts_and_env_names_are_refused(index: int, marker: Path) -> None:
    payload = payloads(marker)[index]
    with pytest.raises(LaunchError, match="launch.mounts"):
        launch_spec(tiny_config(container_image="nvcr.io#nvidia/pytorch:25.01-py3", mounts=[payload]))
    with pytest.raises(LaunchError, match="launch.env"):
        launch_spec(tiny_config(env={payload: "x"}))
    with pytest.raises(LaunchError, match="launch.env_from"):
        launch_spec(tiny_config(env_from=[payload]))


def test_job_name_derived_from_recipe_name_is_made_safe(marker: Path) -> None:
    config = tiny_config()
    config["recipe"]["name"] = f"my run $(touch {marker})"
    spec = launch_spec(config)
    assert spec.job_name == ("my_run___touch_" + str(marker).replace("/", "_") + "_")[:128]


def test_refusal_through_the_cli_is_one_line(tmp_path: Path, marker: Path) -> None:
    override = tmp_path / "bad.yaml"
    override.write_text(yaml.safe_dump({"launch": {"job_name": f"x$(touch {marker})"}}))
    out = packcfg("render", str(TINY), "-c", str(override), "--out", str(tmp_path / "b"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("packcfg: launch.job_name = ") and out.stderr.count("\n") == 1
    assert not (tmp_path / "b").exists()


# --- secrets -------------------------------------------------------------------------------------

SECRET = "s3cr3t-value-never-in-a-file"


def test_literal_secret_is_refused() -> None:
    with pytest.raises(LaunchError, match="looks like a secret: pass it by name"):
        launch_spec(tiny_config(env={"WANDB_API_KEY": SECRET}))
    with pytest.raises(LaunchError, match="HF_TOKEN"):
        launch_spec(tiny_config(env={"HF_TOKEN": SECRET}))
    # Not secrets: a word that merely contains TOKEN.
    launch_spec(tiny_config(env={"TOKENIZERS_PARALLELISM": "false"}))


@pytest.mark.parametrize("form", ["env_from", "reference"])
def test_secret_passes_by_name_only(form: str, tmp_path: Path, harness) -> None:
    launch = (
        {"env_from": ["WANDB_API_KEY"]}
        if form == "env_from"
        else {"env": {"WANDB_API_KEY": "${WANDB_API_KEY}"}}
    )
    directory = write(tiny_config(**launch), tmp_path / "b")
    data = b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())  # the bundle has binaries
    assert SECRET.encode() not in data
    h = harness()
    result = h.run(directory / "torchrun.sh", env={"WANDB_API_KEY": SECRET})
    assert result.returncode == 0, result.stderr
    assert h.calls()[-1]["env"]["WANDB_API_KEY"] == SECRET  # reaches the job at run time
    # Unset in the submitting environment: the job stops before it starts anything, saying why.
    h = harness()
    result = h.run(directory / "torchrun.sh")
    assert result.returncode != 0
    assert "WANDB_API_KEY must be set" in result.stderr
    assert h.calls() == []


def test_renamed_secret_reference(tmp_path: Path, harness) -> None:
    directory = write(tiny_config(env={"WANDB_API_KEY": "${MY_WANDB}"}), tmp_path / "b")
    assert 'export WANDB_API_KEY="${MY_WANDB}"' in (directory / "torchrun.sh").read_text()
    h = harness()
    result = h.run(directory / "torchrun.sh", env={"MY_WANDB": SECRET})
    assert result.returncode == 0, result.stderr
    assert h.calls()[-1]["env"]["WANDB_API_KEY"] == SECRET


def test_service_render_refuses_before_writing(tmp_path: Path) -> None:
    override = tmp_path / "o.yaml"
    override.write_text(yaml.safe_dump({"launch": {"partition": "a;b"}}))
    with pytest.raises(LaunchError, match="launch.partition"):
        service.render([TINY, override], tmp_path / "b")
    assert not (tmp_path / "b").exists()


def subprocess_ok(cmd: list[str]) -> bool:
    import subprocess

    return subprocess.run(cmd, capture_output=True).returncode == 0
