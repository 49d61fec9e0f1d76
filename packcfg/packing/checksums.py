"""sha256 of a source file and of a tokenizer (tokenizer.json and the config files beside it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError

# beside tokenizer.json, the files that change packed tokens: the EOS choice, and the chat template
TOKENIZER_CONFIG_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)


def tokenizer_inputs(path: Path | None) -> list[Path]:
    """Every file a tokenizer path makes the command read: the path, its tokenizer.json and the config files
    beside it (no output may be one of them)."""
    if path is None:
        return []
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    return [path, file, *(file.parent / name for name in TOKENIZER_CONFIG_FILES)]


def tokenizer_checksum(path: Path | None) -> str | None:
    """sha256 of tokenizer.json, and of the config files beside it that choose the EOS id (when any exist):
    editing the EOS in tokenizer_config.json changes the packed tokens, so it must re-pack."""
    if path is None:
        return None
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    sums = [
        f"{name}={file_checksum(file.parent / name)}"
        for name in TOKENIZER_CONFIG_FILES
        if (file.parent / name).is_file()
    ]
    base = file_checksum(file)
    if not sums:
        return base  # unchanged from before config files counted: existing packs stay up to date
    return "sha256:" + hashlib.sha256("\n".join([f"tokenizer.json={base}", *sums]).encode()).hexdigest()


def file_checksum(path: Path | None) -> str | None:
    """sha256 of the file's bytes (streamed)."""
    if path is None:
        return None
    h = hashlib.sha256()
    check_input(path, error=PackingError)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return "sha256:" + h.hexdigest()
