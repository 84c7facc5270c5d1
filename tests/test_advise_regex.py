"""The rules' name patterns tested in Python's ``re`` (advise/_regex.py) answer what Polars'
``str.contains`` (Rust's ``regex``) answers: on every rule's pattern, over the distinct names
and core types of real traces, planted names and many names mutated from them; the patterns
Python may not answer for, and the names it may not, go to Polars."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import opscope
from helpers import synth
from opscope.advise import _common as c
from opscope.advise import _regex
from opscope.advise.rules import alignment, layout, overhead, precision
from opscope.model import Profile

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TRACES = [
    SHARED / "gpu" / "kineto_resnet50_v100_train_2021.pt.trace.json.gz",
    SHARED / "gpu" / "tracelens_h100_bert_small.json.gz",
    SHARED / "ascend" / "small_two_rank" / "test_rank_0",
]

#: Every pattern a rule tests names (or core types) with.
PATTERNS = [
    overhead.SYNC_RUNTIME,
    overhead.DATALOADER,
    overhead.RECOMPILE,
    overhead.COMPILE_EVENTS,
    overhead.AICPU,
    layout.COPY_KERNELS,
    layout.MATMUL_KERNELS,
    c.ASCEND_KERNELS,
    c.AMD_KERNELS,
    precision._KERNEL_MM,
    alignment._KERNEL_MM,
    alignment._KERNEL_FA,
]

PLANTED = [
    "cudaStreamSynchronize",
    "CUDADEVICESYNCHRONIZE",
    "hipEventSynchronize",
    "aclrtSynchronizeStream",
    "cudaStreamSync",
    "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
    " enumerate(DataLoader)",
    "enumerate DataLoader",
    "AscendCL@aclopCompileAndExecute",
    "AscendCL@aclopCompile",
    "opCompile",
    "xopCompile",
    "opCompileX",
    "ACLOPCOMPILE",
    "TorchDynamo: recompiling",
    "torchdynamo recompile",
    "CompileFunction",
    "AI_CPU",
    "ai_cpu",
    "AI_CORE",
    "TransData",
    "elementwise_copy_kernel",
    "ampere_sgemm_128x64_nn",
    "ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn",
    "MatMulV2",
    "MatMulV",
    "aclnnMatmul",
    "void hipLaunch",
    "Cijk_Ailk_Bljk",
    "void ck_gemm",
    "FlashAttentionScore",
    "conv2d_fprop",
    "",
]


def _real_names() -> list[str]:
    profiles: list[Profile] = [synth.training(steps=2, layers=3).profile]
    profiles += [opscope.load(p, cache=False) for p in TRACES if p.exists()]
    names: set[str] = set()
    for p in profiles:
        names |= set(p.events.get_column("name").drop_nulls().to_list())
        names |= set(p.kernels.get_column("core_type").drop_nulls().to_list())
    return sorted(names)


def _mutations(names: list[str], n: int) -> list[str]:
    """Names near the planted ones: cases flipped, characters dropped, doubled or added, and
    text around them (a near miss of each pattern as well as hits)."""
    rng = random.Random(7)
    out = []
    for _ in range(n):
        s = list(rng.choice(names))
        for _ in range(rng.randint(1, 3)):
            op = rng.randrange(5)
            at = rng.randrange(len(s) + 1)
            if op == 0 and s:
                s = [ch.swapcase() if rng.random() < 0.5 else ch for ch in s]
            elif op == 1 and at < len(s):
                del s[at]
            elif op == 2 and at < len(s):
                s.insert(at, s[at])
            elif op == 3:
                s.insert(at, rng.choice("aZ_( )@:.$^9\t\r"))
            else:
                s = [*rng.choice(names), *s] if rng.random() < 0.5 else [*s, *rng.choice(names)]
        out.append("".join(s))
    return out


def _polars(names: list[str | None], pattern: str) -> np.ndarray:
    got = pl.Series("name", names, dtype=pl.String).str.contains(pattern).fill_null(False)
    return got.to_numpy()


@pytest.fixture(scope="module")
def names() -> list[str | None]:
    real = _real_names()
    return [*real, *PLANTED, *_mutations(PLANTED, 3000), *_mutations(real[:200], 1000), None]


def test_every_rule_pattern_is_answered_in_python() -> None:
    assert all(_regex.portable(p) for p in PATTERNS)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_python_answers_as_polars(
    pattern: str, names: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_regex, "PY_MAX_TESTS", 1 << 30)
    plain = [n for n in names if n is None or _regex.plain([n])]
    assert len(plain) > 4000
    got = _regex.py_hits(plain, [pattern])
    assert got is not None
    want = _polars(plain, pattern)
    assert want.any()  # (the pattern's hits are among the names)
    np.testing.assert_array_equal(got[0], want)


@pytest.mark.parametrize(
    "pattern",
    [
        r"\s",
        r"\bmatmul",
        r"\w+",
        r"[a-z]+",
        r"a{2}",
        r"a*+",
        r"a**",
        r"a++",
        r"(?P<x>a)",
        r"(?=a)",
        r"a(?i)b",
        r"(?s).",
        r"é",
        "\\",
        r"\p{L}",
        r"*a",
        r"|*",
    ],
)
def test_other_constructs_go_to_polars(pattern: str) -> None:
    assert not _regex.portable(pattern)
    assert _regex.py_hits(["abc"], [pattern]) is None


@pytest.mark.parametrize("name", ["ſtream", "\u212aernel", "opCompile\n", "é"])
def test_other_names_go_to_polars(name: str) -> None:
    assert _regex.py_hits(["abc", name], [overhead.COMPILE_EVENTS]) is None


def test_a_name_python_and_rust_read_apart_is_why() -> None:
    # Python's $ matches before a final newline, Rust's only at the end
    assert _polars(["opCompile\n"], overhead.COMPILE_EVENTS).tolist() == [False]
    import re

    assert re.search(overhead.COMPILE_EVENTS, "opCompile\n") is not None


def test_many_tests_go_to_polars() -> None:
    many = [f"n{i}" for i in range(_regex.PY_MAX_TESTS + 1)]
    assert _regex.py_hits(many, ["n1"]) is None
    assert _regex.py_hits(many[: _regex.PY_MAX_TESTS], ["n1"]) is not None


def test_pattern_masks_equal_polars_either_way(
    names: list[str | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    few = pl.Series("name", [*PLANTED[:20], None, "ſ"])
    for uniq in (few, few[:20], few.head(3)):
        got = c._pattern_hits(uniq, PATTERNS)
        for g, p in zip(got, PATTERNS, strict=True):
            np.testing.assert_array_equal(g, _polars(uniq.to_list(), p))


@pytest.mark.parametrize(
    "values",
    [
        ["AI_CORE", "AI_CORE", None, "MIX_AIC"],
        ["COMMUNICATION"] * 15,
        ["AI_CORE", "ai_cpu"],
        [None, None],
        ["AI_CPU"],
        ["aicpu", "AI_CPUX", "é"],
    ],
)
def test_none_match_is_the_filters_answer(values: list[str | None]) -> None:
    s = pl.Series("core_type", values, dtype=pl.String)
    hit = s.fill_null("").str.contains(overhead.AICPU).any()
    assert not (c.none_match(s, overhead.AICPU) and hit)  # never "none" where one matches
    if all(v is None or v.isascii() for v in values):
        assert c.none_match(s, overhead.AICPU) == (not hit)
