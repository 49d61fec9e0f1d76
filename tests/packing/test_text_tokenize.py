"""Tokenizing Bridge SFT text: one tokenizer call per sample gives exactly the ids and masks of the two calls
(`input`, `" " + output`) packcfg made before, on the sample data, on tricky boundaries and fuzzed text, for
each pre-tokenizer it accepts; and the tokenized cache: a second pack does not tokenize, and a changed
source or tokenizer is tokenized again."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from packcfg.cli import main  # noqa: E402
from packcfg.packing.errors import PackingError  # noqa: E402
from packcfg.packing.sources import cache as token_cache  # noqa: E402
from packcfg.packing.sources import text  # noqa: E402
from packcfg.packing.sources.batch import make_batch  # noqa: E402
from packcfg.packing.sources.jsonl import jsonl_records  # noqa: E402
from packcfg.packing.tokenizer import load_tokenizer  # noqa: E402

from .conftest import SAMPLE_SFT, write_jsonl  # noqa: E402

TOKENIZER = SAMPLE_SFT / "tokenizer.json"

EDGES = [
    "", " ", "a", "a ", "a\n", "a\n\n", "x  ", "1", "12345", "'s", "it's", "é", "naïve café", "日本語", "a.",
    "(", "<eos>", "a<eos>", "\t", "a\t", "123 456", "A\r\n", "\u00a0", "x\u00a0", "\u2028", "ok 🙂", "  lead",
    "\nlead", "'", "?!", "a-b", "1,000", "'ll", "\r", "x\u3000",
]  # fmt: skip


def _reference_batches(path: Path, tok, batch_size: int):
    """packcfg's text reader before one-call tokenizing (commit af4b3d3), verbatim but for the names."""
    contexts, answers, linenos, first = [], [], [], 0

    def flush():
        ctx = tok.tokenizer.encode_batch(contexts, add_special_tokens=False)
        ans = tok.tokenizer.encode_batch(answers, add_special_tokens=False)
        ids_list, masks = [], []
        for c, a in zip(ctx, ans, strict=True):
            ids = np.asarray(c.ids + a.ids + [tok.eos_id], dtype=np.int32)
            lm = (np.arange(len(ids)) >= len(c.ids) - 1).astype(np.int8)
            lm[-1] = 0
            ids_list.append(ids)
            masks.append(lm)
        return make_batch(ids_list, masks, first, linenos)

    for lineno, obj in jsonl_records(path):
        if not contexts:
            first, linenos = lineno, []
        linenos.append(lineno)
        contexts.append(obj["input"])
        answers.append(" " + obj["output"])
        if len(contexts) >= batch_size:
            yield flush()
            contexts, answers = [], []
    if contexts:
        yield flush()


def _flat(batches) -> list[np.ndarray]:
    batches = list(batches)
    lens = [np.diff(b.offsets) for b in batches]
    return [np.concatenate([getattr(b, f) for b in batches]) for f in ("values", "mask")] + [
        np.concatenate(lens),
        np.concatenate([b.sample_lines() for b in batches]),
    ]


def _trained(tmp_path: Path, pre_tokenizer, name: str, normalizer=None) -> Path:
    """A byte-level BPE trained on the sample data with this pre-tokenizer, saved as tokenizer.json."""
    rows = [json.loads(x) for x in (SAMPLE_SFT / "training.jsonl").read_text().splitlines()[:1500]]
    # whitespace runs of every kind, so that the vocabulary merges them (then a run that crosses the
    # input/answer boundary gives other ids than two calls: the control below needs that)
    spaces = ["a \n b", "x  y", "c\n \nd", "e\t f", "g \r\n h", "i\n\n j", "k   l"] * 40
    corpus = [r["input"] + " " + r["output"] for r in rows] + EDGES * 3 + spaces
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<pad>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer)
    folder = tmp_path / name
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder / "tokenizer.json"


def _split_byte_level(pattern: str):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


@pytest.fixture(scope="module")
def tokenizers_accepted(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("tok")
    return {
        "bundled (GPT-2 byte-level)": TOKENIZER,
        "Llama 3 split": _trained(tmp, _split_byte_level(text._LLAMA3_PATTERN), "llama3"),
        "Qwen 2 split": _trained(tmp, _split_byte_level(text._QWEN2_PATTERN), "qwen2"),
    }


def _fuzz_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    alphabet = list("ab xyzQ019 \n\t\r'.,!?-(<>") + ["é", "日", "🙂", "\u00a0", "\u2028", "'s", "<eos>", "  "]
    pairs = []
    for _ in range(n):
        a = "".join(rng.choice(alphabet, size=int(rng.integers(0, 12))))
        b = "".join(rng.choice(alphabet, size=int(rng.integers(0, 12))))
        pairs.append((a, b))
    return pairs + [(a, b) for a in EDGES for b in EDGES]


def test_the_bundled_tokenizer_takes_one_call_and_it_equals_two_calls_on_the_sample_data():
    tok = load_tokenizer(TOKENIZER)
    assert text._joint_tokenizer(tok)
    for name in ("training.jsonl", "validation.jsonl"):
        rows = [obj for _, obj in jsonl_records(SAMPLE_SFT / name)]
        contexts, outputs = [r["input"] for r in rows], [r["output"] for r in rows]
        assert sum(text._joint_safe(c, o) for c, o in zip(contexts, outputs, strict=True)) == len(
            rows
        )  # all one call
        assert text._encode_text(tok, contexts, outputs, True) == text._encode_text(
            tok, contexts, outputs, False
        )


@pytest.mark.parametrize("which", ["bundled (GPT-2 byte-level)", "Llama 3 split", "Qwen 2 split"])
def test_one_call_equals_two_calls_on_edge_and_fuzzed_boundaries(tokenizers_accepted, which):
    tok = load_tokenizer(tokenizers_accepted[which])
    assert text._joint_tokenizer(tok), which
    pairs = _fuzz_pairs(2000, seed=len(which))
    contexts, outputs = [a for a, _ in pairs], [b for _, b in pairs]
    one = sum(text._joint_safe(c, o) for c, o in pairs)
    assert one > len(pairs) // 4  # the one-call path is exercised, not only the fallback
    assert text._encode_text(tok, contexts, outputs, True) == text._encode_text(tok, contexts, outputs, False)


def test_where_one_call_would_differ_the_sample_check_sends_it_to_two_calls(tokenizers_accepted):
    """Control: one call on the joined text does differ from two calls for some samples (an input ending in
    whitespace merges with the answer's space: the regex's whitespace-run rules); every such sample fails
    `_joint_safe`, so it takes two calls."""
    differing = []
    for which, path in tokenizers_accepted.items():
        tok = load_tokenizer(path).tokenizer

        def ids(s: str, tok=tok) -> list[int]:
            return tok.encode(s, add_special_tokens=False).ids

        for ctx, out in _fuzz_pairs(1500, seed=11):
            if ids(ctx + " " + out) != ids(ctx) + ids(" " + out):
                differing.append((which, ctx, out))
                assert not text._joint_safe(ctx, out), (which, ctx, out)
    assert len(differing) >= 10, differing


def test_other_tokenizer_pipelines_keep_two_calls(tmp_path):
    metaspace = _trained(tmp_path, pre_tokenizers.Metaspace(), "metaspace")
    normalized = _trained(
        tmp_path, pre_tokenizers.ByteLevel(add_prefix_space=False), "nfkc", normalizers.NFKC()
    )
    other_regex = _trained(tmp_path, _split_byte_level(r"\w+|\s+|[^\w\s]+"), "other")
    for path in (metaspace, normalized, other_regex):
        assert not text._joint_tokenizer(load_tokenizer(path)), path
    spec = json.loads(TOKENIZER.read_text())
    for change in (
        lambda s: s.update(
            truncation={"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
        ),
        lambda s: s["model"].update(dropout=0.1),
        lambda s: s["added_tokens"][1].update(rstrip=True),
        lambda s: s["added_tokens"][1].update(content="<e o s>"),
        lambda s: s["pre_tokenizer"].update(add_prefix_space=True),
    ):
        changed = json.loads(json.dumps(spec))
        change(changed)
        folder = tmp_path / f"changed{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / "tokenizer.json").write_text(json.dumps(changed))
        assert not text._joint_tokenizer(load_tokenizer(folder / "tokenizer.json")), changed


def test_text_batches_equal_the_previous_two_call_reader(tmp_path):
    rows = [json.loads(x) for x in (SAMPLE_SFT / "training.jsonl").read_text().splitlines()]
    rows += [{"input": a, "output": b} for a, b in _fuzz_pairs(300, seed=5)]
    src = write_jsonl(tmp_path / "sft.jsonl", rows)
    tok = load_tokenizer(TOKENIZER)
    new = _flat(text.iter_text_jsonl(src, tok, 97))
    old = _flat(_reference_batches(src, tok, 97))
    for a, b in zip(new, old, strict=True):
        assert np.array_equal(a, b)


def _pack(src: Path, tokenizer: Path, out: Path, capacity: int = 512) -> bytes:
    rc = main(
        [
            "pack",
            str(src),
            "--tokenizer",
            str(tokenizer),
            "--capacity",
            str(capacity),
            "--parquet",
            str(out),
            "-q",
            "--force",
        ]
    )
    assert rc == 0
    return out.read_bytes()


def test_packs_equal_those_of_two_calls_byte_for_byte(tmp_path, monkeypatch):
    monkeypatch.setenv(token_cache.ENV, "0")
    src = tmp_path / "training.jsonl"
    shutil.copy(SAMPLE_SFT / "training.jsonl", src)
    one = _pack(src, TOKENIZER, tmp_path / "one" / "packed.parquet")
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    monkeypatch.setattr(text, "_joint_tokenizer", lambda tok: False)
    two = _pack(src, TOKENIZER, tmp_path / "two" / "packed.parquet")
    assert one == two


class _Counting:
    def __init__(self, monkeypatch, fail: bool = False):
        self.calls = 0
        self.fail = fail
        real = text._encode_text

        def encode(*args, **kwargs):
            self.calls += 1
            if self.fail:
                raise AssertionError("the tokenizer was called")
            return real(*args, **kwargs)

        monkeypatch.setattr(text, "_encode_text", encode)
        monkeypatch.setattr(text, "_TEXT_CACHE", {})  # the in-process cache of small files: not this one


@pytest.fixture
def sft(tmp_path) -> Path:
    lines = (SAMPLE_SFT / "training.jsonl").read_text().splitlines()[:600]
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_second_pack_reads_the_tokenized_cache_and_writes_the_same_pack(tmp_path, sft, monkeypatch):
    out = tmp_path / "out" / "packed.parquet"
    first = _pack(sft, TOKENIZER, out)
    entries = list(token_cache.cache_root().iterdir())
    assert len(entries) == 1 and (entries[0] / "entry.json").is_file()
    counting = _Counting(monkeypatch, fail=True)
    assert _pack(sft, TOKENIZER, out) == first  # --force: packed again, from the cache
    _pack(sft, TOKENIZER, tmp_path / "out" / "other.parquet", capacity=1024)  # other settings, same cache
    assert counting.calls == 0
    # control: without the cache the same run does tokenize
    monkeypatch.setenv(token_cache.ENV, "0")
    counting.fail = False
    assert _pack(sft, TOKENIZER, out) == first
    assert counting.calls > 0


def test_a_changed_source_or_tokenizer_is_tokenized_again(tmp_path, sft, monkeypatch):
    monkeypatch.setattr(token_cache, "KEEP", 2)
    out = tmp_path / "out" / "packed.parquet"
    _pack(sft, TOKENIZER, out)
    counting = _Counting(monkeypatch)
    rows = sft.read_text().splitlines()
    rows[3] = json.dumps({"input": "Add: 1 + 1 =", "output": "2"})
    sft.write_text("\n".join(rows) + "\n")
    _pack(sft, TOKENIZER, out)
    assert counting.calls > 0
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    monkeypatch.setenv(token_cache.ENV, "0")
    assert _pack(sft, TOKENIZER, tmp_path / "fresh" / "packed.parquet") != b""  # (cache off)
    monkeypatch.delenv(token_cache.ENV)
    # the tokenizer: same tokenizer.json, a config file beside it now names the EOS (its checksum changes)
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))
    before = counting.calls
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    _pack(sft, folder / "tokenizer.json", out)
    assert counting.calls > before
    assert len(list(token_cache.cache_root().iterdir())) == token_cache.KEEP  # the oldest entry removed


def test_a_damaged_cache_entry_is_tokenized_again(tmp_path, sft, monkeypatch):
    out = tmp_path / "out" / "packed.parquet"
    first = _pack(sft, TOKENIZER, out)
    (entry,) = token_cache.cache_root().iterdir()
    with open(entry / "spool.bin", "r+b") as fh:
        fh.truncate(8)
    counting = _Counting(monkeypatch)
    assert _pack(sft, TOKENIZER, out) == first
    assert counting.calls > 0


def test_the_cache_lives_in_the_user_cache_folder_not_beside_the_packs(tmp_path, sft, monkeypatch):
    """The packed folder holds only what training reads; another output folder reuses the same entry."""
    monkeypatch.delenv("PACKCFG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    out = tmp_path / "out" / "packed.parquet"
    first = _pack(sft, TOKENIZER, out)
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    (entry,) = (tmp_path / "xdg" / "packcfg" / "tokenized").iterdir()
    assert (entry / "entry.json").is_file()
    counting = _Counting(monkeypatch, fail=True)
    assert _pack(sft, TOKENIZER, tmp_path / "elsewhere" / "packed.parquet") == first
    assert counting.calls == 0


# --------------------------------------------------------------------------------------------- ASCII words


def _ascii_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """Fuzzed ASCII inputs and outputs: every ASCII character (controls, 0x1c-0x1f and DEL included),
    whitespace runs, contractions in both cases, digit runs and added tokens' text."""
    rng = np.random.default_rng(seed)
    pieces = [chr(c) for c in range(128)] + ["word", " word", "Zz"] * 20
    pieces += ["'s", "'S", "'ll", "'LL", "'Re", "  ", "   ", "\r\n", "\n\n", " \n", "\t ", "123456", "1 000"]
    pieces += ["<eos>", "<pad>", "<eo", "s>", "<", "\x0b\x0b", "\x1c\x1c", " \x1f"]
    pairs = []
    for _ in range(n):
        a = "".join(rng.choice(pieces, size=int(rng.integers(0, 14))))
        b = "".join(rng.choice(pieces, size=int(rng.integers(0, 14))))
        pairs.append((a, b))
    return pairs + [(a, b) for a in EDGES for b in EDGES if a.isascii() and b.isascii()]


@pytest.mark.parametrize("which", ["bundled (GPT-2 byte-level)", "Llama 3 split", "Qwen 2 split"])
def test_ascii_samples_get_the_tokenizers_own_ids_without_calling_it_per_sample(
    tokenizers_accepted, which, monkeypatch
):
    tok = load_tokenizer(tokenizers_accepted[which])
    words = text._AsciiWords(tok, text._joint_pattern(tok))
    pairs = _ascii_pairs(3000, seed=len(which) + 1)
    contexts, outputs = [a for a, _ in pairs], [b for _, b in pairs]
    usable = words.usable(contexts, outputs)
    added = [any(t in a + "\n" + b for t in ("<eos>", "<pad>")) for a, b in pairs]
    assert usable == [not x for x in added]  # only the rows with an added token's text go to the tokenizer
    assert sum(usable) > len(pairs) * 3 // 4
    fast_c = [c for c, ok in zip(contexts, usable, strict=True) if ok]
    fast_o = [o for o, ok in zip(outputs, usable, strict=True) if ok]
    expected = text._Encoded.of_lists(*text._encode_with_tokenizer(tok, fast_c, fast_o, False))
    assert words.encode(fast_c, fast_o) == expected
    # both ways: the regex over every sample, and pieces between spaces where every space follows a
    # character other than whitespace (control: on the other samples pieces give other ids, with a
    # vocabulary that merges whitespace runs)
    assert words._by_regex(words.tables, fast_c, fast_o) == expected
    # the samples it leaves to the regex: those where a space of the input or of " " + output follows
    # whitespace
    follows = re.compile(r"[ \t\n\r\x0b\x0c] ").search
    spacey = [bool(follows(c) or follows(" " + o)) for c, o in zip(fast_c, fast_o, strict=True)]
    assert words._by_spaces(words.tables, fast_c, fast_o)[1] == [i for i, x in enumerate(spacey) if x]
    for flag in (False, True):
        c = [x for x, s in zip(fast_c, spacey, strict=True) if s is flag]
        o = [x for x, s in zip(fast_o, spacey, strict=True) if s is flag]
        assert len(c) > len(pairs) // 10
        two_calls = text._Encoded.of_lists(*text._encode_with_tokenizer(tok, c, o, False))
        if flag and which.startswith("bundled"):
            continue  # its vocabulary has no whitespace runs to merge: pieces happen to give its ids
        assert (words._by_spaces(words.tables, c, o)[0] == two_calls) is not flag
    # a table that fills up is started afresh between calls: same ids
    monkeypatch.setattr(text._AsciiWords, "WORDS_MAX", 50)
    small = text._AsciiWords(tok, text._joint_pattern(tok))
    chunks = [(fast_c[i : i + 100], fast_o[i : i + 100]) for i in range(0, len(fast_c), 100)]
    encoded = [small.encode(c, o) for c, o in chunks]
    assert small.tables.size() <= 50 + 200 * 14  # fresh tables, not ones that grew with every call
    assert np.array_equal(np.concatenate([e.ids for e in encoded]), expected.ids)
    assert np.array_equal(np.concatenate([e.ctx_len for e in encoded]), expected.ctx_len)
    # the whole chunk, ASCII and not, equals two calls (the ASCII rows through `words`)
    mixed = pairs + _fuzz_pairs(300, seed=3)
    c, o = [a for a, _ in mixed], [b for _, b in mixed]
    assert text._encode_text(tok, c, o, True) == text._Encoded.of_lists(
        *text._encode_with_tokenizer(tok, c, o, False)
    )


def test_the_ascii_regex_needs_ascii_whitespace_the_fuzz_tells(tokenizers_accepted):
    """Control: Python's Unicode `\\s` (which holds 0x1c-0x1f) instead of `re.ASCII`'s splits "it\\x1c's" as
    "it", "\\x1c", "'s" where the tokenizer has "it", "\\x1c'", "s": other ids with a vocabulary that merges
    "'s"; the fuzzed text above holds such cases."""
    tok = load_tokenizer(tokenizers_accepted["Llama 3 split"])
    words = text._AsciiWords(tok, text._joint_pattern(tok))
    pairs = [(a, b) for a, b in _ascii_pairs(1000, seed=9) if "<" not in a + b]
    pairs += [("it\x1c's", "go\x1d's"), ("x\x1f'", "\x1e's")]
    contexts, outputs = [a for a, _ in pairs], [b for _, b in pairs]
    expected = text._Encoded.of_lists(*text._encode_with_tokenizer(tok, contexts, outputs, False))
    assert words.encode(contexts, outputs) == expected
    unicode_words = text._AsciiWords(tok, text._joint_pattern(tok))
    unicode_words.findall = re.compile(text._ascii_regex(text._joint_pattern(tok)).pattern).findall
    unicode_words.tables = unicode_words._fresh()
    assert unicode_words.encode(contexts, outputs) != expected


# --------------------------------------------------------------------------------------------- processes


def test_a_large_source_is_tokenized_in_worker_processes_into_the_same_pack(tmp_path, monkeypatch):
    """Above PROCESS_MIN_BYTES (here: any size) the chunks go to spawned processes: the parent never encodes
    (its `_encode_text` would raise), and the pack is byte for byte the one threads make."""
    monkeypatch.setenv(token_cache.ENV, "0")
    rows = [json.loads(x) for x in (SAMPLE_SFT / "training.jsonl").read_text().splitlines()]
    rows += [{"input": a, "output": b} for a, b in _fuzz_pairs(300, seed=7)]  # non-ASCII, added tokens
    src = write_jsonl(tmp_path / "sft.jsonl", rows)
    threaded = _pack(src, TOKENIZER, tmp_path / "out" / "packed.parquet")
    monkeypatch.setattr(text, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(text, "_spawn_safe", lambda: True)
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    monkeypatch.setattr(text, "_TEXT_CACHE_MAX_BYTES", 0)  # straight to iter_text_jsonl
    _Counting(monkeypatch, fail=True)
    assert _pack(src, TOKENIZER, tmp_path / "out" / "packed.parquet") == threaded


def test_bad_rows_name_their_line_with_worker_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(text, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(text, "_spawn_safe", lambda: True)
    rows = [{"input": "a", "output": "b"}] * 5000 + [{"input": "a", "output": 3}]
    src = write_jsonl(tmp_path / "sft.jsonl", rows)
    tok = load_tokenizer(TOKENIZER)
    with pytest.raises(PackingError, match=r"sft.jsonl:5001: 'output' must be a string, got int"):
        list(text.iter_text_jsonl(src, tok, 1000))


def test_worker_processes_only_where_spawning_does_not_rerun_the_users_script(monkeypatch):
    import sys
    import types

    def main_module(spec_name=None, file=None):
        mod = types.ModuleType("__main__")
        mod.__spec__ = types.SimpleNamespace(name=spec_name) if spec_name else None
        if file is not None:
            mod.__file__ = file
        return mod

    for mod, safe in [
        (main_module("packcfg.__main__", "/x/packcfg/__main__.py"), True),  # python -m packcfg
        (main_module("pytest.__main__", "/x/pytest/__main__.py"), True),
        (main_module(None, "/usr/local/bin/packcfg"), True),  # the console script (guarded)
        (main_module(None, None), True),  # python -c
        (main_module(None, "/home/me/train.py"), False),  # a script may lack the __main__ guard
        (main_module("mytool", "/home/me/mytool.py"), False),  # python -m mytool
    ]:
        monkeypatch.setitem(sys.modules, "__main__", mod)
        assert text._spawn_safe() is safe, (mod.__spec__, getattr(mod, "__file__", None))


# --------------------------------------------------------------------------------------------- parsing


def test_rows_parsed_with_orjson_are_those_json_gives_and_its_messages_stay(tmp_path, monkeypatch):
    pytest.importorskip("orjson")
    lines = [
        json.dumps({"input": "a\u0000b", "output": "é 🙂 \\n"}),
        '{"input": "x", "input": "dup", "output": "y", "extra": [1, 2.5, null]}',
        '{"input": "\\ud83d\\ude42", "output": "\\u00e9"}',
        '{"input": "lone \\ud800", "output": "ok"}',  # orjson refuses a lone surrogate; json keeps it
        '  {"output": "b", "input": ""}  ',
        '{"input": "nan", "output": "z", "n": NaN}',  # json only
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("\n".join(lines) + "\n\n")
    fast = list(text._text_rows(src, 4))
    monkeypatch.setattr(text, "_fast_loads", lambda: None)
    assert list(text._text_rows(src, 4)) == fast
    assert [len(c) for _, c, _ in fast] == [4, 2]
    # where orjson and json differ, the message is json's: a big int is an int, not a float
    for row, message in [
        ('{"input": 18446744073709551616, "output": "x"}', "'input' must be a string, got int"),
        ('{"input": "a", "output": NaN}', "'output' must be a string, got float"),
        ('{"input": "a"}', "missing 'output'"),
        ('{"input": "a", "output": "b",}', "malformed JSON"),
        ('["input", "output"]', "expected a JSON object, got list"),
    ]:
        monkeypatch.undo()
        src.write_text(lines[0] + "\n" + row + "\n")
        with pytest.raises(PackingError, match=re.escape(f"rows.jsonl:2: {message}")):
            list(text._text_rows(src, 4))


def test_without_process_support_threads_tokenize(tmp_path, monkeypatch):
    """Where a process pool cannot be made (no /dev/shm for its locks: OSError), threads do the work."""
    monkeypatch.setattr(text, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(text, "_spawn_safe", lambda: True)

    def no_pool(tok, joint):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(text, "_worker_pool", no_pool)
    counting = _Counting(monkeypatch)
    src = write_jsonl(tmp_path / "sft.jsonl", [{"input": "a b", "output": "c"}] * 50)
    tok = load_tokenizer(TOKENIZER)
    batches = list(text.iter_text_jsonl(src, tok, 16))
    assert sum(len(b.offsets) - 1 for b in batches) == 50
    assert counting.calls == 4  # in this process


@pytest.mark.parametrize("which", ["bundled (GPT-2 byte-level)", "Llama 3 split", "Qwen 2 split"])
def test_text_that_is_not_ascii_is_cut_at_spaces_too(tokenizers_accepted, which, monkeypatch):
    """Pieces that are not ASCII get their ids from the tokenizer, a piece at a time: the samples equal two
    calls, and only those where a space follows (Unicode) whitespace go to the tokenizer whole."""
    tok = load_tokenizer(tokenizers_accepted[which])
    rng = np.random.default_rng(len(which))
    alphabet = [
        "é",
        "日本",
        "🙂",
        "naïve",
        "x",
        "Zz",
        "1",
        ",",
        "'s",
        " ",
        " ",
        " ",
        "\u00a0",
        "\u2028",
        "\u3000",
    ]
    pairs = [
        ("".join(rng.choice(alphabet, size=int(rng.integers(0, 10)))), "".join(rng.choice(alphabet, size=8)))
        for _ in range(1500)
    ]
    contexts, outputs = [a for a, _ in pairs], [b for _, b in pairs]
    expected = text._Encoded.of_lists(*text._encode_with_tokenizer(tok, contexts, outputs, False))
    whole: list[str] = []
    real = text._encode_with_tokenizer

    def recording(tok, contexts, outputs, joint):
        whole.extend(contexts)
        return real(tok, contexts, outputs, joint)

    monkeypatch.setattr(text, "_encode_with_tokenizer", recording)
    words = text._AsciiWords(tok, text._joint_pattern(tok))
    assert words.usable(contexts, outputs) == [True] * len(pairs)
    assert words.encode(contexts, outputs) == expected
    follows = re.compile(r"\s ").search  # Unicode \s: a space after whitespace
    spacey = [(c, o) for c, o in pairs if follows(c) or follows(" " + o)]
    assert sorted(whole) == sorted(c for c, o in spacey if not (c + o).isascii())
    assert len(pairs) - len(spacey) > len(pairs) // 4  # most samples cut at spaces
    assert sum(not (c + o).isascii() for c, o in pairs) > len(pairs) * 3 // 4


def test_what_the_tokenizers_regex_calls_whitespace_python_calls_whitespace_too():
    """The cut at spaces rests on it: a piece whose last character the tokenizer's `\\s` matches must count as
    ending in whitespace (`_Table.weak`). "a" + c + c + "b" is four pre-tokens exactly where c is `\\s`."""
    pre = load_tokenizer(TOKENIZER).tokenizer.pre_tokenizer
    regex_space = {
        cp
        for cp in range(0x10000)
        if not 0xD800 <= cp < 0xE000 and len(pre.pre_tokenize_str("a" + chr(cp) * 2 + "b")) == 4
    }
    assert {0x09, 0x0B, 0x85, 0xA0, 0x2028, 0x3000} <= regex_space  # the probe finds whitespace
    assert all(chr(cp).isspace() for cp in regex_space)
    assert regex_space & set(range(128)) == {ord(c) for c in text._ASCII_SPACE} - {0x20}
    table = text._Table(lambda key: [], {})
    assert [table.weak[table[key]] for key in ("a\u3000", "a\x1c", "a\t", "a", "", "\xff")] == [
        True,
        False,
        True,
        False,
        True,
        False,
    ]


def test_the_per_tokenizer_tables_go_with_the_tokenizer():
    import gc
    import weakref

    tok = load_tokenizer(TOKENIZER)
    words = text._ascii_words(tok)
    assert words is not None and text._ascii_words(tok) is words  # one per tokenizer object
    assert text._ascii_words(load_tokenizer(TOKENIZER)) is not words  # (that one is gone again)
    gone = weakref.ref(tok)
    key = id(tok)
    del tok
    gc.collect()
    assert gone() is None and key not in text._WORDS  # the entry did not keep the tokenizer alive


def test_a_fast_path_that_goes_wrong_stops_the_pack_naming_the_line(tmp_path, monkeypatch, capsys):
    """The spot check (text.CHECK_EVERY): a sample the fast path got wrong stops the pack before anything is
    written, naming the file and line; PACKCFG_FAST_TOKENIZE=0 tokenizes every row with the tokenizer and
    gives the same pack as the fast path; control: an unchecked sample's error is not seen (the check samples)."""
    monkeypatch.setenv(token_cache.ENV, "0")
    src = tmp_path / "training.jsonl"
    shutil.copy(SAMPLE_SFT / "training.jsonl", src)
    fast = _pack(src, TOKENIZER, tmp_path / "fast" / "packed.parquet")
    monkeypatch.setenv("PACKCFG_FAST_TOKENIZE", "0")
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    assert _pack(src, TOKENIZER, tmp_path / "slow" / "packed.parquet") == fast
    monkeypatch.delenv("PACKCFG_FAST_TOKENIZE")
    real = text._AsciiWords.encode

    def wrong_at(row: int):
        def encode(self, contexts, outputs):
            enc = real(self, contexts, outputs)
            starts = np.cumsum(enc.lens) - enc.lens
            enc.ids[starts[row]] += 1  # the first id of one sample of the chunk
            return enc

        return encode

    monkeypatch.setattr(text._AsciiWords, "encode", wrong_at(text.CHECK_EVERY))  # a checked sample
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    out = tmp_path / "bad" / "packed.parquet"
    rc = main(["pack", str(src), "--tokenizer", str(TOKENIZER), "--capacity", "512", "--parquet", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"training.jsonl:{text.CHECK_EVERY + 1}: packcfg's fast tokenizing gave other ids" in err
    assert not out.parent.exists() or not any(out.parent.iterdir())
    monkeypatch.setattr(text._AsciiWords, "encode", wrong_at(1))  # not a checked sample: not caught
    monkeypatch.setattr(text, "_TEXT_CACHE", {})
    assert _pack(src, TOKENIZER, tmp_path / "unchecked" / "packed.parquet") != fast
