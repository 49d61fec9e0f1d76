"""`packcfg render`: the bundle's files, a 4-node x 8-GPU sbatch script line by line (and through
`sbatch --test-only` on the real Slurm), multi-node srun/torchrun as executed, and reproducibility."""

from __future__ import annotations

import json
import py_compile
import subprocess
from pathlib import Path

import pytest
import yaml

from packcfg.launch import service

from .conftest import FOUR_NODE, TINY, packcfg

BUNDLE_FILES = {
    "config.yaml",
    "manifest.json",
    "torchrun.sh",
    "sbatch.sh",
    "pack.sbatch.sh",
    "nemo_run_driver.py",
    "launchers/train.py",
}


@pytest.fixture(scope="module")
def four_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("four_node")
    directory, _, _ = service.render([TINY, FOUR_NODE], out)
    return directory


def test_bundle_has_every_file(tmp_path: Path) -> None:
    directory, bundle, gate = service.render([TINY], tmp_path / "b")
    written = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()}
    lib = {name for name in written if name.startswith("lib/")}
    assert written - lib == BUNDLE_FILES
    # packcfg itself travels with the bundle: its modules and data, no bytecode.
    assert {"lib/packcfg/__init__.py", "lib/packcfg/cli.py", "lib/packcfg/train/loop.py"} <= lib
    assert any(name.startswith("lib/packcfg/data/sample_sft/") for name in lib)
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in lib)
    assert len(lib) == bundle.manifest["packcfg_source"]["files"]
    assert (directory / "logs").is_dir() and not any((directory / "logs").iterdir())  # Slurm won't mkdir it
    assert gate.passed
    resolved = yaml.safe_load((directory / "config.yaml").read_text())
    assert resolved == bundle.config
    assert resolved["launch"]["gpus_per_node"] == 2
    for script in ("torchrun.sh", "sbatch.sh", "pack.sbatch.sh"):
        assert subprocess.run(["bash", "-n", str(directory / script)]).returncode == 0
        assert (directory / script).stat().st_mode & 0o111
    py_compile.compile(str(directory / "nemo_run_driver.py"), doraise=True)


def test_four_node_sbatch_line_by_line(four_node: Path) -> None:
    lines = (four_node / "sbatch.sh").read_text().splitlines()
    manifest = json.loads((four_node / "manifest.json").read_text())
    assert lines[:14] == [
        "#!/bin/bash",
        "#SBATCH --job-name=llama3_8b_packed_sft",
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",  # one srun task per node; torchrun starts the 8 ranks
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=batch",
        "#SBATCH --account=llm_research",
        "#SBATCH --qos=normal",
        "#SBATCH --time=04:00:00",
        "#SBATCH --export=ALL",
        "#SBATCH --exclusive",
        "#SBATCH --kill-on-invalid-dep=yes",
        f"#SBATCH --chdir={four_node}",  # the bundle: no reliance on where sbatch is run
        "#SBATCH --output=logs/train-%j.out",
    ]
    body = [line for line in lines[14:] if not line.lstrip().startswith("#")]
    mounts = (
        '--container-mounts=/lustre/data:/data:ro,/lustre/ckpt/llama3_8b:/lustre/ckpt/llama3_8b,"$PWD:$PWD"'
    )
    assert body == [
        "set -euo pipefail",
        f"cd -- {four_node}",
        'export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"',
        ': "${WANDB_API_KEY:?packcfg: WANDB_API_KEY must be set in the environment that submits this job}"',
        "export NCCL_DEBUG=WARN",
        "export TOKENIZERS_PARALLELISM=false",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        "rdzv_port=$((20000 + SLURM_JOB_ID % 20000))",
        "mkdir -p output",
        "mkdir -p -- /lustre/ckpt/llama3_8b  # a container mount's source must exist",
        # every node's Python is checked first, in the container the job runs in
        'srun --ntasks-per-node=1 --nodes="$SLURM_NNODES" \\',
        "  --container-image='nvcr.io#nvidia/pytorch:25.01-py3' \\",
        f"  {mounts} \\",
        '  --container-workdir="$PWD" \\',
        "  python3 -m packcfg.launch.jobenv "
        "'packcfg[train]:yaml,ruamel.yaml,pydantic,jinja2,numpy,torch,megatron.core,pyarrow,tokenizers'",
        "if [ ! -e /data/packed/train.parquet ]; then",
        "  srun --nodes=1 --ntasks=1 \\",
        "    --container-image='nvcr.io#nvidia/pytorch:25.01-py3' \\",
        f"    {mounts} \\",
        '    --container-workdir="$PWD" \\',
        "    python3 -m packcfg pack config.yaml",
        "fi",
        'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \\',
        "  --container-image='nvcr.io#nvidia/pytorch:25.01-py3' \\",
        f"  {mounts} \\",
        '  --container-workdir="$PWD" \\',
        "  torchrun \\",
        '  --nnodes="$SLURM_NNODES" \\',
        "  --nproc-per-node=8 \\",
        "  --rdzv-backend=c10d \\",
        '  --rdzv-endpoint="$head_node:$rdzv_port" \\',
        '  --rdzv-id="$SLURM_JOB_ID" \\',
        "  launchers/train.py config.yaml --out output",
    ]
    assert f"config sha256:{manifest['config_sha256']}" in "\n".join(lines)


def test_four_node_pack_job(four_node: Path) -> None:
    lines = (four_node / "pack.sbatch.sh").read_text().splitlines()
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=llama3_8b_packed_sft-pack",
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --partition=batch",
        "#SBATCH --account=llm_research",
        "#SBATCH --qos=normal",
        "#SBATCH --time=04:00:00",
        "#SBATCH --export=ALL",
        f"#SBATCH --chdir={four_node}",
        "#SBATCH --output=logs/pack-%j.out",
    ]
    assert lines[-1] == "  python3 -m packcfg pack config.yaml"


def test_four_node_runs_one_torchrun_per_node_as_executed(four_node: Path, harness) -> None:
    """Execute sbatch.sh as Slurm would on the batch host (srun, scontrol stubbed): one srun over
    the 4 nodes, one task each, a torchrun of 8 with c10d rendezvous on the first node."""
    h = harness()
    result = h.run(
        four_node / "sbatch.sh",
        env={
            "SLURM_SUBMIT_DIR": str(four_node),
            "SLURM_JOB_ID": "4242",
            "SLURM_NNODES": "4",
            "SLURM_JOB_NODELIST": "gpu[001-004]",
            "HARNESS_NODES": "gpu001 gpu002 gpu003 gpu004",
            "WANDB_API_KEY": "from-the-environment",
        },
    )
    assert result.returncode == 0, result.stderr
    calls = h.calls()
    # The packed data (/data/... in the container) is not on this host: data prep runs first.
    assert [c["prog"] for c in calls] == ["scontrol", "srun", "srun", "srun"]
    # first every node's Python is checked, in the job's container
    assert calls[1]["argv"][:2] == ["--ntasks-per-node=1", "--nodes=4"]
    assert calls[1]["argv"][-4:-1] == ["python3", "-m", "packcfg.launch.jobenv"]
    assert calls[2]["argv"][:2] == ["--nodes=1", "--ntasks=1"]
    assert calls[2]["argv"][-5:] == ["python3", "-m", "packcfg", "pack", "config.yaml"]
    srun = calls[3]
    assert srun["cwd"] == str(four_node)
    assert srun["env"]["PYTHONPATH"] == f"{four_node}/lib"
    assert srun["argv"] == [
        "--nodes=4",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        "--container-mounts=/lustre/data:/data:ro,/lustre/ckpt/llama3_8b:/lustre/ckpt/llama3_8b,"
        f"{four_node}:{four_node}",
        f"--container-workdir={four_node}",
        "torchrun",
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=gpu001:24242",
        "--rdzv-id=4242",
        "launchers/train.py",
        "config.yaml",
        "--out",
        "output",
    ]
    assert srun["env"]["NCCL_DEBUG"] == "WARN"
    assert srun["env"]["WANDB_API_KEY"] == "from-the-environment"


def test_torchrun_script_single_node(tmp_path: Path, harness) -> None:
    directory, _, _ = service.render([TINY], tmp_path / "b")
    h = harness()
    result = h.run(directory / "torchrun.sh")
    assert result.returncode == 0, result.stderr
    calls = h.calls()
    # The packed data does not exist in a fresh bundle: the script packs it first.
    assert [c["prog"] for c in calls] == ["python3", "python3", "torchrun"]
    # first this Python is checked for what the job imports (one line and exit 2 when it lacks any)
    assert calls[0]["argv"][:2] == ["-m", "packcfg.launch.jobenv"]
    assert calls[1]["argv"] == ["-m", "packcfg", "pack", "config.yaml"]
    calls = calls[1:]
    assert calls[1]["argv"] == [
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=2",
        "launchers/train.py",
        "config.yaml",
        "--out",
        "output",
    ]
    assert calls[1]["cwd"] == str(directory)
    assert calls[1]["env"]["PYTHONPATH"] == f"{directory}/lib"  # the bundle's own packcfg comes first


def test_cpu_recipe_requests_cores_not_gpus(tmp_path: Path) -> None:
    # The tiny recipe is a CPU job as shipped: its sbatch asks for cores, never for GPUs.
    directory, _, _ = service.render([TINY], tmp_path / "b")
    text = (directory / "sbatch.sh").read_text()
    assert "#SBATCH --cpus-per-task=2\n" in text
    assert "--gpus" not in text
    gpu, _, _ = service.render([TINY], tmp_path / "g", ["launch.device=gpu"])
    assert "#SBATCH --gpus-per-node=2\n" in (gpu / "sbatch.sh").read_text()


def test_mounts_derived_from_the_config_paths(tmp_path: Path) -> None:
    directory, bundle, _ = service.render(
        [TINY],
        tmp_path / "b",
        [
            "launch.backend=slurm",
            "launch.container_image=nvcr.io#nvidia/nemo:25.04",
            "launch.mounts=[/scratch:/scratch]",
            "checkpoint.save=/ckpt/run1",
            "checkpoint.load=/ckpt/run0",
            "dataset.dataset_root=/datasets/sft",
            "dataset.offline_packing_specs.packed_train_data_path=/packed/sft/train.parquet",
            "tokenizer.tokenizer_model=/scratch/tok/tokenizer.json",
        ],
    )
    assert bundle.manifest["mounts"] == [
        "/scratch:/scratch",  # launch.mounts first; the tokenizer under it needs no other mount
        "/ckpt/run0:/ckpt/run0",
        "/ckpt/run1:/ckpt/run1",
        "/datasets/sft:/datasets/sft",
        "/packed/sft:/packed/sft",  # a file setting: its folder
    ]
    driver = (directory / "nemo_run_driver.py").read_text()
    assert "'/datasets/sft:/datasets/sft'" in driver
    with pytest.raises(service.LaunchError, match="checkpoint.save = '/ck pt': cannot be mounted"):
        service.gate_and_render(
            [TINY], ["launch.backend=slurm", "launch.container_image=img:1", "checkpoint.save='/ck pt'"]
        )


def test_sbatch_test_only_accepts_rendered_scripts(four_node: Path, tmp_path: Path, slurm) -> None:
    # The tiny recipe as is (CPU device) fits the single-node cluster: sbatch checks it in full.
    directory, _, _ = service.render([TINY], tmp_path / "tiny", ["launch.device=cpu"])
    for script in ("sbatch.sh", "pack.sbatch.sh"):
        out = subprocess.run(["sbatch", "--test-only", script], cwd=directory, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "to start at" in out.stderr
    # The 4x8 script: sbatch parses every #SBATCH line; the resources this one-node CPU cluster does
    # not have (4 nodes, 8 GPUs, partition/account/qos) are overridden on the command line.
    local = [
        "--nodes=1",
        "--gpus-per-node=0",
        "--partition=debug",
        "--account=",
        "--qos=",
        "--exclusive=user",
    ]
    out = subprocess.run(
        ["sbatch", "--test-only", *local, "sbatch.sh"], cwd=four_node, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "to start at" in out.stderr


def contents(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def frozen_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """One snapshot of packcfg's own files for the whole test (a checkout being edited meanwhile would
    change the vendored copy between two renders: that is a different packcfg, not irreproducibility)."""
    from packcfg.launch import bundle as bundle_module

    snapshot = bundle_module.packcfg_source()
    monkeypatch.setattr(bundle_module, "packcfg_source", lambda: dict(snapshot))


def test_render_is_byte_for_byte_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen_source: None
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    first, _, _ = service.render([TINY], tmp_path / "one")
    again = contents(first)
    first, _, _ = service.render([TINY], tmp_path / "one")  # re-render over its own earlier bundle
    assert contents(first) == again
    # Into another folder: only what names the folder differs (#SBATCH --chdir, cd, the manifest).
    second, _, _ = service.render([TINY], tmp_path / "elsewhere" / "two")
    one, two = contents(first), contents(second)
    assert one.keys() == two.keys()
    differ = {name for name in one if one[name] != two[name]}
    assert differ == {"sbatch.sh", "pack.sbatch.sh", "manifest.json"}
    for name in ("sbatch.sh", "pack.sbatch.sh"):
        assert one[name].decode().replace(str(first), "DIR") == two[name].decode().replace(str(second), "DIR")
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["created_at"] is None
    # No random rendezvous id (NeMo-Run would put one in): the Slurm job id is the id.
    assert '--rdzv-id="$SLURM_JOB_ID"' in (first / "sbatch.sh").read_text()
    other = {n: d for n, d in one.items() if n not in ("sbatch.sh", "pack.sbatch.sh", "manifest.json")}
    assert str(tmp_path) not in "".join(d.decode(errors="replace") for d in other.values())


def test_source_date_epoch_stamps_creation_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frozen_source: None
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    one, _, _ = service.render([TINY], tmp_path / "one")
    again = (one / "manifest.json").read_bytes()
    one, _, _ = service.render([TINY], tmp_path / "one")
    assert (one / "manifest.json").read_bytes() == again
    assert json.loads((one / "manifest.json").read_text())["created_at"] == "2023-11-14T22:13:20Z"


def test_manifest_records_provenance(tmp_path: Path) -> None:
    directory, bundle, _ = service.render([TINY], tmp_path / "b", ["train.train_iters=3"])
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["config_sha256"] == bundle.config_hash
    assert manifest["packcfg_version"]
    assert manifest["sources"] == {
        "files": [str(TINY.resolve())],
        "overrides": ["train.train_iters=3"],
        "backend_flag": None,
    }
    assert set(manifest["git"]) == {"packcfg", "config"}
    assert manifest["gate"]["allowed"] == []
    for name, digest in manifest["files"].items():
        import hashlib

        assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest


def test_strict_undefined_is_an_error() -> None:
    """A variable missing from the context fails the render; it never becomes an empty string."""
    from jinja2 import StrictUndefined, UndefinedError

    from packcfg.launch.bundle import _environment, slurm_options
    from packcfg.launch.spec import launch_spec

    env = _environment()
    assert env.undefined is StrictUndefined
    spec = launch_spec(yaml.safe_load(TINY.read_text()))
    context = {
        "version": "x",
        "spec": spec,
        "packed_data": None,
        "slurm_options": slurm_options(spec),
        "container_args": [],
        "mounts": [],
        "derived_mounts": [],
        "bundle_dir": None,
        "sbatch_chdir": None,
        "lib": "lib",
        "bridge_args": None,
        "env_check": "true",
        "env_check_pack": "true",
        "bridge_prep": [],
        "bundle_env": "PACKCFG_BUNDLE",
    }
    for name in ("torchrun.sh.j2", "sbatch.sh.j2", "pack.sbatch.sh.j2", "nemo_run_driver.py.j2"):
        with pytest.raises(UndefinedError, match="config_hash"):
            env.get_template(name).render(context)
        env.get_template(name).render({**context, "config_hash": "0" * 64})


def test_render_cli(tmp_path: Path) -> None:
    out = packcfg("render", str(TINY), "--out", str(tmp_path / "b"), "--set", "train.train_iters=5")
    assert out.returncode == 0, out.stderr
    assert "config sha256" in out.stderr
    assert yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())["train"]["train_iters"] == 5
    # a summary, not one line per file: the folder, the job scripts, how many files and bytes
    files = sorted(p for p in (tmp_path / "b").rglob("*") if p.is_file())
    lines = out.stdout.splitlines()
    assert lines[0] == f"bundle {tmp_path / 'b'}/"
    scripts = next(line for line in lines if line.lstrip().startswith("job scripts"))
    assert {"sbatch.sh", "torchrun.sh", "pack.sbatch.sh", "nemo_run_driver.py"} <= set(
        scripts.split(None, 2)[2].split(", ")
    )
    size = sum(p.stat().st_size for p in files) / 1024**2
    assert f"  {len(files)} files, {size:.1f} MiB" in out.stdout
    assert len(lines) < 10 < len(files)

    verbose = packcfg("render", str(TINY), "--out", str(tmp_path / "b"), "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert sorted(verbose.stdout.splitlines()) == sorted(str(p) for p in files)


def test_render_cli_bad_input_is_one_line(tmp_path: Path) -> None:
    out = packcfg("render", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "b"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "missing.yaml" in out.stderr
