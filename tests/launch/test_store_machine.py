"""A hypothesis state machine over a job store: launch (succeeding or failing submissions, with and
without --force), the backend moving jobs on, cancel, corrupt record files appearing, and the readers.

Invariants after every step: one record per submission that got past the duplicate check; never two
active (not FAILED/CANCELLED) records of one config hash unless --force submitted it; no record left
`submitting`; cancel is idempotent; corrupt records never crash a reader and are each reported once.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from packcfg.launch import LaunchError, service
from packcfg.launch.bundle import JobBundle
from packcfg.launch.spec import launch_spec
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, RUNNING, TERMINAL, JobStore

CONFIGS = 3


def bundle(i: int) -> JobBundle:
    """A small bundle (no rendering): the store logic does not care what the files hold."""
    config = {"recipe": {"name": f"exp{i}"}, "launch": {"backend": "local"}}
    files = {"config.yaml": f"exp: {i}\n".encode(), "torchrun.sh": b"#!/bin/bash\n"}
    digest = hashlib.sha256(f"config {i}".encode()).hexdigest()
    return JobBundle(config, digest, launch_spec(config), files, None, {"recipe": f"exp{i}", "files": {}})


class FakeBackend:
    name = "local"

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.fail_next = False
        self.cancels = 0
        self.counter = 0

    def plan(self, bundle_dir, bundle):  # noqa: ANN001
        return []

    def submit(self, bundle_dir, bundle, record):  # noqa: ANN001
        if self.fail_next:
            self.fail_next = False
            raise LaunchError("sbatch failed: Invalid account")
        self.counter += 1
        record.native_id = str(self.counter)
        record.status = "PENDING"
        self.states[record.native_id] = "PENDING"

    def refresh(self, record):  # noqa: ANN001
        record.status = self.states.get(record.native_id or "", record.status)

    def cancel(self, record):  # noqa: ANN001
        self.cancels += 1
        if record.native_id:
            self.states[record.native_id] = CANCELLED
        record.status = CANCELLED


class JobStoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="packcfg-store-"))
        self.store = JobStore(self.root)
        self.be = FakeBackend()
        self.submissions = 0
        self.forced: set[str] = set()
        self.corrupt = 0
        self.bundles = [bundle(i) for i in range(CONFIGS)]

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _active(self, digest: str) -> list:
        return [
            r for r in self.store.all() if r.config_hash == digest and r.status not in (FAILED, CANCELLED)
        ]

    @rule(i=st.integers(0, CONFIGS - 1), force=st.booleans(), fail=st.booleans())
    def launch(self, i: int, force: bool, fail: bool) -> None:
        b = self.bundles[i]
        for r in self.store.with_hash(b.config_hash):
            service.refresh(self.store, r, self.be)
        duplicate = bool(self._active(b.config_hash)) and not force
        self.be.fail_next = fail
        try:
            record = service.submit(
                self.store, b, self.be, when=f"2026-01-01T00:00:{self.submissions:02d}Z", force=force
            )
        except service.DuplicateJob:
            assert duplicate
            self.be.fail_next = False
            return
        except LaunchError as exc:
            assert fail and not duplicate and "sbatch failed" in str(exc)
            self.submissions += 1
            if force:
                self.forced.add(b.config_hash)
            return
        assert not duplicate and not fail
        assert record.status == "PENDING" and record.native_id
        self.submissions += 1
        if force:
            self.forced.add(b.config_hash)

    @precondition(lambda self: self.be.states)
    @rule(data=st.data(), state=st.sampled_from([RUNNING, COMPLETED, FAILED]))
    def backend_moves_a_job(self, data: st.DataObject, state: str) -> None:
        native = data.draw(st.sampled_from(sorted(self.be.states)))
        if self.be.states[native] not in TERMINAL:
            self.be.states[native] = state
        for r in self.store.all():
            service.refresh(self.store, r, self.be)

    @precondition(lambda self: self.submissions)
    @rule(data=st.data())
    def cancel_twice(self, data: st.DataObject) -> None:
        records = self.store.all()
        record = data.draw(st.sampled_from(records))
        before = record.status
        first = service.cancel(self.store, record, self.be)
        after_first = self.store.load(record.id).status
        second = service.cancel(self.store, self.store.load(record.id), self.be)
        assert first.status == second.status == after_first == self.store.load(record.id).status
        assert after_first == (before if before in TERMINAL else CANCELLED)

    @rule(kind=st.sampled_from(["", "{", "[]", "null", '{"id": 3}', "\x00\x01", '{"id": "x"}']))
    def corrupt_file_appears(self, kind: str) -> None:
        self.corrupt += 1
        (self.store.jobs_dir).mkdir(parents=True, exist_ok=True)
        (self.store.jobs_dir / f"zz-corrupt-{self.corrupt}.json").write_text(kind)

    @invariant()
    def readers_never_crash_and_report_each_corrupt_record(self) -> None:
        warnings: list[str] = []
        records = self.store.all(warn=warnings.append)
        assert len(records) == self.submissions  # one record per submission past the duplicate check
        assert len(warnings) == self.corrupt
        assert all("unreadable job record" in w and "\n" not in w for w in warnings)
        for r in records:
            assert r.native_state != service.SUBMITTING
            assert self.store.load(r.id, warn=warnings.append).id == r.id

    @invariant()
    def no_duplicate_active_submission(self) -> None:
        for b in self.bundles:
            if b.config_hash not in self.forced:
                assert len(self._active(b.config_hash)) <= 1


TestJobStoreMachine = JobStoreMachine.TestCase
TestJobStoreMachine.settings = settings(
    max_examples=25, stateful_step_count=15, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
