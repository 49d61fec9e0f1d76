"""Backends: submit a written job bundle, read its state, cancel it, find its logs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packcfg.launch import LaunchError

if TYPE_CHECKING:
    from packcfg.launch.backends.base import Backend


def get_backend(name: str) -> Backend:
    if name == "local":
        from packcfg.launch.backends.local import LocalBackend

        return LocalBackend()
    if name == "slurm":
        from packcfg.launch.backends.slurm import SlurmBackend

        return SlurmBackend()
    if name == "nemo-run":
        from packcfg.launch.backends.nemo_run import NemoRunBackend

        return NemoRunBackend()
    raise LaunchError(f"unknown backend {name!r} (choose from local, slurm, nemo-run)")
