"""Hostile records: deep nesting, huge values, bad text, gzip bombs.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Callable

from .custody import full_disk_case
from .harness import REPO, CaseEnv, Outcome, raw_case, read_jsonl
from .inputs import _ctr_cfg, _set, cfg_file
from .raw_data import _extra_text_part, _text_part


def _jsonl_part(rows: list[bytes], name: str = "part-00001.jsonl.gz"):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).write_bytes(gzip.compress(b"".join(rows)))
    return mutate


def _ctr_row(i: int, **changes) -> dict:
    row = {"example_id": f"hostile-{i}", "ts": 1_700_000_000, "user_id": f"u{i}",
           "item_id": "i1", "category_id": "c1", "device": "ios", "hour": 3, "position": 1,
           "price": 1.0, "user_past_clicks": 0.0, "item_age_days": 1.0, "click": 0}
    return {**row, **changes}


def _lines(n: int, make: Callable[[int], str]) -> list[bytes]:
    return [(make(i) + "\n").encode() for i in range(n)]


def bomb_case(expands_to: int, config_limit: int | None = None
              ) -> Callable[[CaseEnv], Outcome]:
    """A gzip part of 512 KB records (legal lines, each value over the value limit)
    expanding to `expands_to` bytes, validated in a fresh process whose peak RSS is
    measured (bench/hostile_bomb.py's child)."""
    def setup(env: CaseEnv) -> Outcome:
        sys.path.insert(0, str(REPO / "bench"))
        import hostile_bomb
        span = env.copy_raw()
        record = (json.dumps(_ctr_row(0, device="d" * (512 << 10))) + "\n").encode()
        hostile_bomb.write_gzip(span / "part-00001.jsonl.gz",
                                hostile_bomb.repeated(record, expands_to))
        config = ""
        if config_limit:
            config = str(cfg_file(_ctr_cfg(_set("validation.thresholds",
                                                {"max_part_bytes": config_limit})),
                                  "limits.yaml")(env))
        out = env.home / "validation"
        r = hostile_bomb.measure(span, out, config)
        figures = {"expanded_bytes": expands_to, "gzip_bytes":
                   (span / "part-00001.jsonl.gz").stat().st_size,
                   "peak_rss_mb": r.get("peak_rss_mb"), "seconds": r.get("seconds")}
        if r["outcome"] in ("passed", "overridden"):
            return Outcome(False, "accepted", json.dumps(r), str(out), "validate", figures)
        return Outcome(True, r.get("error_kind") or r["outcome"],
                       f"{r['outcome']}: {r.get('message', r.get('error', ''))}", str(out),
                       "validate", figures)
    return setup


def _t_surrogates(span_dir: Path) -> None:
    """One ticket in ten gets a lone surrogate, as a JSON escape (valid JSON, invalid text)."""
    part = _text_part(span_dir)
    rows = read_jsonl(part)
    with gzip.open(part, "wt", encoding="ascii") as f:
        f.writelines(json.dumps({**r, "body": r["body"] + ("\ud800" if i % 10 == 0 else "")})
                     + "\n" for i, r in enumerate(rows))


def hostile_cases(add) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    n = 100    # 100 records against the span's 4,000 rows: past the 0.1 % reject budget
    ctr = [
        ("deep_nesting", _lines(n, lambda i: json.dumps(_ctr_row(i))[:-1] + f', "junk": {deep}}}'),
         ["too_deep", "part-00001.jsonl.gz"]),
        ("deep_nesting_in_a_known_field", _lines(n, lambda i: json.dumps(
            _ctr_row(i, device=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]))),
         ["wrong_type", "part-00001.jsonl.gz"]),
        ("huge_values", _lines(n, lambda i: json.dumps(_ctr_row(i, item_id="v" * 200_000))),
         ["oversize_value", "part-00001.jsonl.gz"]),
        ("lone_surrogates", _lines(n, lambda i: json.dumps(_ctr_row(i, user_id="u\ud800"))),
         ["invalid_text", "part-00001.jsonl.gz"]),
        ("nul_in_strings", _lines(n, lambda i: json.dumps(_ctr_row(i, device="io\u0000s"))),
         ["invalid_text"]),
        ("invalid_utf8_bytes", [json.dumps(_ctr_row(i)).encode().replace(b"ios", b"i\xc3\x28s")
                                + b"\n" for i in range(n)], ["non_utf8"]),
    ]
    for name, rows, names in ctr:
        add(f"ctr.hostile.{name}", "ctr", "validate", "hostile", raw_case(_jsonl_part(rows)),
            names)
    add("ctr.hostile.preprocess_deep_nesting", "ctr", "preprocess", "hostile",
        raw_case(_jsonl_part(ctr[0][1])), [], expect="accepted")   # counted rejects
    add("ctr.hostile.gzip_bomb_1gb", "ctr", "validate", "hostile", bomb_case(1 << 30),
        ["oversize_value", "part-00001.jsonl.gz"])
    add("ctr.hostile.gzip_bomb_over_part_limit", "ctr", "validate", "hostile",
        bomb_case(1 << 30, config_limit=64 << 20), ["PartTooLarge", "part-00001.jsonl.gz",
                                                    "max_part_bytes"])

    def text_line(body_json: str) -> bytes:
        return ('{"ticket_id": "T-hostile", "subject": "x", "team": "billing", "body": '
                + body_json + "}\n").encode()
    text = [
        ("deep_nesting", _extra_text_part("part-00001.jsonl", text_line(deep)),
         ["part-00001.jsonl line 1", "max_depth"]),
        ("huge_value", _extra_text_part("part-00001.jsonl", text_line(json.dumps("y" * (3 << 20)))),
         ["part-00001.jsonl line 1", "max_value_bytes"]),
        ("gzip_bomb", lambda span: (span / "part-00001.jsonl.gz").write_bytes(   # 300 MB
            gzip.compress((b" " * 1023 + b"\n") * (300 << 10), 9)),
         ["part-00001.jsonl.gz", "max_part_bytes"]),
        ("lone_surrogates", _t_surrogates, ["expect_column_values_to_not_match_regex"]),
    ]
    for name, mutate, names in text:
        add(f"text.hostile.{name}", "text", "validate", "hostile", raw_case(mutate), names)
    for fam, stage in (("ctr", "validate"), ("ctr", "preprocess"), ("ctr", "train"),
                       ("text", "validate"), ("text", "preprocess")):
        add(f"{fam}.full_disk.{stage}", fam, stage, "full_disk", full_disk_case(stage),
            ["no space left"], kinds=("transient",))
