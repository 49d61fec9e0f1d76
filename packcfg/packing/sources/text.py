"""Bridge SFT JSONL text (`input`/`output`) tokenized with a local tokenizer.json."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.sources.batch import Batch, _make_batch
from packcfg.packing.sources.jsonl import _jsonl_records
from packcfg.packing.tokenizer import LoadedTokenizer, load_tokenizer

# Small text sources are tokenized once per process: the trainer calls ensure_packed and then
# tokenized_samples on the same file, and tokenizing dominates both. Keyed by both files' identity.
_TEXT_CACHE: dict[tuple[Any, ...], list[Batch]] = {}
_TEXT_CACHE_MAX_BYTES = 32 << 20


def _tokenized_text(path: Path, tokenizer: Path, batch_size: int) -> Iterator[Batch]:
    tok = load_tokenizer(tokenizer)
    try:
        st, tt = path.stat(), tok.path.stat()
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if st.st_size > _TEXT_CACHE_MAX_BYTES:
        yield from _iter_text_jsonl(path, tok, batch_size)
        return
    key = (
        str(path.resolve()),
        st.st_size,
        st.st_mtime_ns,
        str(tok.path.resolve()),
        tt.st_size,
        tt.st_mtime_ns,
        tok.eos_id,
    )
    cached = _TEXT_CACHE.get(key)
    if cached is None:
        cached = list(_iter_text_jsonl(path, tok, batch_size))
        if len(_TEXT_CACHE) >= 4:
            _TEXT_CACHE.pop(next(iter(_TEXT_CACHE)))
        _TEXT_CACHE[key] = cached
    yield from cached


def _iter_text_jsonl(path: Path, tok: LoadedTokenizer, batch_size: int) -> Iterator[Batch]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    contexts: list[str] = []
    answers: list[str] = []
    first = 0
    linenos: list[int] = []

    def flush() -> Batch:
        ctx = tok.tokenizer.encode_batch(contexts, add_special_tokens=False)
        ans = tok.tokenizer.encode_batch(answers, add_special_tokens=False)
        ids_list = []
        masks = []
        for c, a in zip(ctx, ans, strict=True):
            ids = np.asarray(c.ids + a.ids + [tok.eos_id], dtype=np.int32)
            lm = (np.arange(len(ids)) >= len(c.ids) - 1).astype(np.int8)  # predict the answer and EOS
            lm[-1] = 0
            ids_list.append(ids)
            masks.append(lm)
        return _make_batch(ids_list, masks, first, linenos)

    for lineno, obj in _jsonl_records(path):
        for key in ("input", "output"):
            if key not in obj:
                raise PackingError(
                    f"{path}:{lineno}: missing {key!r} (Bridge SFT JSONL needs input and output)"
                )
            if not isinstance(obj[key], str):
                raise PackingError(
                    f"{path}:{lineno}: {key!r} must be a string, got {type(obj[key]).__name__}"
                )
        if not contexts:
            first = lineno
            linenos = []
        linenos.append(lineno)
        # Bridge's default prompt template is "{input} {output}": the answer follows a space.
        contexts.append(obj["input"])
        answers.append(" " + obj["output"])
        if len(contexts) >= batch_size:
            yield flush()
            contexts, answers = [], []
    if contexts:
        yield flush()
