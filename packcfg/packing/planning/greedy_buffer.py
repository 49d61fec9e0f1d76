"""`greedy_buffer`: the streaming packer with a bounded buffer of open packs (InternVL-style)."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from packcfg.packing.planning.common import Packing, PlanError, from_groups


class GreedyBufferPacker:
    """Streaming packer with a bounded buffer of open packs (InternVL-style).

    `add(item, length, secondary)` places an item into the open pack that fits it best (token budget and,
    if given, the secondary budget such as images per pack); when no open pack fits and the buffer is full,
    the fullest open pack is emitted. Memory is bounded by `buffer_size` packs, whatever the stream length.
    """

    def __init__(
        self,
        capacity: int,
        buffer_size: int = 64,
        max_per_pack: int | None = None,
        secondary_capacity: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.buffer_size = max(1, buffer_size)
        self.k_max = max_per_pack if max_per_pack is not None else 1 << 62
        self.sec_cap = secondary_capacity if secondary_capacity is not None else 1 << 62
        # open packs: id -> [room, secondary used, items]; `rooms` sorted (room, id) for best fit
        self._open: dict[int, list[Any]] = {}
        self._rooms: list[tuple[int, int]] = []
        self._next = 0

    def add(self, item: int, length: int, secondary: int = 0) -> list[list[int]]:
        """Place one item; returns the packs closed by this step (usually none)."""
        if length > self.capacity or secondary > self.sec_cap:
            raise PlanError(
                f"item {item} (length {length}, secondary {secondary}) exceeds the pack budget "
                f"({self.capacity}, {self.sec_cap})"
            )
        closed: list[list[int]] = []
        rooms = self._rooms
        j = bisect.bisect_left(rooms, (length, -1))
        while j < len(rooms):  # tightest fit first; skip packs the secondary budget rules out
            pid = rooms[j][1]
            if self._open[pid][1] + secondary <= self.sec_cap:
                break
            j += 1
        if j < len(rooms):
            room, pid = rooms.pop(j)
            pack = self._open[pid]
            pack[0] = room - length
            pack[1] += secondary
            pack[2].append(item)
            if pack[0] == 0 or len(pack[2]) >= self.k_max or pack[1] >= self.sec_cap:
                closed.append(self._open.pop(pid)[2])
            else:
                bisect.insort(rooms, (pack[0], pid))
            return closed
        if len(self._open) >= self.buffer_size:
            _, pid = rooms.pop(0)  # the fullest open pack leaves the buffer
            closed.append(self._open.pop(pid)[2])
        pid = self._next
        self._next += 1
        self._open[pid] = [self.capacity - length, secondary, [item]]
        if self.capacity - length == 0 or self.k_max == 1 or secondary >= self.sec_cap:
            closed.append(self._open.pop(pid)[2])
        else:
            bisect.insort(rooms, (self.capacity - length, pid))
        return closed

    def flush(self) -> list[list[int]]:
        """Emit every open pack (end of stream), oldest first."""
        out = [self._open[pid][2] for pid in sorted(self._open)]
        self._open = {}
        self._rooms = []
        return out


def greedy_buffer(
    a: np.ndarray,
    capacity: int,
    max_per_pack: int | None,
    sec: np.ndarray | None,
    sec_capacity: int | None,
    buffer_size: int,
) -> Packing:
    packer = GreedyBufferPacker(capacity, buffer_size, max_per_pack, sec_capacity)
    groups: list[np.ndarray] = []
    secl = sec.tolist() if sec is not None else None
    for i, length in enumerate(a.tolist()):
        for pack in packer.add(i, length, secl[i] if secl is not None else 0):
            groups.append(np.asarray(pack, dtype=np.int64))
    groups.extend(np.asarray(p, dtype=np.int64) for p in packer.flush())
    return from_groups(groups)
