"""The package's outside: importable names, signatures and the command line."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import course_lib

BIN = Path(sys.executable).parent

GRADED_SIGNATURES = {
    "dot_score": "(query, keys)",
    "scaled_dot_score": "(query, keys)",
    "cosine_score": "(query, keys, eps=1e-08)",
    "additive_score": "(query, keys, W_q, W_k, v)",
    "multiplicative_score": "(query, keys, W)",
    "attention_pool": "(scores, values, mask=None)",
    "local_attention_weights": "(scores, center, half_window)",
    "softmax": "(x, dim=-1)",
    "scaled_dot_product_attention": "(q, k, v, mask=None",
    "self_attention": "(x, W_q, W_k, W_v, mask=None)",
    "split_heads": "(x, num_heads)",
    "merge_heads": "(x)",
    "multi_head_attention": "(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None",
    "multi_head_attention_sum_form": "(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None)",
    "sinusoidal_positional_encoding": "(num_positions, d_model)",
    "relative_position_matrix": "(offset, d_model)",
    "layer_norm": "(x, gamma, beta, eps=1e-05)",
    "add_and_norm": "(x, sublayer_output, gamma, beta, eps=1e-05)",
    "padding_mask": "(tokens, pad_id)",
    "causal_mask": "(size",
    "position_wise_feed_forward": "(x, W_1, b_1, W_2, b_2",
    "label_smoothing_loss": "(logits, target, smoothing, ignore_index=-100)",
    "tiled_attention": "(q, k, v, mask=None, block_size=128)",
    "sliding_window_mask": "(L, S=None, *, window, causal=False",
    "cached_attention_step": "(q, k, v, cache=None)",
}


def _plain_signature(fn) -> str:
    """The signature with annotations stripped, e.g. ``(query, keys)``."""
    params = [p.replace(annotation=inspect.Parameter.empty) for p in inspect.signature(fn).parameters.values()]
    return str(inspect.Signature(params))


@pytest.mark.parametrize("name", sorted(GRADED_SIGNATURES))
def test_graded_function_is_importable_with_the_contract_signature(name):
    fn = getattr(course_lib, name)
    assert callable(fn)
    assert _plain_signature(fn).startswith(GRADED_SIGNATURES[name])
    doc = inspect.getdoc(fn)
    assert doc and "Shape:" in doc, f"{name} needs a docstring with a Shape: section"


def test_graded_function_list_matches_the_contract():
    assert set(course_lib.GRADED_FUNCTIONS) == set(GRADED_SIGNATURES)


@pytest.mark.parametrize(
    "name",
    [
        "MultiHeadAttention",
        "LayerNorm",
        "SinusoidalPositionalEncoding",
        "PositionwiseFeedForward",
        "EncoderLayer",
        "DecoderLayer",
        "Transformer",
        "Seq2SeqAttention",
    ],
)
def test_modules_are_importable(name):
    assert inspect.isclass(getattr(course_lib, name))


@pytest.mark.slow  # a subprocess that imports torch
@pytest.mark.parametrize("command", [[str(BIN / "course-lib")], [sys.executable, "-m", "course_lib"]])
def test_command_line_help_lists_subcommands(command):
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage: course-lib" in result.stdout
    assert "api" in result.stdout and "bench" in result.stdout


@pytest.mark.slow  # a subprocess that imports torch
def test_api_subcommand_prints_every_graded_function():
    result = subprocess.run([sys.executable, "-m", "course_lib", "api"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for name in GRADED_SIGNATURES:
        assert f"\n{name}(" in "\n" + result.stdout


@pytest.mark.slow  # a subprocess that imports torch
def test_unknown_subcommand_fails_with_usage():
    result = subprocess.run(
        [sys.executable, "-m", "course_lib", "nonsense"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.slow  # a subprocess that imports torch
def test_bench_subcommand_prints_a_ratio_per_case():
    """Not a timed test: the benchmark must keep running and print its table."""
    result = subprocess.run(
        [sys.executable, "-m", "course_lib", "bench", "--repeats", "1"], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if re.search(r"ms +[\d.]+ms +[\d.]+x", line)]
    assert len(rows) == 3, result.stdout
    assert [row.split()[0] for row in rows] == ["MHA,", "MHA,", "EncoderLayer"]
