"""Read the samples to pack: token-id JSONL or Parquet, or Bridge SFT JSONL text or chat rows plus a local
tokenizer, one module per format.

Every reader yields `Batch`es of flat numpy arrays (token values, sample offsets, a label-aligned loss
mask; `batch`), never per-token Python objects, and `spool` appends them to flat files on disk (memory-mapped
afterwards), so that the writer can gather any sample in O(1) while memory stays bounded by one batch.

- `read`: `detect_format` and `iter_batches`, which hands a source to its reader:
- `token_jsonl` (token-id JSONL: compiled block reader, pyarrow, exact reader), `parquet` (token ids),
  `text` (Bridge `input`/`output`, tokenized), `chat` (`messages`, rendered with the chat template);
- `jsonl` (JSONL lines as objects, one-line errors), `threads` (`ordered_map`, `prefetched`), `spooling` (`spool`, `Spool`).

The tokenizer (`packcfg.packing.tokenizer`) and the checksums (`packcfg.packing.checksums`) live beside this
package; their names are re-exported here, as is everything this module held before it was split.
"""

from __future__ import annotations

from packcfg.packing.checksums import (
    TOKENIZER_CONFIG_FILES,
    file_checksum,
    tokenizer_checksum,
    tokenizer_inputs,
)
from packcfg.packing.sources.batch import (
    MAX_TOKEN_ID,
    Batch,
    label_mask_all,
    label_mask_from_answer_start,
    label_mask_from_input_mask,
    make_batch,
    slice_batch,
)
from packcfg.packing.sources.chat import iter_chat_jsonl
from packcfg.packing.sources.jsonl import jsonl_lines, jsonl_records, parse_line
from packcfg.packing.sources.parquet import PARALLEL_ROW_GROUP_BYTES, iter_parquet, parquet_batch
from packcfg.packing.sources.read import PARQUET_SUFFIXES, TOKENIZED_FORMATS, detect_format, iter_batches
from packcfg.packing.sources.spooling import Spool, spool
from packcfg.packing.sources.text import iter_text_jsonl, tokenized_text
from packcfg.packing.sources.threads import READ_WORKERS, ordered_map, prefetched
from packcfg.packing.sources.token_jsonl import (
    JSONL_BLOCK_BYTES,
    check_ids,
    iter_token_jsonl,
    iter_token_jsonl_fast,
)
from packcfg.packing.tokenizer import EOS_CANDIDATES, LoadedTokenizer, load_tokenizer, read_json_object

__all__ = [
    "EOS_CANDIDATES",
    "JSONL_BLOCK_BYTES",
    "MAX_TOKEN_ID",
    "PARALLEL_ROW_GROUP_BYTES",
    "PARQUET_SUFFIXES",
    "READ_WORKERS",
    "TOKENIZED_FORMATS",
    "TOKENIZER_CONFIG_FILES",
    "Batch",
    "LoadedTokenizer",
    "Spool",
    "check_ids",
    "iter_chat_jsonl",
    "iter_parquet",
    "iter_text_jsonl",
    "iter_token_jsonl",
    "iter_token_jsonl_fast",
    "jsonl_lines",
    "jsonl_records",
    "make_batch",
    "parquet_batch",
    "parse_line",
    "read_json_object",
    "slice_batch",
    "tokenized_text",
    "detect_format",
    "file_checksum",
    "iter_batches",
    "label_mask_all",
    "label_mask_from_answer_start",
    "label_mask_from_input_mask",
    "load_tokenizer",
    "ordered_map",
    "prefetched",
    "spool",
    "tokenizer_checksum",
    "tokenizer_inputs",
]
