"""EOS comes from the tokenizer folder's own config (tokenizer_config.json, special_tokens_map.json,
generation_config.json) before the fixed fallback list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tokenizers")
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

from packcfg.packing.errors import PackingError  # noqa: E402
from packcfg.packing.sources import load_tokenizer  # noqa: E402


def _folder(tmp_path: Path, specials: list[str], **configs: object) -> Path:
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    for s in specials:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    for name, data in configs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return tmp_path


LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_llama3_instruct_eos_from_tokenizer_config(tmp_path: Path) -> None:
    d = _folder(tmp_path, LLAMA3, tokenizer_config={"eos_token": "<|eot_id|>"})
    lt = load_tokenizer(d)
    assert lt.tokenizer.id_to_token(lt.eos_id) == "<|eot_id|>"
    assert lt.pad_id == lt.eos_id


def test_qwen_chat_eos_from_special_tokens_map_dict_form(tmp_path: Path) -> None:
    d = _folder(
        tmp_path,
        QWEN,
        special_tokens_map={"eos_token": {"content": "<|im_end|>", "lstrip": False}},
    )
    lt = load_tokenizer(d / "tokenizer.json")
    assert lt.tokenizer.id_to_token(lt.eos_id) == "<|im_end|>"


def test_generation_config_eos_id_list(tmp_path: Path) -> None:
    d = _folder(tmp_path, LLAMA3)
    eot = Tokenizer.from_file(str(d / "tokenizer.json")).token_to_id("<|eot_id|>")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [eot, 0]}))
    assert load_tokenizer(d).eos_id == eot


def test_tokenizer_config_wins_over_generation_config(tmp_path: Path) -> None:
    d = _folder(
        tmp_path, QWEN, tokenizer_config={"eos_token": "<|im_end|>"}, generation_config={"eos_token_id": 3}
    )
    lt = load_tokenizer(d)
    assert lt.tokenizer.id_to_token(lt.eos_id) == "<|im_end|>"


def test_no_config_falls_back_to_list(tmp_path: Path) -> None:
    d = _folder(tmp_path, QWEN)
    lt = load_tokenizer(d)
    assert lt.tokenizer.id_to_token(lt.eos_id) == "<|endoftext|>"


def test_config_eos_not_in_vocab_is_a_clear_error(tmp_path: Path) -> None:
    d = _folder(tmp_path, QWEN, tokenizer_config={"eos_token": "<|nope|>"})
    with pytest.raises(PackingError, match=r"tokenizer_config\.json: eos_token '<\|nope\|>' is not in"):
        load_tokenizer(d)


def test_bad_config_json_is_a_clear_error(tmp_path: Path) -> None:
    d = _folder(tmp_path, QWEN)
    (d / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(PackingError, match=r"tokenizer_config\.json: not readable JSON"):
        load_tokenizer(d)


def test_checksum_counts_the_eos_config_so_a_changed_eos_repacks(tmp_path: Path) -> None:
    from packcfg.packing.sources import file_checksum, tokenizer_checksum

    d = _folder(tmp_path, QWEN)
    # without config files the checksum is tokenizer.json's own (existing packs stay up to date)
    assert tokenizer_checksum(d) == file_checksum(d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    first = tokenizer_checksum(d / "tokenizer.json")
    assert first != file_checksum(d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    assert tokenizer_checksum(d) != first
