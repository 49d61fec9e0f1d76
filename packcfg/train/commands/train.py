"""`packcfg train CONFIG`: run the bundled executor on a config (standard-library imports only here).

On a single node outside torchrun, a config whose launch section asks for several processes
(`launch.gpus_per_node`, on CPU the number of gloo processes) is re-executed under
`python -m torch.distributed.run --standalone --nproc-per-node N`, so the run has the layout the config
declares (e.g. DP 2 for the tiny CPU recipe). `--nproc-per-node 1` runs in this process instead.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from packcfg.core.cli_args import add_merge_arguments, add_out_argument

DESCRIPTION = "Train a megatron-core GPT on packed (THD), in-batch packed or padded batches."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="experiment YAML")
    add_merge_arguments(parser, legacy_config_file=True)
    add_out_argument(
        parser,
        "--output-dir",
        dest="output_dir",
        help="the run folder, holding everything the run writes: metrics.jsonl, checkpoints in DIR/checkpoints, "
        "packed data in DIR/packed (default: runs/<recipe.name>, checkpoint.save and the config's packed paths)",
    )
    parser.add_argument(
        "--batching",
        choices=["packed", "in_batch", "padded"],
        help="batch layout (default: the config's packing mode)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in checkpoint.save (or checkpoint.load)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start fresh in a run folder that holds another run's checkpoints or metrics (they are removed)",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CODE",
        help="let this lint error through the gate (repeatable; comma-separated codes allowed)",
    )
    parser.add_argument("--profile", choices=("current", "legacy"), help="lint profile for the gate")
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="processes to start on this node (default: launch.gpus_per_node; 1 = no torchrun)")  # fmt: skip


# Under torchrun each rank writes its one-line error here (PACKCFG_ERROR_DIR/rank<N>.txt); the parent prints it.
ERROR_DIR_ENV = "PACKCFG_ERROR_DIR"


def run(args: argparse.Namespace) -> int:
    from packcfg.core.config import ConfigError, load_config

    on_rank = "RANK" in os.environ
    try:
        config = load_config([args.config, *args.config_files], args.overrides)
        if not on_rank and _outputs_follow_output_dir(config, args):
            config = load_config([args.config, *args.config_files], args.overrides)
    except ConfigError as exc:
        return _fail(f"packcfg train: {exc}")

    if not on_rank:  # the user's command: gate and check once, before any process starts
        code = _gate_and_check(config, args)
        if code is not None:
            return code

    nproc = args.nproc_per_node or _processes_per_node(config)
    if nproc > 1 and not on_rank and _nodes(config) == 1:
        return _reexec_under_torchrun(nproc, config, args)

    from packcfg.packing.errors import PackingError
    from packcfg.train.loop import TrainOptions, train

    try:
        train(config, TrainOptions(batching=args.batching, output_dir=args.output_dir, resume=args.resume))
    # CheckpointError is a ValueError, FileNotFoundError an OSError; PackingError: the data, packed on first use
    except (ValueError, OSError, PackingError) as exc:
        return _fail(f"packcfg train: {exc}")
    return 0


PACKED_KEYS = ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path")


def _outputs_follow_output_dir(config: dict, args: argparse.Namespace) -> bool:
    """`--out DIR` is the run's folder and holds everything the run writes: metrics in DIR, checkpoints in
    DIR/checkpoints, the packed data in DIR/packed/<file name as configured>, each unless the command line
    sets that key itself. Added as overrides (the config's own spelling of the specs section), so the
    ranks see the same. Whether any override was added."""
    if not args.output_dir:
        return False
    out = Path(args.output_dir)
    named = {o.lstrip("+").split("=", 1)[0] for o in args.overrides}
    moved: dict[str, Path] = {}
    if (config.get("checkpoint") or {}).get("save"):
        moved["checkpoint.save"] = out / "checkpoints"
    dataset = config.get("dataset") or {}
    section = next(
        (k for k in ("offline_packing_specs", "packed_sequence_specs") if isinstance(dataset.get(k), dict)),
        None,
    )
    if section is not None:
        for key in PACKED_KEYS:
            value = dataset[section].get(key)
            if isinstance(value, str) and value:
                moved[f"dataset.{section}.{key}"] = out / "packed" / Path(value).name
    added = [f"++{key}={path}" for key, path in moved.items() if key not in named]
    args.overrides.extend(added)
    return bool(added)


def _fail(message: str) -> int:
    """Print the one-line error; on a torchrun rank also leave it for the parent, which prints it once."""
    message = " ".join(message.split("\n")).strip()
    print(message, file=sys.stderr)
    folder = os.environ.get(ERROR_DIR_ENV)
    if folder and "RANK" in os.environ:
        try:
            Path(folder, f"rank{int(os.environ['RANK']):05d}.txt").write_text(
                message + "\n", encoding="utf-8"
            )
        except (OSError, ValueError):
            pass
    return 2


def _gate_and_check(config: dict, args: argparse.Namespace) -> int | None:
    """The lint gate (as `launch` runs it), the checks lint cannot make, and the run-folder rule."""
    from packcfg.core.config import ConfigError
    from packcfg.lint.gate import format_diagnostics, run_gate

    files = [args.config, *args.config_files]
    try:
        gate = run_gate(files, args.overrides, allow=args.allow, profile=args.profile)
    except ConfigError as exc:
        return _fail(f"packcfg train: {exc}")
    if gate.unused_allows:
        print(f"packcfg train: --allow {', '.join(gate.unused_allows)}: no such finding", file=sys.stderr)
    if not gate.passed:
        sys.stderr.write(format_diagnostics(gate, files))
        codes = sorted({d.code for d in gate.blocking})
        print(
            f"packcfg train: refused: {len(gate.blocking)} lint error(s) ({', '.join(codes)}); fix them, or pass "
            "--allow CODE to train anyway",
            file=sys.stderr,
        )
        return 1
    for code, hits in gate.allowed.items():
        print(f"packcfg train: --allow {code}: training despite {len(hits)} finding(s)", file=sys.stderr)

    from packcfg.train.preflight import preflight

    try:
        problems = preflight(config, Path(args.config).parent)
    except (ValueError, TypeError, KeyError) as exc:
        return _fail(f"packcfg train: {args.config}: {exc}")
    if problems:
        for problem in problems:
            print(f"packcfg train: {args.config}: {problem}", file=sys.stderr)
        return 2

    from packcfg.train.run_folder import prepare_run_folder

    try:
        finished = prepare_run_folder(
            config, args.batching, args.output_dir, resume=args.resume, force=args.force
        )
    except (
        ValueError,
        OSError,
    ) as exc:  # RunFolderError, CheckpointError (a bad latest file), unreadable folder
        return _fail(f"packcfg train: {exc}")
    if finished is not None:
        print(f"packcfg train: nothing to do: the run already finished ({finished})")
        return 0
    return None


def _launch_int(config: dict, key: str) -> int:
    value = (config.get("launch") or {}).get(key, 1)
    return int(value) if isinstance(value, int) and value > 0 else 1


def _processes_per_node(config: dict) -> int:
    return _launch_int(config, "gpus_per_node")


def _nodes(config: dict) -> int:
    return _launch_int(config, "nodes")


def _reexec_under_torchrun(nproc: int, config: dict, args: argparse.Namespace) -> int:
    """Pack first in this process (so ranks never race to write the packed file), then start the ranks."""
    from packcfg.train.settings import DataSettings

    if DataSettings.from_config(config, args.batching).batching == "packed":
        from packcfg import packing

        try:
            packing.ensure_packed(config, progress=True)
        except packing.PackingError as exc:
            print(f"packcfg train: {exc}", file=sys.stderr)
            return 2
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "packcfg", "train", *_forwarded_arguments(args)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="packcfg-train-") as errors:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), ERROR_DIR_ENV: errors}
        return _run_ranks(cmd, env, Path(errors))


def _run_ranks(cmd: list[str], env: dict[str, str], errors: Path) -> int:
    """Run torchrun in a session of its own. SIGTERM/SIGINT stop its whole process tree (torchrun puts its
    ranks in sessions of their own), so no rank goes on training; the last complete checkpoint stays the
    latest one (checkpoints are renamed into place only when complete). A rank's own error is printed once
    as its one line and the exit status is 2, instead of torchrun's ChildFailedError report."""
    from packcfg.core.processes import stop_tree

    with tempfile.TemporaryFile(mode="w+b") as torchrun_stderr:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=torchrun_stderr)
        received: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            received.append(signum)
            stop_tree(proc.pid, reap=proc.poll)

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            rc = proc.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if received:
            print("packcfg train: stopped by a signal; the last complete checkpoint is kept", file=sys.stderr)
            return 128 + received[0]
        messages = sorted(errors.glob("rank*.txt"))
        if rc != 0 and messages:
            first = messages[0].read_text(encoding="utf-8", errors="replace").strip()
            print(first, file=sys.stderr)
            return 2
        torchrun_stderr.seek(0)
        sys.stderr.write(torchrun_stderr.read().decode("utf-8", errors="replace"))
        return rc if rc in (0, 1, 2) else 2


def _forwarded_arguments(args: argparse.Namespace) -> list[str]:
    """The same command for each rank (the ranks see RANK set, so they do not re-execute again)."""
    out = [args.config]
    for path in args.config_files:
        out += ["-c", path]
    for override in args.overrides:
        out += ["-o", override]
    if args.output_dir:
        out += ["--out", args.output_dir]
    if args.batching:
        out += ["--batching", args.batching]
    if args.resume:
        out.append("--resume")
    return out  # --force, --allow and the gate act in this process only, before any rank starts
