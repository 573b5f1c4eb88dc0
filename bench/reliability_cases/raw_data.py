"""Raw-data cases: broken CTR Parquet days and text JSONL days, at validation and past it.
"""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path
from typing import Callable

from retrain.common.errors import BAD_DATA

from .harness import (CTR_SPAN, TEXT_SPAN, edit_column, edit_parquet, edit_rows, parquet_parts,
                      raw_case, read_jsonl, write_jsonl)


def _truncate(frac: float):
    def mutate(span_dir: Path) -> None:
        part = parquet_parts(span_dir)[0]
        data = part.read_bytes()
        part.write_bytes(data[: int(len(data) * frac)])
    return mutate


def _corrupt(span_dir: Path) -> None:
    part = parquet_parts(span_dir)[0]
    data = bytearray(part.read_bytes())
    mid = len(data) // 2
    data[mid: mid + 4096] = os.urandom(min(4096, len(data) - mid))
    part.write_bytes(bytes(data))


def _zero_byte(span_dir: Path) -> None:
    for part in parquet_parts(span_dir):
        part.write_bytes(b"")


def _empty_span(span_dir: Path) -> None:
    for part in parquet_parts(span_dir):
        part.unlink()


def _no_marker(span_dir: Path) -> None:
    (span_dir / "_SUCCESS").unlink()


def _missing_span(span_dir: Path) -> None:
    shutil.rmtree(span_dir)


def _symlink_passwd(name: str):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).symlink_to("/etc/passwd")
    return mutate


def _extra_text_part(name: str, data: bytes):
    def mutate(span_dir: Path) -> None:
        (span_dir / name).write_bytes(data)
    return mutate


def _dup_part(span_dir: Path) -> None:
    part = parquet_parts(span_dir)[0]
    shutil.copy(part, part.with_name("part-99999" + "".join(part.suffixes)))


def _drop_col(col: str):
    return edit_parquet(lambda t: t.drop([col]))


def _add_col(col: str):
    import pyarrow as pa
    return edit_parquet(lambda t: t.append_column(col, pa.array(["x"] * t.num_rows)))


def _head(n: int):
    return edit_parquet(lambda t: t.slice(0, n))


def _every(k: int, value):
    return lambda vals: [value if i % k == 0 else v for i, v in enumerate(vals)]


def _gz_rows(rows: list[dict], name: str = "part-00000.jsonl.gz"):
    def mutate(span_dir: Path) -> None:
        for p in span_dir.glob("part-*"):
            p.unlink()
        write_jsonl(span_dir, rows, name=name, marker=False)
    return mutate


CHINESE = ["这个商品质量很好，物流也很快", "包装破损，客服态度很差", "价格便宜，下次还会再来",
           "尺寸不合适，申请退货退款", "颜色和图片不一样，很失望"]


def _text_part(span_dir: Path) -> Path:
    return sorted(span_dir.glob("part-*"))[0]


def _t_truncate(span_dir: Path) -> None:
    p = _text_part(span_dir)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _t_bad_json(span_dir: Path) -> None:
    p = _text_part(span_dir)
    with gzip.open(p, "at", encoding="utf-8") as f:
        f.write('{"ticket_id": "T9999", "subject": "broken\n')


def _t_zero(span_dir: Path) -> None:
    _text_part(span_dir).write_bytes(b"")


def _t_not_utf8(span_dir: Path) -> None:
    p = _text_part(span_dir)
    with gzip.open(p, "ab") as f:
        f.write(b'{"ticket_id": "T9998", "subject": "\xff\xfe bad", "body": "x", '
                b'"team": "billing"}\n')


def _t_parquet_types(span_dir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = read_jsonl(_text_part(span_dir))
    for p in span_dir.glob("part-*"):
        p.unlink()
    table = pa.table({"ticket_id": [i for i in range(len(rows))],
                      "subject": [1.5] * len(rows), "body": [2] * len(rows),
                      "team": [r["team"] for r in rows]})
    pq.write_table(table, span_dir / "part-00000.parquet")


def _map(fn: Callable[[dict, int], dict]):
    return edit_rows(lambda rows: [fn(dict(r), i) for i, r in enumerate(rows)])


def _drop_key(key: str):
    return _map(lambda r, i: {k: v for k, v in r.items() if k != key})


def raw_cases(add) -> None:
    ANY_TYPED = (BAD_DATA, "transient")   # a missing span may still arrive: retry is fine
    part = "part-00000.parquet"
    # -------------------------------------------------- CTR raw data (validate step)
    ctr_raw = [
        ("missing_span", _missing_span, [f"dt={CTR_SPAN}"], ANY_TYPED),
        ("no_success_marker", _no_marker, ["_SUCCESS"], ANY_TYPED),
        ("span_without_parts", _empty_span, [f"dt={CTR_SPAN}"], (BAD_DATA,)),
        ("zero_byte_part", _zero_byte, [part], (BAD_DATA,)),
        ("truncated_parquet", _truncate(0.5), [part], (BAD_DATA,)),
        ("corrupt_parquet", _corrupt, [part], (BAD_DATA,)),
        ("text_file_as_part", _extra_text_part("part-00001.parquet", b"hello,world\n1,2\n"),
         ["part-00001.parquet"], (BAD_DATA,)),
        ("symlink_to_etc_passwd", _symlink_passwd("part-00009.parquet"),
         ["part-00009.parquet"], (BAD_DATA,)),
        ("missing_column_device", _drop_col("device"), ["schema:columns", "device"], (BAD_DATA,)),
        ("extra_column", _add_col("surprise_col"), ["schema:columns", "surprise_col"], (BAD_DATA,)),
        ("label_as_strings", edit_column("click", lambda v: ["yes" if x else "no" for x in v]),
         ["type:click"], (BAD_DATA,)),
        ("label_out_of_domain", edit_column("click", _every(3, 2)),
         ["allowed_values:click"], (BAD_DATA,)),
        ("nan_price", edit_column("price", _every(2, float("nan"))), ["price"], (BAD_DATA,)),
        ("inf_price", edit_column("price", _every(10, float("inf"))), ["price"], (BAD_DATA,)),
        ("negative_price", edit_column("price", lambda v: [-abs(x or 1) for x in v]),
         ["range:price"], (BAD_DATA,)),
        ("hour_out_of_range", edit_column("hour", _every(4, 25)), ["range:hour"], (BAD_DATA,)),
        ("hour_as_string", edit_column("hour", lambda v: [str(x) for x in v]), ["type:hour"],
         (BAD_DATA,)),
        ("null_user_ids", edit_column("user_id", _every(2, None)), ["null_rate:user_id"],
         (BAD_DATA,)),
        ("all_clicks", edit_column("click", lambda v: [1] * len(v)), ["click_rate"], (BAD_DATA,)),
        ("no_clicks", edit_column("click", lambda v: [0] * len(v)), ["click_rate"], (BAD_DATA,)),
        ("too_few_rows", _head(100), ["row_count"], (BAD_DATA,)),
        ("zero_rows_with_schema", _head(0), ["row_count"], (BAD_DATA,)),
        ("duplicate_parts", _dup_part, ["duplicates:parts"], (BAD_DATA,)),
        ("duplicate_example_ids", edit_column("example_id", lambda v: ["same"] * len(v)),
         ["duplicates:example_id"], (BAD_DATA,)),
        ("unknown_device", edit_column("device", lambda v: ["toaster"] * len(v)),
         ["allowed_values:device"], (BAD_DATA,)),
    ]
    for name, mutate, names, kinds in ctr_raw:
        add(f"ctr.raw.{name}", "ctr", "validate", "raw_data", raw_case(mutate), names,
            kinds=kinds)
    # Past a gate (an override, or a rule the config does not have): the preprocess step
    # itself must still refuse what it cannot read, naming the file.
    add("ctr.raw.preprocess_corrupt_parquet", "ctr", "preprocess", "raw_data",
        raw_case(_corrupt), [part])
    add("ctr.raw.preprocess_missing_column", "ctr", "preprocess", "raw_data",
        raw_case(_drop_col("price")), ["price"])
    add("ctr.raw.preprocess_label_strings", "ctr", "preprocess", "raw_data",
        raw_case(edit_column("click", lambda v: ["yes" if x else "no" for x in v])), ["click"])
    add("ctr.raw.preprocess_symlink_passwd", "ctr", "preprocess", "raw_data",
        raw_case(_symlink_passwd("part-00009.parquet")), ["part-00009.parquet"])

    # -------------------------------------------------- text raw data (validate step)
    tp = "part-00000.jsonl.gz"
    text_raw = [
        ("missing_span", _missing_span, [f"dt={TEXT_SPAN}"], ANY_TYPED),
        ("no_success_marker", _no_marker, ["_SUCCESS"], ANY_TYPED),
        ("zero_byte_part", _t_zero, [tp], (BAD_DATA,)),
        ("truncated_gzip", _t_truncate, [tp], (BAD_DATA,)),
        ("bad_json_line", _t_bad_json, [tp], (BAD_DATA,)),
        ("not_utf8", _t_not_utf8, [tp], (BAD_DATA,)),
        ("symlink_to_etc_passwd", _symlink_passwd("part-00009.jsonl"), ["part-00009.jsonl"],
         (BAD_DATA,)),
        ("missing_example_id", _drop_key("ticket_id"), ["ticket_id"], (BAD_DATA,)),
        ("missing_template_column", _drop_key("body"), ["body"], (BAD_DATA,)),
        ("missing_label_column", _drop_key("team"), ["team"], (BAD_DATA,)),
        # Named by rule, key, file and line; the record's value is never echoed (0d7aca6).
        ("unknown_labels", _map(lambda r, i: {**r, "team": "sales" if i % 2 else r["team"]}),
         ["expect_column_values_to_be_in_set(queue)", "tasks.queue.labels",
          "part-00000.jsonl.gz line 2"], (BAD_DATA,)),
        ("labels_as_numbers", _map(lambda r, i: {**r, "team": i % 2}),
         ["expect_column_values_to_be_in_set(queue)"], (BAD_DATA,)),
        ("all_empty_texts", _map(lambda r, i: {**r, "subject": "", "body": ""}), ["text"],
         (BAD_DATA,)),
        ("chinese_text_english_checkpoint",
         _map(lambda r, i: {**r, "subject": "订单问题", "body": f"{CHINESE[i % 5]}（{i}）"}),
         ["unknown_token_rate"], (BAD_DATA,)),
        ("one_class_only", _map(lambda r, i: {**r, "team": "billing"}), ["_majority_queue"],
         (BAD_DATA,)),
        ("all_duplicates", _map(lambda r, i: {**r, "subject": "same", "body": "same text"}),
         ["duplicate"], (BAD_DATA,)),
        ("too_few_rows", edit_rows(lambda rows: rows[:5]),
         ["expect_table_row_count_to_be_between"], (BAD_DATA,)),
        ("mostly_unlabelled", _map(lambda r, i: {**r, "team": None if i % 4 else r["team"]}),
         ["expect_column_values_to_not_be_null(queue)"], (BAD_DATA,)),
        ("parquet_wrong_types", _t_parquet_types, ["subject"], (BAD_DATA,)),
        ("duplicate_example_ids", _map(lambda r, i: {**r, "ticket_id": "T1"}),
         ["expect_column_values_to_be_unique(example_id)"], (BAD_DATA,)),
    ]
    for name, mutate, names, kinds in text_raw:
        add(f"text.raw.{name}", "text", "validate", "raw_data", raw_case(mutate), names,
            kinds=kinds)
    add("text.raw.extra_columns_accepted", "text", "validate", "raw_data",
        raw_case(_map(lambda r, i: {**r, "extra_field": "x"})), [], expect="accepted")
    add("text.raw.preprocess_bad_json_line", "text", "preprocess", "raw_data",
        raw_case(_t_bad_json), [tp])
    add("text.raw.preprocess_unknown_labels", "text", "preprocess", "raw_data",
        raw_case(_map(lambda r, i: {**r, "team": "sales" if i % 2 else r["team"]})),
        ["part-00000.jsonl.gz row 2", "queue", "not one of the labels"], absent=("sales",),
        absent_in="logs")
