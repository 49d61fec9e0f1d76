"""Which format a source is, and its samples as a stream of `Batch`es."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError
from packcfg.packing.sources import threads
from packcfg.packing.sources.batch import Batch
from packcfg.packing.sources.chat import iter_chat_jsonl
from packcfg.packing.sources.jsonl import jsonl_records
from packcfg.packing.sources.parquet import iter_parquet
from packcfg.packing.sources.text import tokenized_text
from packcfg.packing.sources.token_jsonl import JSONL_BLOCK_BYTES, iter_token_jsonl_fast
from packcfg.packing.tokenizer import load_tokenizer

PARQUET_SUFFIXES = (".parquet", ".pq")
TOKENIZED_FORMATS = ("text", "chat")  # the source formats a tokenizer reads (the others hold token ids)


def detect_format(path: Path) -> str:
    """`parquet` (token ids), `tokens` (JSONL of token ids), `text` (Bridge SFT JSONL input/output) or `chat`
    (JSONL rows of `messages`, rendered with the tokenizer's chat template: packcfg.packing.chat)."""
    if os.path.isdir(path):
        raise PackingError(f"{path}: is a directory, expected a .jsonl or .parquet file")
    check_input(path, error=PackingError)  # never open a FIFO or a device (it blocks)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return "parquet"
    for lineno, obj in jsonl_records(path):
        if "input_ids" in obj:
            return "tokens"
        if "input" in obj or "output" in obj:
            return "text"
        if "messages" in obj:
            return "chat"
        keys = ", ".join(sorted(obj)) or "none"
        raise PackingError(
            f"{path}:{lineno}: expected 'input_ids' (tokenized), 'input'/'output' (SFT text) or 'messages' "
            f"(chat SFT), got keys: {keys}"
        )
    raise PackingError(f"{path}: empty dataset (no samples)")


def iter_batches(
    path: Path,
    tokenizer: Path | None = None,
    batch_size: int = 4096,
    fmt: str | None = None,
    jsonl_block_bytes: int | None = None,
    workers: int | None = None,
) -> Iterator[Batch]:
    """Stream the source as batches; raises PackingError naming file and line on bad input.
    `jsonl_block_bytes`: the block size token-id JSONL is read in (default JSONL_BLOCK_BYTES); `workers`:
    threads that decode Parquet row groups or parse JSONL blocks side by side (default READ_WORKERS)."""
    fmt = fmt or detect_format(path)
    workers = workers or threads.READ_WORKERS
    if fmt == "parquet":
        yield from iter_parquet(path, batch_size, workers)
    elif fmt == "tokens":
        yield from iter_token_jsonl_fast(path, batch_size, jsonl_block_bytes or JSONL_BLOCK_BYTES, workers)
    elif fmt == "text":
        if tokenizer is None:
            raise PackingError(
                f"{path}: SFT text (input/output) needs a tokenizer: pass --tokenizer PATH/tokenizer.json"
            )
        yield from tokenized_text(path, Path(tokenizer), batch_size)
    elif fmt == "chat":
        if tokenizer is None:
            raise PackingError(
                f"{path}: chat SFT (messages) needs a local tokenizer folder with a chat template: "
                "pass --tokenizer DIR"
            )
        yield from iter_chat_jsonl(path, load_tokenizer(Path(tokenizer)), batch_size)
    else:
        raise PackingError(f"{path}: unknown input format {fmt!r}")
