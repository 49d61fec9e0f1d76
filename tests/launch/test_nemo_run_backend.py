"""The nemo-run backend's reading of NeMo-Run's task states (`Experiment.status(return_dict=True)`)."""

from __future__ import annotations

import pytest

from packcfg.launch.backends.nemo_run import job_status


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({"data-prep": "SUCCEEDED", "train": "SUCCEEDED"}, ("COMPLETED", "SUCCEEDED")),
        ({"data-prep": "SUCCEEDED", "train": "RUNNING"}, ("RUNNING", "RUNNING")),
        ({"data-prep": "RUNNING", "train": "PENDING"}, ("RUNNING", "data-prep RUNNING")),
        # a failed data prep fails the job, even while Slurm keeps the training job pending on it
        ({"data-prep": "FAILED", "train": "PENDING"}, ("FAILED", "data-prep FAILED")),
        ({"data-prep": "SUCCEEDED", "train": "CANCELLED"}, ("CANCELLED", "CANCELLED")),
        ({"train": "SUBMITTED"}, ("PENDING", "SUBMITTED")),
        ({"train": "UNKNOWN"}, ("UNKNOWN", "UNKNOWN")),
        ({"train": "SOMETHING_NEW"}, ("UNKNOWN", "SOMETHING_NEW")),
        ({}, ("UNKNOWN", "no tasks")),
    ],
)
def test_job_status_from_task_states(states: dict[str, str], expected: tuple[str, str]) -> None:
    assert job_status({name: {"state": state} for name, state in states.items()}) == expected
