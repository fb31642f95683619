"""Specification of the checks of chapter 4 (positional encoding): what they accept, what they
diagnose, and how they report broken implementations.

The functions below are written the way students write them (float32, loops, numpy), named
like the graded function they imitate; each is checked with ``check(fn, name=...)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import assert_diagnosed

import course_lib
from course_lib import relative_position_matrix as reference_matrix
from course_lib.grading import check, exercise, judge, run_calls

PE = "sinusoidal_positional_encoding"
RPM = "relative_position_matrix"


# ---------------------------------------------------------------------------------------
# sinusoidal_positional_encoding: correct implementations
# ---------------------------------------------------------------------------------------


def pe_div_term(num_positions, d_model):
    """The Annotated Transformer's way, all in float32."""
    pe = torch.zeros(num_positions, d_model)
    position = torch.arange(num_positions).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_loops(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    for p in range(num_positions):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def pe_numpy(num_positions, d_model):
    p = np.arange(num_positions)[:, None]
    omega = 1.0 / np.power(10000.0, np.arange(0, d_model, 2) / d_model)
    angles = p * omega
    pe = np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(num_positions, d_model)
    return torch.from_numpy(pe).float()


def pe_float64(num_positions, d_model):
    """Returns float64: a floating dtype other than float32 is accepted."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] / 10000 ** (2 * i / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(num_positions, d_model)


# ---------------------------------------------------------------------------------------
# sinusoidal_positional_encoding: classic mistakes
# ---------------------------------------------------------------------------------------


def pe_swapped(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    position = torch.arange(num_positions).unsqueeze(1).float()
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2] = torch.cos(position * omega)
    pe[:, 1::2] = torch.sin(position * omega)
    return pe


def pe_concatenated(num_positions, d_model):
    position = torch.arange(num_positions).unsqueeze(1).float()
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.sin(position * omega), torch.cos(position * omega)], dim=1)


def pe_concatenated_cos_first(num_positions, d_model):
    position = torch.arange(num_positions).unsqueeze(1).float()
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    return torch.cat([torch.cos(position * omega), torch.sin(position * omega)], dim=1)


def pe_pair_index_without_two(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    position = torch.arange(num_positions).unsqueeze(1).float()
    i = torch.arange(d_model // 2).float()
    omega = 1.0 / 10000 ** (i / d_model)  # forgot the 2
    pe[:, 0::2] = torch.sin(position * omega)
    pe[:, 1::2] = torch.cos(position * omega)
    return pe


def pe_column_index_times_two(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    for p in range(num_positions):
        for j in range(d_model):
            angle = p / 10000 ** (2 * j / d_model)  # j is the column, not the pair
            pe[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def pe_column_index(num_positions, d_model):
    position = torch.arange(num_positions).unsqueeze(1).float()
    j = torch.arange(d_model).float()
    angles = position / 10000 ** (j / d_model)  # (P, d): one frequency per column
    pe = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, 1::2])
    return pe


def pe_loop_with_two_times_the_even_column_index(num_positions, d_model):
    # a blog's loop: i already steps by 2, and the exponent doubles it again
    pe = torch.zeros(num_positions, d_model)
    for pos in range(num_positions):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * i) / d_model)))
    return pe


def pe_like_tensor2tensor(num_positions, d_model):
    # get_timing_signal_1d: [sin | cos], timescales spaced by log(10000) / (d/2 - 1)
    num_timescales = d_model // 2
    position = torch.arange(num_positions).float()
    log_timescale_increment = math.log(10000.0) / max(num_timescales - 1, 1)
    inv_timescales = torch.exp(torch.arange(num_timescales).float() * -log_timescale_increment)
    scaled_time = position.unsqueeze(1) * inv_timescales.unsqueeze(0)
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


def pe_annotated_transformer_buffer(num_positions, d_model):
    # the Annotated Transformer's PositionalEncoding keeps pe.unsqueeze(0), shape (1, max_len, d_model)
    pe = torch.zeros(num_positions, d_model)
    position = torch.arange(0, num_positions).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


def pe_pytorch_tutorial_buffer(num_positions, d_model):
    # the nn.Transformer tutorial's PositionalEncoding: sequence first, (max_len, 1, d_model)
    position = torch.arange(num_positions).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(num_positions, 1, d_model)
    pe[:, 0, 0::2] = torch.sin(position * div_term)
    pe[:, 0, 1::2] = torch.cos(position * div_term)
    return pe


def pe_positive_exponent(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)
    scale = 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe[:, 0::2] = torch.sin(position * scale)
    pe[:, 1::2] = torch.cos(position * scale)
    return pe.float()


def pe_from_one(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    position = torch.arange(1, num_positions + 1).unsqueeze(1).float()
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    pe[:, 0::2] = torch.sin(position * omega)
    pe[:, 1::2] = torch.cos(position * omega)
    return pe


def pe_transposed(num_positions, d_model):
    return pe_div_term(num_positions, d_model).T


# ---------------------------------------------------------------------------------------
# relative_position_matrix: correct implementations
# ---------------------------------------------------------------------------------------


def rpm_loops(offset, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = offset / 10000 ** (2 * i / d_model)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i, 2 * i] = c
        M[2 * i, 2 * i + 1] = -s
        M[2 * i + 1, 2 * i] = s
        M[2 * i + 1, 2 * i + 1] = c
    return M


def rpm_block_diag(offset, d_model):
    omega = 1.0 / 10000 ** (torch.arange(0, d_model, 2).float() / d_model)
    blocks = []
    for a in (offset * omega).tolist():
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]))
    return torch.block_diag(*blocks)


def rpm_numpy(offset, d_model):
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    c, s = np.cos(offset * omega), np.sin(offset * omega)
    M = np.zeros((d_model, d_model))
    even = np.arange(0, d_model, 2)
    M[even, even], M[even, even + 1] = c, -s
    M[even + 1, even], M[even + 1, even + 1] = s, c
    return torch.tensor(M, dtype=torch.float32)


# ---------------------------------------------------------------------------------------
# relative_position_matrix: classic mistakes
# ---------------------------------------------------------------------------------------


def _blocks(angles, sign=1.0):
    return torch.block_diag(
        *[torch.tensor([[math.cos(a), -sign * math.sin(a)], [sign * math.sin(a), math.cos(a)]]) for a in angles]
    )


def rpm_transposed(offset, d_model):
    """The textbook rotation for column vectors: [[cos, -sin], [sin, cos]] acting as M @ v."""
    omega = [1.0 / 10000 ** (2 * i / d_model) for i in range(d_model // 2)]
    return _blocks([offset * w for w in omega], sign=-1.0)


def rpm_abs_offset(offset, d_model):
    omega = [1.0 / 10000 ** (2 * i / d_model) for i in range(d_model // 2)]
    return _blocks([abs(offset) * w for w in omega])


def rpm_pair_index_without_two(offset, d_model):
    omega = [1.0 / 10000 ** (i / d_model) for i in range(d_model // 2)]
    return _blocks([offset * w for w in omega])


def rpm_column_index(offset, d_model):
    omega = [1.0 / 10000 ** (2 * j / d_model) for j in range(0, d_model, 2)]
    return _blocks([offset * w for w in omega])


def rpm_no_frequency(offset, d_model):
    return _blocks([float(offset)] * (d_model // 2))


def rpm_concatenated(offset, d_model):
    half = d_model // 2
    M = torch.zeros(d_model, d_model)
    for i in range(half):
        a = offset / 10000 ** (2 * i / d_model)
        M[i, i], M[i, i + half] = math.cos(a), -math.sin(a)
        M[i + half, i], M[i + half, i + half] = math.sin(a), math.cos(a)
    return M


# ---------------------------------------------------------------------------------------
# broken implementations of either function
# ---------------------------------------------------------------------------------------


def pe_uses_reference(num_positions, d_model):
    return course_lib.sinusoidal_positional_encoding(num_positions, d_model)


def rpm_uses_reference(offset, d_model):
    return reference_matrix(offset, d_model)


def pe_crashes(num_positions, d_model):
    return torch.zeros(num_positions, d_model) @ torch.zeros(3, 3)


def pe_nan(num_positions, d_model):
    pe = pe_div_term(num_positions, d_model)
    return pe / pe  # 0 / 0 where sin = 0


def pe_list(num_positions, d_model):
    return pe_div_term(num_positions, d_model).tolist()


def pe_numpy_array(num_positions, d_model):
    return pe_div_term(num_positions, d_model).numpy()


def pe_flat(num_positions, d_model):
    return pe_div_term(num_positions, d_model).flatten()


def rpm_wrong_shape(offset, d_model):
    return rpm_loops(offset, d_model)[:, : d_model // 2]


def rpm_integer(offset, d_model):
    return torch.eye(d_model, dtype=torch.long)


# ---------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------


def test_points_per_function():
    assert check(course_lib.sinusoidal_positional_encoding).max_score == 9
    assert check(course_lib.relative_position_matrix).max_score == 9


@pytest.mark.parametrize("fn", [pe_div_term, pe_loops, pe_numpy, pe_float64])
def test_other_correct_encodings_score_full_marks(fn):
    report = check(fn, name=PE)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score


@pytest.mark.parametrize("fn", [rpm_loops, rpm_block_diag, rpm_numpy])
def test_other_correct_relative_matrices_score_full_marks(fn):
    report = check(fn, name=RPM)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score


@pytest.mark.parametrize("seed", [3, 11, 2024])
@pytest.mark.parametrize(
    "name, fn",
    [(PE, f) for f in (pe_div_term, pe_loops, pe_numpy, pe_float64)]
    + [(RPM, f) for f in (rpm_loops, rpm_block_diag, rpm_numpy)],
)
def test_other_correct_implementations_score_full_marks_on_fresh_sizes_too(name, fn, seed):
    # under --seed every size and offset is drawn anew (tests/grading/test_seeding.py)
    ex = exercise(name)
    report = judge(ex, run_calls(fn, ex, seed=seed), seed=seed)
    assert report.score == report.max_score, str(report)
    assert not report.diagnoses


PE_MISTAKES = [
    (pe_swapped, "sin and cos swapped"),
    (pe_concatenated, "not interleaved: all sines in the first half"),
    (pe_concatenated_cos_first, "not interleaved (and swapped)"),
    (pe_pair_index_without_two, "10000^(-i/d_model) with the pair index"),
    (pe_column_index_times_two, "with j the column index instead of the pair index"),
    (pe_column_index, "one frequency per column"),
    (pe_positive_exponent, "positive exponent"),
    (pe_from_one, "positions start at 1"),
    (pe_transposed, "the table is transposed"),
    (pe_loop_with_two_times_the_even_column_index, "10000^(-4i/d_model)"),
    (pe_like_tensor2tensor, "the tensor2tensor / fairseq layout"),
    (pe_annotated_transformer_buffer, "shape (1, num_positions, d_model)"),
    (pe_pytorch_tutorial_buffer, "shape (num_positions, 1, d_model)"),
]


@pytest.mark.parametrize("fn, phrase", PE_MISTAKES, ids=[f.__name__ for f, _ in PE_MISTAKES])
def test_classic_encoding_mistakes_lose_points_and_are_diagnosed(fn, phrase):
    assert_diagnosed(check(fn, name=PE), phrase)


def test_a_loop_doubling_an_index_that_already_steps_by_two_is_named_as_a_power_four_exponent():
    report = check(pe_loop_with_two_times_the_even_column_index, name=PE)
    assert_diagnosed(report, "2 * j counts the 2 twice")
    assert report.diagnoses == [d for d in report.diagnoses if "10000^(-4i/d_model)" in d]


def test_tensor2tensor_timing_signal_is_named_as_concatenated_not_interleaved():
    report = check(pe_like_tensor2tensor, name=PE)
    assert_diagnosed(report, "[sin | cos]")
    assert next(r for r in report.results if r.name == "bounded pairs").passed is False


def test_annotated_transformer_pe_buffer_is_named_as_a_1_P_d_table():
    report = check(pe_annotated_transformer_buffer, name=PE)
    assert_diagnosed(report, "(1, num_positions, d_model)")
    assert any("shape (1, 3, 4), expected (3, 4)" in r.feedback for r in report.results)


def test_swapping_sin_and_cos_is_the_only_diagnosis_of_a_swap():
    assert len(check(pe_swapped, name=PE).diagnoses) == 1


def test_the_pair_property_names_broken_pairs():
    report = check(pe_concatenated, name=PE)
    result = next(r for r in report.results if r.name == "bounded pairs")
    assert not result.passed
    assert "not a (sin, cos) pair" in result.feedback


RPM_MISTAKES = [
    (rpm_transposed, "rotation blocks transposed"),
    (rpm_abs_offset, "sign of the offset is ignored"),
    (rpm_pair_index_without_two, "omega_i = 10000^(-i/d_model)"),
    (rpm_column_index, "with j = 2i the column index"),
    (rpm_no_frequency, "without the block's frequency"),
    (rpm_concatenated, "column i with column i + d_model/2"),
]


@pytest.mark.parametrize("fn, phrase", RPM_MISTAKES, ids=[f.__name__ for f, _ in RPM_MISTAKES])
def test_classic_relative_matrix_mistakes_lose_points_and_are_diagnosed(fn, phrase):
    report = check(fn, name=RPM)
    assert report.status == "failed"
    assert report.score < report.max_score
    assert report.diagnoses == [next(m for m in report.diagnoses if phrase in m)], report.diagnoses


def test_ignoring_the_offset_sign_passes_positive_offsets_only():
    report = check(rpm_abs_offset, name=RPM)
    failed = {r.name for r in report.results if not r.passed}
    assert failed == {"negative offsets", "moves the table"}


def test_the_property_judge_says_when_the_matrix_is_for_column_vectors():
    report = check(rpm_transposed, name=RPM)
    result = next(r for r in report.results if r.name == "moves the table")
    assert "PE[p] @ M does not give PE[p + offset]" in result.feedback
    assert "column vectors" in result.feedback


@pytest.mark.parametrize("name, fn", [(PE, pe_uses_reference), (RPM, rpm_uses_reference)])
def test_calling_the_reference_is_forbidden(name, fn):
    report = check(fn, name=name)
    assert report.status == "forbidden"
    assert report.score == 0
    assert "reference implementation" in report.notes[0]


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (pe_crashes, "raised RuntimeError"),
        (pe_nan, "NaN"),
        (pe_list, "expected a single tensor"),
        (pe_numpy_array, "expected a torch.Tensor"),
        (pe_flat, "has shape"),
    ],
)
def test_broken_encodings_fail_with_feedback(fn, fragment):
    report = check(fn, name=PE)
    assert report.status == "failed"
    assert report.score == 0
    assert any(fragment in r.feedback for r in report.results), str(report)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (rpm_wrong_shape, "has shape"),
        (rpm_integer, "floating-point"),
    ],
)
def test_broken_relative_matrices_fail_with_feedback(fn, fragment):
    report = check(fn, name=RPM)
    assert report.status == "failed"
    assert report.score < report.max_score
    assert any(fragment in r.feedback for r in report.results), str(report)


def test_case_descriptions_do_not_depend_on_the_student():
    names = [r.name for r in check(pe_swapped, name=PE).results]
    assert names == [r.name for r in check(course_lib.sinusoidal_positional_encoding).results]
