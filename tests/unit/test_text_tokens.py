"""Unknown-token rate of text samples under the default checkpoint's WordPiece vocabulary.

No TensorFlow except in the agreement test, which checks the plain-Python tokenizer against
the keras-hub tokenizer the model trains with (run inside tf.data, as training does).
"""
from __future__ import annotations

import random

import pytest

from components.text.config import default_checkpoint_dir
from components.text.tokens import WordPiece, sample, unknown_token_rate

ENGLISH = [
    "Great phone, the battery lasts two days and the screen is bright.",
    "Terrible quality. It broke after a week and support never answered!",
    "Shipping was fast; the box arrived on Tuesday, well packed.",
    "I'd buy it again - fits perfectly and looks even better than the photos.",
    "Not worth $49.99. The zipper jammed on day one :(",
    "Five stars!!! My kids love this toy and play with it every day.",
    "The sound is muffled and the bass is weak, so I returned it.",
    "Comfortable shoes, true to size, but the color faded after washing.",
    "Works as described. Setup took five minutes with the app.",
    "Cheap plastic, smells bad, and the instructions were missing.",
]

CHINESE = [
    "这个手机质量很好，电池很耐用。",
    "快递很快，第二天就到了。",
    "包装破损，东西也坏了，很失望。",
    "衣服尺码偏小，建议买大一号。",
    "性价比很高，值得购买！",
    "颜色和图片不一样，差评。",
    "客服态度很好，耐心解答问题。",
    "用了一个星期就坏了，质量太差。",
    "味道不错，孩子很喜欢吃。",
    "鞋子穿着很舒服，走路不累脚。",
    "屏幕很清晰，运行速度也快。",
    "物流太慢了，等了十天才收到。",
    "做工精细，面料柔软，好评。",
    "声音有杂音，退货了。",
    "商品和描述一致，非常满意。",
    "价格便宜，但是用起来一般。",
    "第二次购买了，一直很信任这家店。",
    "充电很慢，发热也严重。",
    "外观漂亮，送给朋友很有面子。",
    "安装简单，说明书写得很清楚。",
]


def test_english_reviews_are_almost_all_known():
    out = unknown_token_rate(None, ENGLISH)
    assert out["checkpoint"] == default_checkpoint_dir()
    assert out["texts"] == len(ENGLISH) and out["pieces"] > 100
    assert out["rate"] < 0.05, out


def test_chinese_reviews_are_largely_unknown():
    out = unknown_token_rate(None, CHINESE)
    assert out["texts"] == len(CHINESE)
    assert out["rate"] > 0.25, out
    assert out["rate"] == out["unknown"] / out["pieces"]


def test_empty_sample_has_rate_zero():
    assert unknown_token_rate(None, []) == {"checkpoint": default_checkpoint_dir(),
                                            "texts": 0, "pieces": 0, "unknown": 0,
                                            "rate": 0.0}


def test_missing_vocab_names_the_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="vocab.txt") as e:
        unknown_token_rate(str(tmp_path), ["hello"])
    assert str(tmp_path) in str(e.value)


def test_large_samples_are_capped_and_deterministic():
    texts = [f"review number {i}" for i in range(10)] + CHINESE * 10
    picked = sample(texts, 7)
    assert len(picked) == 7 and picked == sample(texts, 7)
    assert picked[0] == texts[0] and CHINESE[0] in picked  # spread over the list
    assert unknown_token_rate(None, texts, max_texts=7)["texts"] == 7


def test_unknown_pieces_and_continuations():
    wp = WordPiece(default_checkpoint_dir())
    assert wp.tokenize("Great phone, GOOD!") == ["great", "phone", ",", "good", "!"]
    assert wp.tokenize("tokenizers") == ["token", "##izer", "##s"]
    assert wp.tokenize("x" * 101) == ["[UNK]"]  # over 100 bytes: one unknown word


def _varied_strings(n: int = 400) -> list[str]:
    rng = random.Random(0)
    chars = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
             + list(" \t\n.,!?'\"-()[]{}:;@#$%^&*_+=~`|/\\<>")
             + list("éèêëàâäôöûüçñßøåæÉÀÇÑİΣς") + list("中文很好不错质量差快递包装日本語한국어")
             + ["😀", "👍", "❤️", "👩\u200d👩\u200d👧", "\u00a0", "\u3000", "\u200b", "\u00ad",
                "\x00", "\x7f", "\v", "\u2028", "ﬁ", "Ｆｕｌｌ", "①", "™", "°", "€", "—", "…",
                "«", "“", "’", "\u0301", "ǅ", "㎏", "½", "²", "Привет", "مرحبا", "नमस्ते", "ไทย"])
    words = ["the", "good", "phone", "quality", "shipping", "很好", "不错", "café", "naïve",
             "😀", "!!!", "U.S.A.", "e-mail", "don't", "$19.99", "#1", "Ünïcödé", "ﬁne", "™"]
    out = ["", "   ", "a" * 150, "é" * 60, "[CLS] hi [SEP] [UNK] [MASK]", "e\u0301te\u0301",
           "x\u00a0y", "ab\x00cd", "Straße STRASSE"] + ENGLISH + CHINESE
    while len(out) < n:
        if rng.random() < 0.7:
            out.append("".join(rng.choice(chars) for _ in range(rng.randint(1, 40))))
        else:
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))))
    return out


@pytest.mark.timeout(60)
def test_agrees_with_the_keras_hub_tokenizer_in_tf_data():
    tf = pytest.importorskip("tensorflow")
    from components.text.checkpoint import build_tokenizer

    ckpt = default_checkpoint_dir()
    texts = _varied_strings()
    tokenizer = build_tokenizer(ckpt)
    vocab = tokenizer.get_vocabulary()
    ds = tf.data.Dataset.from_tensor_slices(texts).batch(64).map(tokenizer)
    theirs = [[vocab[i] for i in row] for batch in ds for row in batch.to_list()]
    mine = WordPiece(ckpt)
    diff = [(t, a, mine.tokenize(t)) for t, a in zip(texts, theirs) if mine.tokenize(t) != a]
    assert not diff, f"{len(diff)} of {len(texts)} differ, e.g. {diff[:3]}"
