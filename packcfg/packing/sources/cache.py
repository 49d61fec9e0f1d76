"""The tokenized cache: the spool of a source that needs tokenizing (text, chat), kept in the user's cache
folder and used again while the source's and the tokenizer's sha256 are those of the run that made it.

Tokenizing is most of `pack`'s time on text (1M Bridge rows: ~50 s of CPU in `encode_batch`, ~15 s on the
ASCII path of `text._AsciiWords`); a second `pack` of the same data with other settings (pack size, seed,
algorithm, another output folder) or after `--force` reads the cached spool instead. Where: `$PACKCFG_CACHE_DIR/tokenized/`, else `$XDG_CACHE_HOME/packcfg/tokenized/`,
else `~/.cache/packcfg/tokenized/` (never the packed output's folder, which holds only what Bridge reads).
Layout: `<key>/` with `spool.bin` (the spool's packed values: token ids and label-aligned mask bits, 16 or
32 bits each), `offsets.npy`, `lines.npy` and `entry.json` (written last). The key is a sha256 of the
source's and the tokenizer's checksums (`packcfg.packing.checksums`: tokenizer.json and the config files
and chat template beside it), the source format, the `tokenizers` version and `CACHE_VERSION` (raised when
packcfg tokenizes differently), so changing any of them misses. An entry is staged in a locked temporary
folder and renamed into place complete; the spool's file is hard-linked into it where the cache is on the
same filesystem, copied otherwise. The newest `KEEP` entries stay, older ones are removed. Entries are data
(`np.load` without pickles; sizes and offsets checked); a damaged one is ignored and tokenized again; a cache
folder that cannot be written costs nothing but the cache. `PACKCFG_TOKEN_CACHE=0` turns the cache off
(neither read nor written).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.sources.spooling import SPOOL_FILE, Spool

CACHE_VERSION = 1
KEEP = 4
ENV = "PACKCFG_TOKEN_CACHE"
DIR_ENV = "PACKCFG_CACHE_DIR"


def enabled() -> bool:
    """False when PACKCFG_TOKEN_CACHE is 0, off, false or no."""
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "off", "false", "no"}


def cache_root() -> Path:
    """The tokenized cache's folder: under $PACKCFG_CACHE_DIR, $XDG_CACHE_HOME/packcfg or ~/.cache/packcfg."""
    base = os.environ.get(DIR_ENV)
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = str(Path(xdg) / "packcfg") if xdg else str(Path.home() / ".cache" / "packcfg")
    return Path(base).expanduser() / "tokenized"


def cache_key(source_sum: str | None, tokenizer_sum: str | None, fmt: str) -> str:
    try:
        import tokenizers

        version = tokenizers.__version__
    except ImportError:  # pragma: no cover - tokenized formats need tokenizers
        version = None
    blob = json.dumps(
        {
            "cache_version": CACHE_VERSION,
            "format": fmt,
            "source": source_sum,
            "tokenizer": tokenizer_sum,
            "tokenizers": version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _entry(folder: Path) -> dict[str, Any] | None:
    from packcfg.core.inputs import check_input
    from packcfg.packing.errors import PackingError

    path = folder / "entry.json"
    try:
        check_input(path, error=PackingError, max_bytes=1 << 20)
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, PackingError):
        return None
    return data if isinstance(data, dict) else None


def load(root: Path, key: str) -> Spool | None:
    """The cached spool for `key`, memory-mapped read-only, or None: absent, or damaged (anything
    inconsistent; then it is removed, to be stored again)."""
    folder = root / key
    sp = _load(folder, key)
    if sp is None and os.path.isdir(folder) and not os.path.islink(folder):
        shutil.rmtree(folder, ignore_errors=True)
    return sp


def _load(folder: Path, key: str) -> Spool | None:
    entry = _entry(folder)
    if entry is None or entry.get("key") != key or entry.get("cache_version") != CACHE_VERSION:
        return None
    n, total, bits = entry.get("samples"), entry.get("tokens"), entry.get("bits")
    if type(n) is not int or type(total) is not int or n <= 0 or total < n or bits not in (16, 32):
        return None
    try:
        if (folder / SPOOL_FILE).stat().st_size != bits // 8 * total:
            return None
        offsets = np.load(folder / "offsets.npy", allow_pickle=False)
        lines = np.load(folder / "lines.npy", allow_pickle=False)
        if (
            offsets.dtype != np.int64
            or offsets.shape != (n + 1,)
            or lines.dtype != np.int64
            or lines.shape != (n,)
        ):
            return None
        if offsets[0] != 0 or offsets[-1] != total or (np.diff(offsets) <= 0).any():
            return None
        dtype = np.uint16 if bits == 16 else np.uint32
        packed = np.memmap(folder / SPOOL_FILE, dtype=dtype, mode="r", shape=(total,))
        os.utime(folder / "entry.json")  # most recently used: kept longest
    except (OSError, ValueError):
        return None
    return Spool(packed, offsets, lines)


def store(root: Path, key: str, sp: Spool, info: dict[str, Any]) -> bool:
    """Keep `sp` (a spool on disk, `sp.workdir`) under `key`; False when it could not be written (the pack
    goes on without it). `info`: what entry.json records besides the sizes (source, checksums)."""
    from packcfg.core.atomic import OutputRefused, clean_stale_temps, temp_dir

    if sp.workdir is None or (root / key).exists():
        return False
    try:
        root.mkdir(parents=True, exist_ok=True)
        clean_stale_temps(root, key)
        with temp_dir(root / key) as tmp:
            try:
                os.link(sp.workdir / SPOOL_FILE, tmp / SPOOL_FILE)
            except OSError:
                shutil.copyfile(sp.workdir / SPOOL_FILE, tmp / SPOOL_FILE)
            with open(tmp / "offsets.npy", "wb") as fh:
                np.save(fh, np.asarray(sp.offsets, dtype=np.int64))
            with open(tmp / "lines.npy", "wb") as fh:
                np.save(fh, np.asarray(sp.lines, dtype=np.int64))
            entry = {
                "key": key,
                "cache_version": CACHE_VERSION,
                "samples": sp.num_samples,
                "tokens": int(sp.offsets[-1]),
                "bits": sp.packed.dtype.itemsize * 8,
                **info,
            }
            with open(tmp / "entry.json", "w", encoding="utf-8") as fh:
                json.dump(entry, fh, indent=2, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.rename(tmp, root / key)
            except OSError:
                return False  # another run stored it first
    except (OSError, OutputRefused):
        return False
    _evict(root)
    return True


def _evict(root: Path) -> None:
    """Remove all but the KEEP most recently used entries."""
    entries = []
    try:
        for item in os.scandir(root):
            if item.is_dir(follow_symlinks=False) and not item.name.startswith("."):
                try:
                    entries.append((os.stat(Path(item.path) / "entry.json").st_mtime_ns, item.path))
                except OSError:
                    entries.append((0, item.path))
    except OSError:
        return
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        shutil.rmtree(path, ignore_errors=True)
