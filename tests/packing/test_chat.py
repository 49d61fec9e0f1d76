"""Chat SFT rows rendered with a local tokenizer folder's chat template: the ids equal `transformers`'
`apply_chat_template` on the same folder, the loss mask covers exactly the assistant turns (content and the
end-of-turn token), label-aligned as in the packed format; hostile templates and bad rows are one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from packcfg.packing.errors import PackingError
from packcfg.packing.sources import detect_format, iter_batches
from packcfg.resources import resolve_path

pytest.importorskip("tokenizers")

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama 3 style: BOS from the special-token variable, headers, <|eot_id|> closing each turn (no newline)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ m['content'] | trim }}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
# Qwen3 style: an empty think block before the content of assistant turns after the last user message only
QWEN3 = (
    "{%- set ns = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}{%- if m.role == 'assistant' and loop.index0 > ns.last %}"
    "{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + m.content + '<|im_end|>\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}"
)
# ChatML with transformers' assistant-mask markers: rendered as their content
CHATML_GENERATION = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>"]
SPECIALS += ["<|eot_id|>"]


def make_folder(tmp_path: Path, template: str, as_jinja_file: bool = False, eos: str = "<|im_end|>") -> Path:
    """A local HF tokenizer folder: the bundled byte-level BPE plus chat special tokens, and a template."""
    from tokenizers import AddedToken, Tokenizer

    folder = tmp_path / "tok"
    folder.mkdir(exist_ok=True)
    tok = Tokenizer.from_file(str(resolve_path("@packcfg/data/sample_sft/tokenizer.json")))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": eos,
        "pad_token": "<pad>",
    }
    if as_jinja_file:
        (folder / "chat_template.jinja").write_text(template)
    else:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def write_rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


CONVERSATIONS = [
    [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "It is 4."},
    ],
    [  # multi-turn with a system prompt
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And another one?"},
        {"role": "assistant", "content": "Green, of course."},
    ],
]


def samples(path: Path, folder: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for b in iter_batches(path, folder):
        for i in range(len(b.offsets) - 1):
            s, e = b.offsets[i], b.offsets[i + 1]
            out.append((b.values[s:e].copy(), b.mask[s:e].copy()))
    return out


def supervised_text(tokenizer, ids: np.ndarray, label_mask: np.ndarray) -> list[str]:
    """The decoded runs of target tokens: position i of the label-aligned mask trains token i+1."""
    targets = np.zeros(len(ids), bool)
    targets[1:] = label_mask[:-1] == 1
    runs, current = [], []
    for tid, on in zip(ids.tolist(), targets.tolist(), strict=True):
        if on:
            current.append(tid)
        elif current:
            runs.append(tokenizer.decode(current, skip_special_tokens=False))
            current = []
    if current:
        runs.append(tokenizer.decode(current, skip_special_tokens=False))
    return runs


@pytest.mark.parametrize(
    ("template", "as_file", "turn_end"),
    [
        (CHATML, False, "<|im_end|>"),
        (LLAMA3, True, "<|eot_id|>"),
        (QWEN3, True, "<|im_end|>"),
        (CHATML_GENERATION, True, "<|im_end|>"),
    ],
    ids=["chatml-in-tokenizer-config", "llama3-chat_template.jinja", "qwen3-think-block", "generation-tags"],
)
def test_ids_equal_transformers_and_mask_is_the_assistant_turns(tmp_path, template, as_file, turn_end):
    transformers = pytest.importorskip("transformers")
    folder = make_folder(tmp_path, template, as_jinja_file=as_file, eos=turn_end)
    data = write_rows(tmp_path / "chat.jsonl", [{"messages": c} for c in CONVERSATIONS])
    assert detect_format(data) == "chat"
    got = samples(data, folder)
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    for (ids, mask), conversation in zip(got, CONVERSATIONS, strict=True):
        expected = hf.apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"]
        assert ids.tolist() == list(expected)  # same render, same tokens; nothing appended
        assert mask[-1] == 0  # label-aligned: the last position predicts nothing
        answers = [m["content"] + turn_end for m in conversation if m["role"] == "assistant"]
        assert supervised_text(hf, ids, mask) == answers
        # Bridge v0.3.1's mask (transformers' assistant_masks, from generation blocks): the same tokens
        if "{% generation %}" in template:
            hf_mask = hf.apply_chat_template(
                conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
            )["assistant_masks"]
            assert np.flatnonzero(mask[:-1]).tolist() == (np.flatnonzero(hf_mask) - 1).tolist()
        # control: the same mask one position off (input-aligned, not label-aligned) fails this check
        assert supervised_text(hf, ids, np.roll(mask, 1)) != answers


def test_control_a_template_that_drops_an_assistant_turn_is_refused(tmp_path):
    """A template that does not show an assistant turn's content as written (here: drops every assistant
    turn but the last) leaves nothing to place the mask on: one line, no silent wrong mask."""
    template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    )
    folder = make_folder(tmp_path, template)
    data = write_rows(tmp_path / "chat.jsonl", [{"messages": CONVERSATIONS[1]}])
    with pytest.raises(
        PackingError, match=r"chat\.jsonl:1: messages\[2\]: the assistant content does not appear"
    ) as err:
        samples(data, folder)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "escape",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os.system('echo pwned > PWNED') }}",
    ],
)
def test_sandbox_escapes_fail_with_one_line_naming_the_template(tmp_path, escape, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = make_folder(tmp_path, escape + CHATML, as_jinja_file=True)
    data = write_rows(tmp_path / "chat.jsonl", [{"messages": CONVERSATIONS[0]}])
    with pytest.raises(PackingError) as err:
        samples(data, folder)
    message = str(err.value)
    assert message.startswith(f"{folder / 'chat_template.jinja'}: chat template refused:"), message
    assert "unsafe" in message and "\n" not in message
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role must be one of"),
        ({"messages": [{"role": "user"}]}, "messages[0].content must be a string, got nothing"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content must be a string, got int"),
        ({"messages": ["hello"]}, "messages[0] must be an object, got str"),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant message"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, row, needle):
    folder = make_folder(tmp_path, CHATML)
    data = write_rows(tmp_path / "chat.jsonl", [{"messages": CONVERSATIONS[0]}, "", row])
    with pytest.raises(PackingError) as err:
        samples(data, folder)
    assert str(err.value).startswith(f"{data}:3: ") and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_config_switches_must_agree_with_the_rows(tmp_path):
    from packcfg.packing.api import tokenized_samples

    folder = make_folder(tmp_path, CHATML)
    root = tmp_path / "data"
    root.mkdir()
    write_rows(root / "training.jsonl", [{"messages": c} for c in CONVERSATIONS])
    config = {
        "tokenizer": {"tokenizer_model": str(folder)},
        "dataset": {
            "dataset_root": str(root),
            "seq_length": 256,
            "offline_packing_specs": {"packed_sequence_size": 256, "packed_train_data_path": "p.parquet"},
        },
    }
    with pytest.raises(PackingError, match="set dataset.dataset_kwargs.chat: true"):
        tokenized_samples(config)
    config["dataset"]["dataset_kwargs"] = {"chat": True, "use_hf_tokenizer_chat_template": True}
    got = tokenized_samples(config)
    assert len(got) == 2 and all(m.sum() > 0 for _, m in got)
    shutil.copy(resolve_path("@packcfg/data/sample_sft/training.jsonl"), root / "training.jsonl")
    with pytest.raises(PackingError, match="rows are not chat 'messages' \\(text format\\)"):
        tokenized_samples(config)
