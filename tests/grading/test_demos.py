"""``when_implemented``: a demo block prints one line instead of a traceback, so Run All never stops.

The functions below stand for a student's notebook code: this file is not in a library folder,
so for :mod:`course_lib.grading.demos` it is notebook code, like an IPython cell.
"""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from course_lib.grading import when_implemented

matplotlib.use("Agg")

Q, K = torch.randn(4, 6), torch.randn(4, 6)


def dot_score(q, k):
    """Wrong: a broadcast product instead of q @ k.T, shape (4, 4, 6)."""
    return q[:, None, :] * k[None, :, :]


def sinusoidal_positional_encoding(num_positions, d_model):
    """Wrong: raises (a sine for every column assigned to half of them)."""
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(torch.arange(num_positions)[:, None] * torch.ones(d_model))
    return pe


def _one_line(capsys) -> str:
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out.strip()


def test_a_wrong_shape_fed_to_matplotlib_prints_one_line_and_raises_nothing(capsys):
    with when_implemented():
        plt.imshow(dot_score(Q, K))
    plt.close("all")
    line = _one_line(capsys)
    assert line.startswith("This demo stopped: it could not use what your functions returned")
    assert "TypeError: Invalid shape (4, 4, 6) for image data" in line and line.endswith("see the checks above.")


def test_naming_the_functions_says_what_they_returned_and_which_check_to_read(capsys):
    with when_implemented(dot_score):
        plt.imshow(dot_score(Q, K))
    plt.close("all")
    line = _one_line(capsys)
    assert line.endswith("your dot_score returned shape (4, 4, 6) here; see check(dot_score) above.")
    assert globals()["dot_score"] is dot_score and dot_score.__name__ == "dot_score"  # watched only in the block


def test_an_error_inside_a_notebook_function_names_that_function_and_its_check(capsys):
    with when_implemented():
        sinusoidal_positional_encoding(10, 4)
    line = _one_line(capsys)
    assert line.startswith("This demo stopped: sinusoidal_positional_encoding raised RuntimeError: ")
    assert line.endswith("; see check(sinusoidal_positional_encoding) above.")


def test_an_error_in_the_blocks_own_generator_expression_is_the_blocks_not_a_function(capsys):
    with when_implemented(dot_score):
        max((dot_score(Q, K)[i] @ Q).abs().max().item() for i in range(2))
    line = _one_line(capsys)
    assert "<genexpr>" not in line
    assert line.startswith("This demo stopped: it could not use what your functions returned (RuntimeError: ")
    assert line.endswith("your dot_score returned shape (4, 4, 6) here; see check(dot_score) above.")


def test_an_error_in_a_helper_that_is_not_graded_names_the_helper_and_no_check(capsys):
    def smooth(x):
        return x.reshape(5, 5)

    with when_implemented():
        smooth(torch.ones(6))
    assert _one_line(capsys).startswith("This demo stopped: smooth raised RuntimeError: shape '[5, 5]' is invalid")


def test_a_long_message_is_clipped_to_100_characters_of_one_line(capsys):
    with when_implemented():
        raise ValueError("x" * 500 + "\nsecond line")
    line = _one_line(capsys)
    assert "x" * 99 + "…" in line and "x" * 100 not in line and "second line" not in line


def test_not_implemented_keeps_its_reminder(capsys):
    with when_implemented(dot_score):
        raise NotImplementedError()
    assert _one_line(capsys) == "Not implemented yet: finish the function(s) above, then run this cell again."


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_and_system_exit_still_propagate(error, capsys):
    with pytest.raises(error):
        with when_implemented(dot_score):
            raise error()
    assert capsys.readouterr().out == "" and globals()["dot_score"] is dot_score


def test_a_function_redefined_inside_the_block_is_kept(capsys):
    namespace: dict = {}
    exec("def f():\n    return 1\n", namespace)
    with when_implemented(namespace["f"]):
        exec("def f():\n    return 2\n", namespace)
    assert namespace["f"]() == 2


def test_when_implemented_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="expects the functions the demo uses, got int"):
        when_implemented(1)


@pytest.mark.parametrize("filename", ["/tmp/ipykernel_123/456.py", "<ipython-input-3-0123abcd>"])
def test_a_function_in_a_notebook_cell_file_is_named(filename, capsys):
    namespace: dict = {"torch": torch}
    exec(compile("def causal_mask(n):\n    return torch.ones(n).reshape(n, n + 1)\n", filename, "exec"), namespace)
    with when_implemented():
        namespace["causal_mask"](3)
    assert _one_line(capsys).startswith("This demo stopped: causal_mask raised RuntimeError")


CELLS = [
    "import torch\nimport matplotlib.pyplot as plt\nfrom course_lib.grading import when_implemented\n",
    "def dot_score(q, k):\n    return q[:, None, :] * k[None, :, :]\n",
    "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim=2, keepdim=True)\n",
    "with when_implemented(dot_score):\n    plt.imshow(dot_score(torch.ones(4, 6), torch.ones(4, 6)))\n",
    "with when_implemented():\n    print(softmax(torch.ones(3)))\n",
    "with when_implemented():\n    raise NotImplementedError\n",
    "after = 'Run All got here'\n",
]


def test_in_ipython_every_cell_runs_and_each_demo_prints_one_specific_line(capsys):
    shell = InteractiveShell.instance()
    try:
        results = [shell.run_cell(cell) for cell in CELLS]
        assert all(r.success for r in results), [r.error_in_exec for r in results]
        assert shell.user_ns["after"] == "Run All got here"
        assert shell.user_ns["softmax"].__code__.co_filename.startswith("<ipython-input-")
        lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
        assert lines == [
            "This demo stopped: it could not use what your functions returned (TypeError: Invalid shape "
            "(4, 4, 6) for image data); your dot_score returned shape (4, 4, 6) here; see check(dot_score) above.",
            "This demo stopped: softmax raised IndexError: Dimension out of range (expected to be in range of "
            "[-1, 0], but got 2); see check(softmax) above.",
            "Not implemented yet: finish the function(s) above, then run this cell again.",
        ]
    finally:
        plt.close("all")
        InteractiveShell.clear_instance()
