"""Bridge SFT JSONL text (`input`/`output`) tokenized with a local tokenizer.json."""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.planning.common import concat_ranges
from packcfg.packing.sources import threads
from packcfg.packing.sources.batch import Batch, label_mask_from_answer_start
from packcfg.packing.sources.jsonl import jsonl_text_lines, parse_line
from packcfg.packing.tokenizer import LoadedTokenizer, load_tokenizer

# Small text sources are tokenized once per process: the trainer calls ensure_packed and then
# tokenized_samples on the same file, and tokenizing dominates both. Keyed by both files' identity.
_TEXT_CACHE: dict[tuple[Any, ...], list[Batch]] = {}
_TEXT_CACHE_MAX_BYTES = 32 << 20


def tokenized_text(path: Path, tokenizer: Path, batch_size: int) -> Iterator[Batch]:
    tok = load_tokenizer(tokenizer)
    try:
        st, tt = path.stat(), tok.path.stat()
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if st.st_size > _TEXT_CACHE_MAX_BYTES:
        yield from iter_text_jsonl(path, tok, batch_size)
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
        cached = list(iter_text_jsonl(path, tok, batch_size))
        if len(_TEXT_CACHE) >= 4:
            _TEXT_CACHE.pop(next(iter(_TEXT_CACHE)))
        _TEXT_CACHE[key] = cached
    yield from cached


# The pre-tokenizers under which one call on "{input} {output}" gives exactly the ids of the two calls
# `input` and `" " + output` (see `_joint_tokenizer`): GPT-2's byte-level regex, and a Split on Llama 3's or
# Qwen 2's pattern followed by a byte-level step without its own regex.
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
JOINT_SPLIT_PATTERNS = (_LLAMA3_PATTERN, _QWEN2_PATTERN)
# `ByteLevel(use_regex=True)`'s own regex (tokenizers' pre_tokenizers/byte_level.rs)
_GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# text samples tokenized per call; chunks are tokenized by this many threads side by side (the tokenizer
# releases the GIL and runs its own threads within a call; two callers keep both cores busy while one
# of them turns ids into arrays)
TOKENIZE_WORKERS = 2


def _joint_tokenizer(tok: LoadedTokenizer) -> bool:
    """Whether this tokenizer splits "{input} {output}" into exactly the tokens of `input` followed by those of
    `" " + output` whenever `input` ends, and `output` starts, with a letter, digit or printable ASCII
    character (`_joint_safe`); then one call per sample replaces two.

    Why, for the pre-tokenizers accepted here: with no normalizer and no truncation or padding, a tokenizer's
    ids are the BPE of each pre-token in turn (deterministic: no dropout). The pre-tokens are regex matches
    (GPT-2's, Llama 3's or Qwen 2's pattern), found left to right; none of their alternatives crosses from a
    non-space character into a following space, and none looks behind, so the matches inside `input` end
    exactly where it ends and the matches from the space on are those of `" " + output` alone (the only
    lookahead, after a whitespace run, is decided inside that run, and `input` does not end in one). Added
    tokens are split out before that; they cannot span the boundary when none holds whitespace or strips
    it (lstrip, rstrip, single_word). Anything else (another pre-tokenizer, a normalizer, truncation,
    padding, BPE dropout, another model) keeps two calls."""
    return _joint_pattern(tok) is not None


def _joint_pattern(tok: LoadedTokenizer) -> str | None:
    """The pre-tokenizer's regex of a `_joint_tokenizer` (GPT-2's for `ByteLevel`), else None."""
    import json

    try:
        spec = json.loads(tok.tokenizer.to_str())
    except (ValueError, AttributeError):
        return None
    if spec.get("normalizer") is not None or spec.get("truncation") is not None:
        return None
    if spec.get("padding") is not None:
        return None
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout") not in (None, 0, 0.0):
        return None
    for added in spec.get("added_tokens") or []:
        content = added.get("content")
        if not isinstance(content, str) or any(ch.isspace() for ch in content):
            return None
        if added.get("lstrip") or added.get("rstrip") or added.get("single_word"):
            return None
    pre = spec.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        ok = pre.get("use_regex", True) is True and pre.get("add_prefix_space") is False
        return _GPT2_PATTERN if ok else None
    if pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers") or []
        if len(steps) != 2:
            return None
        split, byte_level = steps
        pattern = (split.get("pattern") or {}).get("Regex")
        ok = (
            split.get("type") == "Split"
            and pattern in JOINT_SPLIT_PATTERNS
            and split.get("behavior") == "Isolated"
            and split.get("invert") is False
            and byte_level.get("type") == "ByteLevel"
            and byte_level.get("use_regex") is False
            and byte_level.get("add_prefix_space") is False
        )
        return pattern if ok else None
    return None


_ASCII_SPACE = frozenset(" \t\n\r\x0b\x0c")  # `\\s` in ASCII
# A character no row `_AsciiWords` takes holds (`usable`): between the texts of one call, a boundary that no
# pre-token crosses (see `_ascii_regex`, `_AsciiWords._by_spaces`), a key of its own, mapped to the id -1
_SEP = "\xff"


def _ascii_regex(pattern: str) -> re.Pattern[str]:
    """`pattern` (a `_joint_pattern`) in Python's `re`, for ASCII texts joined by `_SEP`: on each text, the
    matches of `pattern` alone, and `_SEP` as a match of its own.

    In ASCII, `\\p{L}` is exactly [A-Za-z], `\\p{N}` [0-9], and `\\s` (Unicode White_Space) the six characters
    [\\t\\n\\v\\f\\r ] that `re.ASCII` gives it (0x1c-0x1f are not whitespace there either). `_SEP` acts as the
    end of a text: no class takes it (it is added to each negated class) and the lookahead `(?!\\S)`, which
    holds at the end of a text, holds before it (`(?![^\\s<SEP>])`); the patterns have no other lookaround,
    anchors or backreferences."""
    out, in_class = [], False
    for part in re.split(r"(\\p\{[LN]\}|\\.|\[\^|\[|\])", pattern):
        if part in ("[", "[^") and not in_class:
            in_class = True
            part = "[^" + _SEP if part == "[^" else part
        elif part == "]" and in_class:
            in_class = False
        elif part in (r"\p{L}", r"\p{N}"):
            chars = "A-Za-z" if part == r"\p{L}" else "0-9"
            part = chars if in_class else f"[{chars}]"
        elif part == r"\S" and not in_class:
            part = r"[^\s" + _SEP + "]"
        out.append(part)
    return re.compile("".join(out) + "|" + _SEP, re.ASCII)


def _byte_level_ascii() -> dict[int, str]:
    """GPT-2's byte-to-unicode table (what `ByteLevel` maps each byte to) for the ASCII bytes: printable
    characters but the space stand for themselves, 0-32 for U+0100-U+0120 and 127 for U+0121."""
    shifted = [b for b in range(128) if not ("!" <= chr(b) <= "~")]
    return {b: chr(b) if "!" <= chr(b) <= "~" else chr(256 + shifted.index(b)) for b in range(128)}


class _Table(dict):
    """key -> its number k, whose ids are `ids[start[k]:start[k] + count[k]]`, from `compute(key)` on a miss.
    Misses may come from two threads at once: a lock keeps the lists in step."""

    def __init__(self, compute: Callable[[str], list[int]], preset: dict[str, list[int]]):
        super().__init__()
        self.compute = compute
        self.ids: list[int] = []
        self.start: list[int] = []
        self.count: list[int] = []
        # of each key: empty or ending in whitespace (`weak`), starting with `_SEP` (`first`): see `flags`
        self.weak: list[bool] = []
        self.first: list[bool] = []
        self._flags: tuple[np.ndarray, np.ndarray] | None = None
        self.lock = threading.Lock()
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        for key, ids in preset.items():
            self._add(key, ids)

    def _add(self, key: str, ids: list[int]) -> int:
        k = len(self.start)
        self.start.append(len(self.ids))
        self.count.append(len(ids))
        self.ids.extend(ids)
        # (a non-ASCII last character: weak where Python calls it whitespace, a superset of Unicode's
        # White_Space, which is `\\s` in the tokenizer's regex)
        last = key[-1:]
        self.weak.append(not last or (last in _ASCII_SPACE if last.isascii() else last.isspace()))
        self.first.append(key[:1] == _SEP)
        self[key] = k
        self._arrays = self._flags = None
        return k

    def __missing__(self, key: str) -> int:
        ids = self.compute(key)
        with self.lock:
            k = self.get(key)
            return self._add(key, ids) if k is None else k

    def ids_of(self, key: str) -> list[int]:
        k = self[key]
        s = self.start[k]
        return self.ids[s : s + self.count[k]]

    def flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(weak, first) of every key numbered so far, as bool arrays."""
        with self.lock:
            if self._flags is None:
                self._flags = (np.asarray(self.weak, dtype=bool), np.asarray(self.first, dtype=bool))
            return self._flags

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids int32, start int64, count int64) of every key numbered so far."""
        with self.lock:
            if self._arrays is None:
                self._arrays = (
                    np.asarray(self.ids, dtype=np.int32),
                    np.asarray(self.start, dtype=np.int64),
                    np.asarray(self.count, dtype=np.int64),
                )
            return self._arrays


class _Tables:
    """`words`: an ASCII pre-token's ids, from the BPE model (`_SEP`: -1); `pieces`: a text's piece between two
    spaces -> the ids of `" " + piece`, or for a piece starting with `_SEP` (a text's first) -1 and those of
    the rest without a space: from its ASCII pre-tokens' ids, or for a piece that is not ASCII from the
    tokenizer itself (`encode`, one call; the piece holds no added token's text, see `_AsciiWords.usable`)."""

    def __init__(self, model: Any, findall: Callable[[str], list[str]], encode: Callable[[str], list[int]]):
        table = str.maketrans(_byte_level_ascii())
        self.findall, self.encode = findall, encode
        self.words = _Table(lambda w: [t.id for t in model.tokenize(w.translate(table))], {_SEP: [-1]})
        self.pieces = _Table(self._piece, {})

    def _piece(self, piece: str) -> list[int]:
        head, text = ([-1], piece[1:]) if piece[:1] == _SEP else ([], " " + piece)
        if not text.isascii():
            return head + self.encode(text)
        return head + list(itertools.chain.from_iterable(map(self.words.ids_of, self.findall(text))))

    def size(self) -> int:
        return max(len(self.words), len(self.pieces))


@dataclass(eq=False)
class _Encoded:
    """The ids of n samples, flat: sample j is `lens[j]` ids (no EOS), the first `ctx_len[j]` of them its
    input's. Equal when the arrays are."""

    ids: np.ndarray  # int32
    lens: np.ndarray  # int64
    ctx_len: np.ndarray  # int64

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Encoded) and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in ("ids", "lens", "ctx_len")
        )

    @classmethod
    def of_lists(cls, ids: list[list[int]], ctx_len: list[int]) -> _Encoded:
        return cls(
            np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32),
            np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)),
            np.asarray(ctx_len, dtype=np.int64).reshape(len(ids)),
        )


class _AsciiWords:
    """The ids of samples under a `_joint_tokenizer`, a chunk at a time, without the tokenizer's pipeline per
    sample.

    Such a tokenizer's ids are, exactly, the BPE model's ids of each pre-token (a regex match, in order),
    byte-level mapped (see `_joint_tokenizer`), and BPE without dropout gives a pre-token the same ids
    wherever it occurs. Texts are cut at their spaces where that is exact (`_by_spaces`: every space follows
    a character other than whitespace) and each distinct piece is tokenized once (`_Tables`: an ASCII piece
    from its pre-tokens, split by `_ascii_regex`, each tokenized once by the model (`tokenizers`' own BPE,
    merges and all); another by the tokenizer itself; fresh tables past `WORDS_MAX`); a chunk's ids are
    gathered in numpy. Samples where a space follows whitespace are split by `_ascii_regex` in one pass
    (`_by_regex`) when ASCII, else left to the tokenizer; samples holding an added token's text (split out
    before pre-tokenizing) or `_SEP` are left to the tokenizer (`usable`). 1M ASCII rows of the sample
    data: ~50 s of CPU in `encode_batch`, ~5 s here. tests/packing/test_text_tokenize.py checks equality
    with the tokenizer on edge cases and fuzzed text."""

    WORDS_MAX = 1 << 17

    def __init__(self, tok: LoadedTokenizer, pattern: str):
        self.tok = dataclasses.replace(tok)  # a copy: `_WORDS` must not keep `tok` alive
        self.findall = _ascii_regex(pattern).findall
        self.model = tok.tokenizer.model
        self.tables = self._fresh()
        self.added = [t.content for t in tok.tokenizer.get_added_tokens_decoder().values()]
        # an added token's first two characters: a chunk holding none of them holds no added token
        self.starts = sorted({a[:2] for a in self.added})

    def _fresh(self) -> _Tables:
        encode = self.tok.tokenizer.encode
        return _Tables(self.model, self.findall, lambda text: encode(text, add_special_tokens=False).ids)

    def _plain(self, text: str) -> bool:
        return _SEP not in text and not any(a in text for a in self.added)

    def usable(self, contexts: list[str], outputs: list[str]) -> list[bool]:
        """Which samples `encode` takes: input and output holding no added token's text and no `_SEP`."""
        blob = "\n".join(itertools.chain(contexts, outputs))
        if _SEP in blob or any(s in blob for s in self.starts):
            plain = self._plain
            return [plain(c) and plain(o) for c, o in zip(contexts, outputs, strict=True)]
        return [True] * len(contexts)

    def encode(self, contexts: list[str], outputs: list[str]) -> _Encoded:
        """The ids of usable samples, as two calls (`input`, `" " + output`) of the tokenizer give them:
        `_by_spaces`, and for the samples it leaves `_by_regex` (ASCII ones) or the tokenizer."""
        if self.tables.size() > self.WORDS_MAX:
            self.tables = self._fresh()  # fresh tables (a call using the old ones keeps them)
        tables = self.tables
        enc, spacey = self._by_spaces(tables, contexts, outputs)
        if not spacey:
            return enc
        other = set(spacey)
        plain = [i for i in range(len(contexts)) if i not in other]
        ascii_ = [i for i in spacey if contexts[i].isascii() and outputs[i].isascii()]
        rest = [i for i in spacey if not (contexts[i].isascii() and outputs[i].isascii())]
        c, o = contexts, outputs
        return _merge(
            len(contexts),
            [
                (plain, self._by_spaces(tables, [c[i] for i in plain], [o[i] for i in plain])[0]),
                (ascii_, self._by_regex(tables, [c[i] for i in ascii_], [o[i] for i in ascii_])),
                (
                    rest,
                    _Encoded.of_lists(
                        *_encode_with_tokenizer(self.tok, [c[i] for i in rest], [o[i] for i in rest], True)
                    ),
                ),
            ],
        )

    def _by_spaces(
        self, tables: _Tables, contexts: list[str], outputs: list[str]
    ) -> tuple[_Encoded, list[int]]:
        """The ids of samples whose every space follows a character other than whitespace, and the samples
        where one does not (their ids here are not the tokenizer's: `_by_regex` takes them).

        In such a text every space starts a pre-token (none of the patterns' alternatives runs from a
        character other than whitespace into a space, and their only lookahead, after a whitespace run,
        is then decided before the space), so its pre-tokens are those of its first piece and of
        `" " + piece` for each piece after a space, each looked up in `tables.pieces` (a dict lookup instead
        of `re` for every piece seen before). The texts are joined as `_SEP` input `" " _SEP`
        `" " + output` `" "` `_SEP` ...: each text's first piece starts with `_SEP` (the id -1, where the
        text starts; the space before it is not the text's), and `str.split(" ")` gives the pieces. A space
        of a text that follows whitespace is an empty piece, or one ending in whitespace (`_Table.weak`),
        followed by one that does not start with `_SEP`."""
        n = len(contexts)
        if not n:
            return _Encoded(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64)), []
        text = "".join(
            itertools.chain.from_iterable(
                zip(
                    itertools.repeat(_SEP),
                    contexts,
                    itertools.repeat(f" {_SEP} "),
                    outputs,
                    itertools.repeat(" "),
                )
            )
        )[:-1]
        pieces = text.split(" ")
        table = tables.pieces
        numbers = np.fromiter(map(table.__getitem__, pieces), dtype=np.int64, count=len(pieces))
        weak, first = table.flags()
        bad = np.flatnonzero(weak[numbers[:-1]] & ~first[numbers[1:]]) + 1  # the pieces after such spaces
        spacey: list[int] = []
        if len(bad):
            text_of_piece = np.cumsum(first[numbers]) - 1  # texts alternate: input, output, input, ...
            spacey = np.unique(text_of_piece[bad] // 2).tolist()
        return self._gather(table, numbers, n, starts=True), spacey

    def _by_regex(self, tables: _Tables, contexts: list[str], outputs: list[str]) -> _Encoded:
        """Any usable samples: the texts joined by `_SEP` (`_ascii_regex` stops every pre-token there) and
        split by the regex in one pass."""
        n = len(contexts)
        if not n:
            return _Encoded(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))
        text = "".join(
            itertools.chain.from_iterable(
                zip(contexts, itertools.repeat(_SEP + " "), outputs, itertools.repeat(_SEP))
            )
        )
        pieces = self.findall(text)
        numbers = np.fromiter(map(tables.words.__getitem__, pieces), dtype=np.int64, count=len(pieces))
        return self._gather(tables.words, numbers, n, starts=False)

    @staticmethod
    def _gather(table: _Table, numbers: np.ndarray, n: int, starts: bool) -> _Encoded:
        """The ids of `table`'s keys `numbers`, in which the 2n separators (id -1) stand where each text
        starts (`starts`) or where it ends."""
        ids, start, count = table.arrays()
        counts = count[numbers]
        if len(counts) and counts.max() == 1:  # one id a key (large vocabularies, mostly)
            flat = ids[start[numbers]]
        else:
            flat = ids[concat_ranges(start[numbers], counts)]
        seps = np.flatnonzero(flat < 0)
        if len(seps) != 2 * n:  # pragma: no cover - every _SEP is a key (or starts one) of its own
            raise AssertionError(f"{len(seps)} separators in {n} samples")
        # texts lie between consecutive separators, after the last one (`starts`) or before the first
        bounds = np.append(seps, len(flat)) if starts else np.insert(seps, 0, -1)
        lengths = np.diff(bounds) - 1
        ctx_len = lengths[0::2]
        return _Encoded(flat[flat >= 0], ctx_len + lengths[1::2], ctx_len)


def _merge(n: int, parts: list[tuple[list[int], _Encoded]]) -> _Encoded:
    """The samples 0..n-1 in order, from parts that each hold some of them (their row numbers, in order)."""
    lens = np.zeros(n, dtype=np.int64)
    ctx_len = np.zeros(n, dtype=np.int64)
    for rows, enc in parts:
        lens[rows] = enc.lens
        ctx_len[rows] = enc.ctx_len
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.int32)
    for rows, enc in parts:
        if len(rows):  # each part's samples, in its own order, to where they start in the chunk
            own = np.zeros(len(rows), dtype=np.int64)
            np.cumsum(enc.lens[:-1], out=own[1:])
            ids[np.repeat(offsets[rows] - own, enc.lens) + np.arange(len(enc.ids))] = enc.ids
    return _Encoded(ids, lens, ctx_len)


# the `_AsciiWords` of each LoadedTokenizer alive (by id; the entry goes when the tokenizer object does, and it
# holds no reference to that object, so it does not keep it alive)
_WORDS: dict[int, _AsciiWords | None] = {}


def _ascii_words(tok: LoadedTokenizer) -> _AsciiWords | None:
    if os.environ.get("PACKCFG_FAST_TOKENIZE", "").lower() in ("0", "off", "no", "false"):
        return None  # every sample through the tokenizer itself (slower, the same ids)
    key = id(tok)
    if key in _WORDS:
        return _WORDS[key]
    pattern = _joint_pattern(tok)
    words = _AsciiWords(tok, pattern) if pattern is not None else None
    weakref.finalize(tok, _WORDS.pop, key, None)
    _WORDS[key] = words
    return words


def _plain(ch: str) -> bool:
    """A letter, a digit or printable ASCII other than the space: never whitespace under any regex flavour."""
    return ch.isalnum() or " " < ch < "\x7f"


def _joint_safe(context: str, output: str) -> bool:
    """The sample may be tokenized in one call (under a `_joint_tokenizer`): the input is empty or ends with a
    plain character, and the output starts with one."""
    return bool(output) and _plain(output[0]) and (not context or _plain(context[-1]))


def _encode_text(tok: LoadedTokenizer, contexts: list[str], outputs: list[str], joint: bool) -> _Encoded:
    """The ids of `input + " " + output` of each sample (no EOS yet), and how many of them are the input's:
    exactly what two calls, `input` and `" " + output`, give. Under a `_joint_tokenizer`, ASCII samples go
    through `_AsciiWords`, and of the others one call per sample where `_joint_safe` holds (the input's tokens
    are those starting before its end); two calls for the rest."""
    words = _ascii_words(tok) if joint else None
    if words is None:
        return _Encoded.of_lists(*_encode_with_tokenizer(tok, contexts, outputs, joint))
    ok = words.usable(contexts, outputs)
    if all(ok):
        return words.encode(contexts, outputs)
    fast = [i for i, x in enumerate(ok) if x]
    rest = [i for i, x in enumerate(ok) if not x]
    return _merge(
        len(contexts),
        [
            (fast, words.encode([contexts[i] for i in fast], [outputs[i] for i in fast])),
            (
                rest,
                _Encoded.of_lists(
                    *_encode_with_tokenizer(
                        tok, [contexts[i] for i in rest], [outputs[i] for i in rest], joint
                    )
                ),
            ),
        ],
    )


def _encode_with_tokenizer(
    tok: LoadedTokenizer, contexts: list[str], outputs: list[str], joint: bool
) -> tuple[list[list[int]], list[int]]:
    """`_encode_text` through the tokenizer: one call per `_joint_safe` sample (under a `_joint_tokenizer`),
    two calls for the others."""
    import bisect

    n = len(contexts)
    ids: list[list[int]] = [[] for _ in range(n)]
    ctx_len = [0] * n
    one = [i for i in range(n) if _joint_safe(contexts[i], outputs[i])] if joint else []
    encode = tok.tokenizer.encode_batch
    if one:
        encodings = encode([contexts[i] + " " + outputs[i] for i in one], add_special_tokens=False)
        for i, e in zip(one, encodings, strict=True):
            ids[i] = e.ids
            b = len(contexts[i])
            # the answer's first token starts at the space (unless offsets are trimmed: then scan them)
            k = e.char_to_token(b)
            if k is None or e.token_to_chars(k)[0] != b:
                k = bisect.bisect_left([s for s, _ in e.offsets], b)
            ctx_len[i] = k
    done = set(one)
    two = [i for i in range(n) if i not in done]
    if two:
        ctx = encode([contexts[i] for i in two], add_special_tokens=False)
        ans = encode([" " + outputs[i] for i in two], add_special_tokens=False)
        for i, c, a in zip(two, ctx, ans, strict=True):
            ids[i] = c.ids + a.ids
            ctx_len[i] = len(c.ids)
    return ids, ctx_len


def _text_batch(tok: LoadedTokenizer, rows: tuple[list[int], list[str], list[str]], joint: bool) -> Batch:
    """One chunk of rows as a Batch: ids, then EOS; the mask predicts the answer and EOS."""
    linenos, contexts, outputs = rows
    enc = _encode_text(tok, contexts, outputs, joint)
    if joint and _ascii_words(tok) is not None:
        _spot_check(tok, enc, rows)
    offsets = np.zeros(len(enc.lens) + 1, dtype=np.int64)
    np.cumsum(enc.lens + 1, out=offsets[1:])
    values = np.insert(enc.ids, np.cumsum(enc.lens), np.int32(tok.eos_id))
    # the mask as before: position j counts from the input's last token on (j >= len(input ids) - 1), the
    # sample's last position (EOS) not
    mask = label_mask_from_answer_start(enc.ctx_len, offsets)
    return Batch(values, offsets, mask, linenos[0], np.asarray(linenos, dtype=np.int64))


# Of the samples `_AsciiWords` tokenized, a chunk's first and every CHECK_EVERY-th after it are tokenized again
# as the definition says (two tokenizer calls: the input, then " " + the output) and compared: ids and the
# input's length. A difference would be a packcfg bug; the pack stops, naming the line, before anything is
# written, instead of training on ids the tokenizer would not give. Cost: ~1 us a row (1M rows: ~1 s CPU).
CHECK_EVERY = 64


class FastPathMismatch(PackingError):
    """`_AsciiWords` gave other ids than the tokenizer for a sample (`lineno`)."""

    def __init__(self, lineno: int):
        super().__init__(lineno)
        self.lineno = lineno

    WHAT = (
        "packcfg's fast tokenizing gave other ids than the tokenizer for this row (a packcfg bug: please "
        "report it); PACKCFG_FAST_TOKENIZE=0 tokenizes every row with the tokenizer"
    )

    def __str__(self) -> str:
        return f"line {self.lineno}: {self.WHAT}"


def _spot_check(tok: LoadedTokenizer, enc: _Encoded, rows: tuple[list[int], list[str], list[str]]) -> None:
    """Raise FastPathMismatch where a checked sample's ids differ from two tokenizer calls (see CHECK_EVERY)."""
    linenos, contexts, outputs = rows
    picks = range(0, len(contexts), CHECK_EVERY)
    ids, ctx_len = _encode_with_tokenizer(
        tok, [contexts[i] for i in picks], [outputs[i] for i in picks], False
    )
    starts = np.cumsum(enc.lens) - enc.lens
    for k, i in enumerate(picks):
        got = enc.ids[starts[i] : starts[i] + enc.lens[i]]
        if got.tolist() != ids[k] or int(enc.ctx_len[i]) != ctx_len[k]:
            raise FastPathMismatch(linenos[i])


def _text_rows(path: Path, batch_size: int) -> Iterator[tuple[list[int], list[str], list[str]]]:
    """(line numbers, inputs, outputs) of `batch_size` rows at a time, checked."""
    linenos: list[int] = []
    contexts: list[str] = []
    outputs: list[str] = []
    loads = _fast_loads()
    for lineno, line in jsonl_text_lines(path):
        obj = None
        if loads is not None:
            try:
                obj = loads(line)
            except ValueError:
                pass
            # orjson's object where it is a row (then `json` gives the same strings); `json` for anything
            # else, so that every message and value is `json`'s (orjson turns big ints into floats, refuses
            # NaN and lone surrogates)
            if (
                type(obj) is not dict
                or type(obj.get("input")) is not str
                or type(obj.get("output")) is not str
            ):
                obj = None
        if obj is None:
            obj = parse_line(path, lineno, line)
            for key in ("input", "output"):
                if key not in obj:
                    raise PackingError(
                        f"{path}:{lineno}: missing {key!r} (Bridge SFT JSONL needs input and output)"
                    )
                if not isinstance(obj[key], str):
                    raise PackingError(
                        f"{path}:{lineno}: {key!r} must be a string, got {type(obj[key]).__name__}"
                    )
        linenos.append(lineno)
        contexts.append(obj["input"])
        outputs.append(obj["output"])
        if len(contexts) >= batch_size:
            yield linenos, contexts, outputs
            linenos, contexts, outputs = [], [], []
    if contexts:
        yield linenos, contexts, outputs


def _fast_loads() -> Any:
    """orjson's `loads` where orjson is installed (it is not a dependency: ~0.3 us a row against `json`'s
    ~2.7, a tenth of the ASCII path's time), else None."""
    try:
        import orjson
    except ImportError:
        return None
    return orjson.loads


def iter_text_jsonl(
    path: Path, tok: LoadedTokenizer, batch_size: int, joint: bool | None = None
) -> Iterator[Batch]:
    """Bridge SFT rows as samples: Bridge's default prompt template is "{input} {output}" (the answer follows
    a space), then EOS. Chunks are parsed here and tokenized in TOKENIZE_WORKERS threads, in order, or, for
    a source of PROCESS_MIN_BYTES or more under a `_joint_tokenizer` (whose ASCII samples `_AsciiWords`
    tokenizes in Python, holding the GIL), in TOKENIZE_WORKERS worker processes.
    `joint`: one tokenizer call per sample where that is exact (default: `_joint_tokenizer(tok)`)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    if joint is None:
        joint = _joint_tokenizer(tok)
    rows = _text_rows(path, batch_size)
    pool = None
    if joint and (os.cpu_count() or 1) > 1 and _size(path) >= PROCESS_MIN_BYTES and _spawn_safe():
        try:
            pool = _worker_pool(tok, joint)
        except (OSError, ImportError):  # no process support here (no /dev/shm for its locks): threads
            pool = None
    from concurrent.futures.process import BrokenProcessPool

    if pool is None:
        batches = threads.ordered_map(lambda chunk: _text_batch(tok, chunk, joint), rows, TOKENIZE_WORKERS)
    else:
        batches = threads.ordered_map(_worker_batch, rows, TOKENIZE_WORKERS, 2 * TOKENIZE_WORKERS, pool)
    try:
        yield from batches
    except BrokenProcessPool as exc:
        raise PackingError(f"{path}: a tokenizing worker process failed ({exc})") from None
    except FastPathMismatch as exc:
        raise PackingError(f"{path}:{exc.lineno}: {exc.WHAT}") from None


# Sources this large (~200k rows of the sample data) are tokenized in worker processes: their start (~0.3 s
# each, in parallel with reading) is small beside the ~2 s of Python tokenizing they split.
PROCESS_MIN_BYTES = 32 << 20


def _spawn_safe() -> bool:
    """Whether a spawned process starts without running this program's main script again: the main module is
    a package's `__main__` (`python -m packcfg`, `python -m pytest`: multiprocessing skips those), packcfg's
    console script (guarded), or there is none (`python -c`). A script of the user's may call `pack` without
    the `if __name__ == "__main__":` guard that spawning needs; there, threads tokenize."""
    import sys

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name is not None:
        return name == "__main__" or name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return path is None or os.path.basename(path) == "packcfg"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # _text_rows names the error


def _worker_pool(tok: LoadedTokenizer, joint: bool) -> Any:
    """TOKENIZE_WORKERS spawned processes, each with this tokenizer (its JSON, so that a file changed since
    it was read and checksummed is not read again)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(
        max_workers=TOKENIZE_WORKERS,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_init,
        initargs=(tok.tokenizer.to_str(), str(tok.path), tok.eos_id, tok.pad_id, joint),
    )


_WORKER: list[tuple[LoadedTokenizer, bool]] = []


def _worker_init(spec: str, path: str, eos_id: int, pad_id: int, joint: bool) -> None:
    import signal

    from tokenizers import Tokenizer

    # Ctrl-C reaches the whole process group: the parent stops the pool (and says so in one line); a
    # worker would print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.append((LoadedTokenizer(Tokenizer.from_str(spec), Path(path), eos_id, pad_id), joint))


def _worker_batch(rows: tuple[list[int], list[str], list[str]]) -> Batch:
    tok, joint = _WORKER[0]
    return _text_batch(tok, rows, joint)
