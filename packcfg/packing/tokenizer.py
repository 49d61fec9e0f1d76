"""A local tokenizer.json (tokenizers library) and the EOS id its folder names; no hub downloads."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError

EOS_CANDIDATES = ("<eos>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "[SEP]")


@dataclass
class LoadedTokenizer:
    tokenizer: Any
    path: Path
    eos_id: int
    pad_id: int


def read_json_object(path: Path) -> dict[str, Any] | None:
    if not os.path.lexists(path):
        return None
    check_input(path, error=PackingError)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PackingError(f"{path}: not readable JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise PackingError(f"{path}: not readable JSON (nested too deeply)") from None
    return data if isinstance(data, dict) else None


def _configured_eos(folder: Path, tok: Any) -> int | None:
    """The EOS id the tokenizer folder itself names, as Hugging Face tokenizers record it: `eos_token` in
    tokenizer_config.json, then in special_tokens_map.json (a string or {"content": ...}), then
    generation_config.json's `eos_token_id` (an int or a list; the first). None when no file names one,
    so the fixed EOS_CANDIDATES list is only a fallback (it would pick <|end_of_text|> over Llama 3
    instruct's <|eot_id|> and <|endoftext|> over Qwen chat's <|im_end|>)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        cfg = read_json_object(folder / name)
        token = cfg.get("eos_token") if cfg else None
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and token:
            tid = tok.token_to_id(token)
            if tid is None:
                raise PackingError(
                    f"{folder / name}: eos_token {token!r} is not in the tokenizer's vocabulary"
                )
            return int(tid)
    gen = read_json_object(folder / "generation_config.json")
    value = gen.get("eos_token_id") if gen else None
    if isinstance(value, list) and value:
        value = value[0]
    if type(value) is int and value >= 0:
        if tok.id_to_token(value) is None:
            raise PackingError(
                f"{folder / 'generation_config.json'}: eos_token_id {value} is not in the tokenizer's vocabulary"
            )
        return value
    return None


def load_tokenizer(path: Path) -> LoadedTokenizer:
    """A local tokenizer.json (tokenizers library); no hub downloads. EOS ends every sample."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PackingError(
            "tokenizing SFT text needs the 'tokenizers' package: pip install 'packcfg[pack]'"
        ) from None
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise PackingError(
            f"{path}: tokenizer not found (need a local tokenizer.json; no hub downloads)"
        ) from None
    except OSError:
        pass  # check_input names it
    check_input(path, what="tokenizer", error=PackingError)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise PackingError(f"{path}: not a tokenizers JSON file ({str(exc).splitlines()[0]})") from None
    eos = _configured_eos(path.parent, tok)
    if eos is None:
        eos = next((tok.token_to_id(t) for t in EOS_CANDIDATES if tok.token_to_id(t) is not None), None)
    if eos is None:
        raise PackingError(f"{path}: no end-of-sequence token (looked for {', '.join(EOS_CANDIDATES)})")
    # Bridge pads packed samples with the EOS id (its collate relies on that); keep that convention.
    return LoadedTokenizer(tok, path, int(eos), int(eos))
