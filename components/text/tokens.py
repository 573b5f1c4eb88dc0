"""How much of a text sample the checkpoint's WordPiece vocabulary cannot read.

Why: a BERT checkpoint fine-tuned on text its vocabulary does not cover (another language,
another script) sees mostly [UNK] and learns nothing, yet training "succeeds". Validation
measures the share of [UNK] pieces on a sample and can gate on it.

Why plain Python and not `components.text.checkpoint.build_tokenizer`: that is the keras-hub
tokenizer the model trains with, but it imports TensorFlow and keras (seconds) for what is a
dictionary lookup. This module mirrors what that tokenizer does inside `tf.data`, rule for
rule (tests/unit/test_text_tokens.py checks they agree on varied strings):

- stop at the first NUL (tf_text.regex_split does); put CJK ideographs apart;
- split on ASCII whitespace and control/format characters (dropped) and on punctuation
  (ASCII non-alphanumerics and Unicode P*, kept as words);
- lowercase each word with NFKC_Casefold when `tokenizer_config.json` says `do_lower_case`
  (default true); accents are not stripped (keras-hub's default, which build_tokenizer keeps);
- greedy longest-match-first WordPiece with "##" continuations; a word longer than 100
  UTF-8 bytes, or one with no full split, is a single [UNK].

Counts are over word pieces only ([CLS]/[SEP] are not added) and the text is not truncated.
"""
from __future__ import annotations

import functools
import json
import unicodedata
from pathlib import Path

UNK = "[UNK]"
SUFFIX = "##"
MAX_BYTES_PER_WORD = 100
_SPACES = frozenset(" \t\n\r\f")  # RE2's \s: ASCII only (no \v, no NBSP)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))
# Unicode Default_Ignorable_Code_Point, dropped by tf_text.case_fold_utf8.
_IGNORABLE = ((0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160),
              (0x17B4, 0x17B5), (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E),
              (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF),
              (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
              (0xE0000, 0xE0FFF))


def _in(ranges, ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in ranges)


def _is_delimiter(ch: str) -> bool:
    return ch in _SPACES or unicodedata.category(ch) in ("Cc", "Cf")


def _is_kept_delimiter(ch: str) -> bool:
    """Punctuation or a CJK ideograph: a word of its own."""
    if ch.isascii():
        return not ch.isalnum() and 33 <= ord(ch) <= 126
    return unicodedata.category(ch).startswith("P") or _in(_CJK, ch)


def split_words(text: str) -> list[str]:
    """Whitespace/punctuation/CJK split, as keras-hub's `pretokenize` (before casing)."""
    words, start = [], 0
    for i, ch in enumerate(text):
        if _is_delimiter(ch):
            keep = False
        elif _is_kept_delimiter(ch):
            keep = True
        else:
            continue
        if i > start:
            words.append(text[start:i])
        if keep:
            words.append(ch)
        start = i + 1
    if start < len(text):
        words.append(text[start:])
    return words


def casefold(word: str) -> str:
    """NFKC_Casefold (tf_text.case_fold_utf8): NFKC, full case folding, NFKC, no ignorables."""
    if word.isascii():
        return word.lower()
    word = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", word).casefold())
    return "".join(c for c in word if not _in(_IGNORABLE, c))


def wordpiece(word: str, vocab: frozenset[str]) -> list[str]:
    """Greedy longest-match-first pieces of one word; [UNK] if it cannot be split fully."""
    if not word:
        return []
    if len(word.encode("utf-8")) > MAX_BYTES_PER_WORD:
        return [UNK]
    pieces, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else SUFFIX + word[start:end]
            if piece in vocab:
                pieces.append(piece)
                start = end
                break
        else:
            return [UNK]
    return pieces


class WordPiece:
    """The checkpoint's tokenizer, as strings: `WordPiece(dir).tokenize(text) -> pieces`."""

    def __init__(self, checkpoint_dir: str | Path):
        self.vocab, self.lowercase = _load(str(checkpoint_dir))

    def tokenize(self, text: str) -> list[str]:
        text = text.partition("\x00")[0]  # tf_text.regex_split stops at a NUL
        pieces = []
        for word in split_words(text):
            pieces.extend(wordpiece(casefold(word) if self.lowercase else word, self.vocab))
        return pieces


@functools.lru_cache(maxsize=8)
def _load(checkpoint_dir: str) -> tuple[frozenset[str], bool]:
    """(vocabulary, lowercase) read as build_tokenizer reads them."""
    ckpt = Path(checkpoint_dir)
    vocab_file = ckpt / "vocab.txt"
    if not vocab_file.is_file():
        raise FileNotFoundError(f"{ckpt} has no vocab.txt (WordPiece vocabulary): "
                                f"{vocab_file} not found")
    with open(vocab_file, encoding="utf-8") as f:
        vocab = frozenset(line.rstrip() for line in f)
    lowercase = True
    tok_cfg = ckpt / "tokenizer_config.json"
    if tok_cfg.is_file():
        lowercase = bool(json.loads(tok_cfg.read_text()).get("do_lower_case", True))
    return vocab, lowercase


def sample(texts: list[str], max_texts: int) -> list[str]:
    """At most max_texts texts, evenly spaced over the list (deterministic)."""
    n = len(texts)
    if n <= max_texts:
        return list(texts)
    return [texts[i * n // max_texts] for i in range(max_texts)]


def unknown_token_rate(checkpoint_dir: str | None, texts: list[str],
                       max_texts: int = 2000) -> dict:
    """{"checkpoint": <dir>, "texts": n_texts_used, "pieces": n_pieces, "unknown": n_unk,
    "rate": n_unk / n_pieces (0.0 if no pieces)}"""
    if checkpoint_dir is None:
        from components.text.config import default_checkpoint_dir
        checkpoint_dir = default_checkpoint_dir()
    tokenizer = WordPiece(checkpoint_dir)
    used = sample(texts, max_texts)
    n_pieces = n_unk = 0
    for text in used:
        pieces = tokenizer.tokenize(text)
        n_pieces += len(pieces)
        n_unk += sum(p == UNK for p in pieces)
    return {"checkpoint": str(checkpoint_dir), "texts": len(used), "pieces": n_pieces,
            "unknown": n_unk, "rate": n_unk / n_pieces if n_pieces else 0.0}
