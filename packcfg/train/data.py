"""Where micro-batches come from: the packed Parquet (one pack per unit) or tokenized samples (one
sample per unit), in a seeded per-epoch order that a step number alone reproduces (so resume needs
only the count of consumed units), split over data-parallel ranks like megatron's sampler."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from packcfg.core.atomic import atomic_path
from packcfg.train.batches import (
    MicroBatch,
    Sample,
    pack_thd,
    pad_batch,
    samples_from_pack,
)
from packcfg.train.settings import DataSettings


class Units(Protocol):
    """Random-access collection of training units: each is a list of samples (a pack, or one sample)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> list[Sample]: ...


class PackedParquet:
    """Bridge's packed Parquet: columns `input_ids`, `loss_mask`, `seq_start_id`, one pack per row."""

    def __init__(self, path: str | Path) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        table = pq.read_table(self.path, columns=["input_ids", "loss_mask", "seq_start_id"], memory_map=True)
        # Each column as one flat value buffer plus row offsets (Arrow's list layout, as numpy): a pack
        # is two slices, and memory is the file's token count in machine ints, not Python objects.
        self._ids = _flat_list_column(table.column("input_ids"))
        self._mask = _flat_list_column(table.column("loss_mask"))
        self._starts = _flat_list_column(table.column("seq_start_id"))

    def __len__(self) -> int:
        return len(self._ids[1]) - 1

    def __getitem__(self, index: int) -> list[Sample]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"pack {index} out of range for {len(self)} packs in {self.path}")
        index %= len(self)
        return samples_from_pack(_row(self._ids, index), _row(self._mask, index), _row(self._starts, index))

    def all_samples(self) -> list[Sample]:
        return [s for i in range(len(self)) for s in self[i]]


def _flat_list_column(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """A list<int> Arrow column as (values, offsets): row i is values[offsets[i]:offsets[i + 1]]."""
    array = column.combine_chunks()
    offsets = array.offsets.to_numpy()
    values = array.values.to_numpy(zero_copy_only=False)
    return values, offsets


def _row(flat: tuple[np.ndarray, np.ndarray], index: int) -> np.ndarray:
    values, offsets = flat
    return values[offsets[index] : offsets[index + 1]]


class SampleUnits:
    """Unpacked samples, one per unit (in-batch packing and the padded baseline)."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        self.samples = list(samples)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> list[Sample]:
        return [self.samples[index]]


def write_packed_parquet(path: str | Path, packs: Sequence[Sequence[Sample]]) -> Path:
    """Write packs in Bridge's packed Parquet format (used by tests and the benchmark)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: dict[str, list[Any]] = {"input_ids": [], "loss_mask": [], "seq_start_id": []}
    for pack in packs:
        rows["input_ids"].append(np.concatenate([s.input_ids for s in pack]).astype(np.int64).tolist())
        rows["loss_mask"].append(np.concatenate([s.loss_mask for s in pack]).astype(np.int8).tolist())
        rows["seq_start_id"].append([0, *np.cumsum([len(s) for s in pack])[:-1].tolist()])
    schema = pa.schema(
        [
            ("input_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int8())),
            ("seq_start_id", pa.list_(pa.int64())),
        ]
    )
    with atomic_path(path) as tmp:
        pq.write_table(pa.table(rows, schema=schema), tmp)
    return Path(path)


@dataclass
class BatchPlan:
    """Which units each rank's micro-batches hold at a step, and how they are laid out."""

    units: Units
    data: DataSettings
    micro_batch_size: int
    global_batch_size: int
    dp: int
    dp_rank: int

    def __post_init__(self) -> None:
        per_step = self.micro_batch_size * self.dp
        if self.global_batch_size % per_step:
            raise ValueError(
                f"global_batch_size {self.global_batch_size} is not a multiple of "
                f"micro_batch_size * DP = {self.micro_batch_size} * {self.dp}"
            )
        if self.data.batching == "packed" and self.micro_batch_size != 1:
            raise ValueError("offline packed data trains with micro_batch_size 1 (one pack per micro-batch)")
        if len(self.units) == 0:
            raise ValueError("the training data is empty")
        self._orders: dict[int, np.ndarray] = {}

    @property
    def micro_batches_per_step(self) -> int:
        """Gradient-accumulation steps of this rank: GBS / (MBS * DP)."""
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    def _unit_at(self, consumed: int) -> int:
        """The unit at global position `consumed`: epochs are seeded permutations of the data."""
        epoch, offset = divmod(consumed, len(self.units))
        if epoch not in self._orders:
            self._orders = {
                epoch: np.random.default_rng([self.data.seed, epoch]).permutation(len(self.units))
            }
        return int(self._orders[epoch][offset])

    def micro_batch_units(self, step: int) -> list[list[list[Sample]]]:
        """The units of this rank's micro-batches at step `step` (0-based) of a run at this GBS from the start."""
        return self.micro_batch_units_after(step * self.global_batch_size)

    def micro_batch_units_after(self, consumed: int) -> list[list[list[Sample]]]:
        """The units of this rank's micro-batches of the step after `consumed` global units: micro-batch j
        holds global units `consumed + j*MBS*DP + dp_rank*MBS` onwards, as megatron's pretraining sampler
        assigns them from `consumed_samples` (so a resume with another GBS continues at the next unit)."""
        start = consumed
        out = []
        for j in range(self.micro_batches_per_step):
            first = start + j * self.micro_batch_size * self.dp + self.dp_rank * self.micro_batch_size
            out.append([self.units[self._unit_at(first + k)] for k in range(self.micro_batch_size)])
        return out

    def micro_batches(self, step: int) -> list[MicroBatch]:
        """This rank's micro-batches of step `step` (0-based) of a run at this GBS from the start."""
        return self.micro_batches_after(step * self.global_batch_size)

    def micro_batches_after(self, consumed: int) -> list[MicroBatch]:
        """This rank's micro-batches of the step after `consumed` global units, laid out as
        `data.batching` says."""
        return [build_micro_batch(u, self.data) for u in self.micro_batch_units_after(consumed)]


def build_micro_batch(units: Sequence[list[Sample]], data: DataSettings) -> MicroBatch:
    """Lay out one micro-batch's units as packed THD (offline pack or in-batch) or padded rows."""
    samples = [s for unit in units for s in unit]
    if data.batching == "padded":
        return pad_batch(samples, pad_to=data.seq_length if data.pad_to_max_length else None)
    if data.batching == "packed":
        return pack_thd(samples, pad_to=data.pack_size if data.pad_to_max_length else None)
    width = len(units) * data.seq_length if data.pad_to_max_length else None
    return pack_thd(samples, pad_to=width)
