"""Which dtype policy a fine-tune computes in (components.text.model.compute_policy): named
values as given, `auto` from the CPU's flags (bfloat16 only with AMX), a clear refusal."""
from __future__ import annotations

import pytest

from components.text import model as M

FLAGS = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f {extra}\n"


def _cpuinfo(tmp_path, extra: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(FLAGS.format(extra=extra))
    return str(path)


def test_named_precisions_are_taken_as_given(tmp_path):
    no_amx = _cpuinfo(tmp_path, "")
    assert M.compute_policy("float32", no_amx) == "float32"
    assert M.compute_policy("mixed_bfloat16", no_amx) == "mixed_bfloat16"


def test_auto_computes_in_bfloat16_only_on_a_cpu_with_amx(tmp_path):
    assert M.compute_policy("auto", _cpuinfo(tmp_path, "avx512_bf16 amx_bf16 amx_tile")) \
        == "mixed_bfloat16"
    assert M.compute_policy("auto", _cpuinfo(tmp_path, "avx512_bf16")) == "float32"
    assert M.compute_policy("auto", str(tmp_path / "absent")) == "float32"


def test_an_unknown_precision_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="auto, float32, mixed_bfloat16.*'fp8'"):
        M.compute_policy("fp8")
