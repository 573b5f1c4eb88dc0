"""Bounds on what one raw part and one record may hold, shared by every family's readers.

A hostile or broken producer can send a 7 MB gzip part that expands to gigabytes, a value
nested 100,000 levels deep, a megabyte-long "category", or text with lone surrogates or
NUL characters. None of these is a transient failure: each is bad data, refused with the
file and line named, never retried. The readers enforce the limits while they stream, so
memory stays bounded whatever the part expands to:

- `max_part_bytes`: decompressed bytes of one part; past it the part is refused
  (`PartTooLarge`), the span quarantined;
- `max_value_bytes`: bytes of one value (a string, or an unknown field's JSON); a record
  holding a longer one is rejected (`oversize_value`) and counted against the reject budget;
- `max_depth`: nesting of lists and objects in a record; a deeper one is rejected
  (`too_deep`);
- `max_parts_per_day`: part files in one day's folder; past it the day is refused before
  any part is opened (`retrain.common.rawfiles.TooManyParts`), the span quarantined. A
  real producer writes one part per writer task (tens, a few hundred at most); 50,000
  one-row parts is a broken export (or an attack) that would take hours to validate.

Stdlib only: the Beam jobs and the Airflow side both import it.
"""
from __future__ import annotations

import dataclasses
import re

from retrain.common.errors import BadData

# One part of a day's log rarely passes a few GB even uncompressed; a bigger one is more
# likely a decompression bomb than a day of clicks. Set per dataset in the config.
DEFAULT_MAX_PART_BYTES = 8 << 30
# Ids, categories and tokens are short; 64 KiB leaves room for any real one.
DEFAULT_MAX_VALUE_BYTES = 64 << 10
# Raw logs are flat records (lists of strings at most); 32 levels is generous.
DEFAULT_MAX_DEPTH = 32
# Spark's default shuffle writes 200 parts; a few hundred is what real exports hold.
DEFAULT_MAX_PARTS_PER_DAY = 1000

# A lone UTF-16 surrogate cannot be encoded as UTF-8 and NUL ends strings in C
# libraries: either in a value is invalid text. JSON can carry both only as \u escapes.
_INVALID_TEXT = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def parquet_bytes(metadata) -> int:
    """A Parquet file's uncompressed bytes, from its footer (pyarrow's FileMetaData; nothing
    is decoded), to hold against `max_part_bytes` before reading."""
    return sum(metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups))


class PartTooLarge(BadData):
    """A part expands past `max_part_bytes`: refused whole, not read further."""


@dataclasses.dataclass(frozen=True)
class RecordLimits:
    max_part_bytes: int = DEFAULT_MAX_PART_BYTES
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_parts_per_day: int = DEFAULT_MAX_PARTS_PER_DAY

    def check_part_bytes(self, path, n_bytes: int, line: int | None = None) -> None:
        """PartTooLarge once a part's decompressed bytes pass the limit."""
        if n_bytes > self.max_part_bytes:
            at = f" by line {line}" if line is not None else ""
            raise PartTooLarge(
                f"{path}: more than {self.max_part_bytes} decompressed bytes{at} (limit "
                "max_part_bytes): refusing the part; raise the limit in the config if the "
                "part is genuine")

    def record_problem(self, obj: dict, line_bytes: int, names=None) -> tuple[str, str] | None:
        """(reason, detail) for a decoded record over the value or depth limit, else None.

        Cheap on ordinary records: values are measured only when the whole line is longer
        than one value may be, and depth only for nested values. `names` limits the check to
        those fields (None: all)."""
        items = obj.items() if names is None else ((k, obj[k]) for k in names if k in obj)
        long_line = line_bytes > self.max_value_bytes
        for key, value in items:
            if isinstance(value, (list, dict)):
                if depth_exceeds(value, self.max_depth - 1):
                    return "too_deep", (f"{key}: nested deeper than {self.max_depth} levels "
                                        "(limit max_depth)")
                if long_line:
                    for v in (value if isinstance(value, list) else value.values()):
                        if isinstance(v, str) and _utf8_len(v) > self.max_value_bytes:
                            return "oversize_value", self._oversize(key)
            elif long_line and isinstance(value, str) and _utf8_len(value) > self.max_value_bytes:
                return "oversize_value", self._oversize(key)
        return None

    def _oversize(self, key: str) -> str:
        return f"{key}: a value over {self.max_value_bytes} bytes (limit max_value_bytes)"


def _utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogatepass"))


def depth_exceeds(value, max_depth: int) -> bool:
    """Whether lists/objects nest deeper than `max_depth` below `value` (iterative: a deep
    value must not exhaust the interpreter's stack while it is measured)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v if isinstance(v, list) else v.values() if isinstance(v, dict) else None
        if children is None:
            continue
        if d > max_depth:
            return True
        stack.extend((c, d + 1) for c in children if isinstance(c, (list, dict)))
    return False


def invalid_text(value: str) -> str | None:
    """What makes a decoded string invalid text (lone surrogate, NUL), or None."""
    m = _INVALID_TEXT.search(value)
    if m is None:
        return None
    return "a NUL character" if m.group() == "\x00" else \
        f"a lone surrogate U+{ord(m.group()):04X}"


def mend_surrogates(value: str) -> str:
    """`value` with each lone surrogate replaced by U+FFFD (what a decoder writes for
    bytes it cannot read), so encoding rules see it and UTF-8 writers do not crash."""
    return _SURROGATE.sub("\ufffd", value)
