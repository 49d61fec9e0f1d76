"""Chat SFT JSONL (`messages`) rendered with the tokenizer folder's chat template (packcfg.packing.chat),
tokenized, masked to the assistant turns."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from packcfg.packing.chat import assistant_spans, check_messages, load_chat_template, span_mask
from packcfg.packing.errors import PackingError
from packcfg.packing.sources.batch import Batch, label_mask_from_input_mask, make_batch
from packcfg.packing.sources.jsonl import jsonl_records
from packcfg.packing.tokenizer import LoadedTokenizer


def iter_chat_jsonl(path: Path, tok: LoadedTokenizer, batch_size: int) -> Iterator[Batch]:
    """Chat rows rendered with the chat template beside tokenizer.json; the mask: assistant turns only."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    template = load_chat_template(tok.path.parent)
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    linenos: list[int] = []

    def flush() -> Batch:
        # rendered text is tokenized as transformers' apply_chat_template does: no added special tokens
        encodings = tok.tokenizer.encode_batch(texts, add_special_tokens=False)
        ids_list, masks = [], []
        for enc, row_spans, lineno in zip(encodings, spans, linenos, strict=True):
            if len(enc.ids) < 2:
                raise PackingError(f"{path}:{lineno}: the chat template renders fewer than 2 tokens")
            ids_list.append(np.asarray(enc.ids, dtype=np.int32))
            mask = span_mask(enc.offsets, row_spans)
            masks.append(label_mask_from_input_mask(mask, np.array([0, len(mask)])))
        return make_batch(ids_list, masks, linenos[0], linenos)

    for lineno, obj in jsonl_records(path):
        text, row_spans = assistant_spans(template, check_messages(path, lineno, obj), f"{path}:{lineno}")
        texts.append(text)
        spans.append(row_spans)
        linenos.append(lineno)
        if len(texts) >= batch_size:
            yield flush()
            texts, spans, linenos = [], [], []
    if texts:
        yield flush()
