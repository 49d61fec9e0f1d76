"""`packcfg train CONFIG`: run the bundled executor on a config (standard-library imports only here).

On a single node outside torchrun, a config whose launch section asks for several processes
(`launch.gpus_per_node`, on CPU the number of gloo processes) is re-executed under
`python -m torch.distributed.run --standalone --nproc-per-node N`, so the run has the layout the config
declares (e.g. DP 2 for the tiny CPU recipe). `--nproc-per-node 1` runs in this process instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from packcfg.core.cli_args import add_merge_arguments, add_out_argument

DESCRIPTION = "Train a megatron-core GPT on packed (THD), in-batch packed or padded batches."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="experiment YAML")
    add_merge_arguments(parser, config_flags=("-c", "--config", "--config-file"))
    add_out_argument(parser, "--output-dir", dest="output_dir", help="metrics folder (default: runs/<recipe.name>)")
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
    parser.add_argument("--nproc-per-node", type=int, metavar="N",
                        help="processes to start on this node (default: launch.gpus_per_node; 1 = no torchrun)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from packcfg.core.config import ConfigError, load_config

    try:
        config = load_config([args.config, *args.config_files], args.overrides)
    except ConfigError as exc:
        print(f"packcfg train: {exc}", file=sys.stderr)
        return 2

    nproc = args.nproc_per_node or _processes_per_node(config)
    if nproc > 1 and "RANK" not in os.environ and _nodes(config) == 1:
        return _reexec_under_torchrun(nproc, config, args)

    from packcfg.train.loop import TrainOptions, train

    try:
        train(config, TrainOptions(batching=args.batching, output_dir=args.output_dir, resume=args.resume))
    except (ValueError, FileNotFoundError) as exc:
        print(f"packcfg train: {exc}", file=sys.stderr)
        return 2
    return 0


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
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    return subprocess.call(cmd, env=env)


def _forwarded_arguments(args: argparse.Namespace) -> list[str]:
    """The same command for each rank (the ranks see RANK set, so they do not re-execute again)."""
    out = [args.config]
    for path in args.config_files:
        out += ["-c", path]
    for override in args.overrides:
        out += ["-o", override]
    if args.output_dir:
        out += ["--output-dir", args.output_dir]
    if args.batching:
        out += ["--batching", args.batching]
    if args.resume:
        out.append("--resume")
    return out
