"""The rules a notebook states are the rules the autograder enforces (issue 29, item 3).

Notebook 05 forbids PyTorch's own normalisations inside ``layer_norm`` and ``add_and_norm``:
each of them (instance, batch, group norm, functional or module) standardises rows once they are
reshaped into its axes. The sandboxed grader refuses them, said once per function, and an
honest layer norm written from means and variances (float64, einsum, rsqrt) keeps full marks.
Notebook 07 says "use only torch and math": numpy is refused there, an honest torch tiled
attention keeps full marks.
"""

from __future__ import annotations

import inspect

import honest_code
import pytest
from conftest import notebook

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading import check

SETUP = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\nfrom course_lib.grading import check\n"
HONEST_LN = inspect.getsource(honest_code.layer_norm)
HONEST_AN = inspect.getsource(honest_code.add_and_norm)
INSTANCE_NORM = """
def layer_norm(x, gamma, beta, eps=1e-5):
    rows = x.reshape(1, -1, x.shape[-1])  # every row a channel of one instance
    return F.instance_norm(rows, eps=eps).reshape(x.shape) * gamma + beta
"""
BATCH_NORM = """
def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    s = x + sublayer_output
    columns = s.reshape(-1, s.shape[-1]).T  # every row a channel: batch statistics over E
    return F.batch_norm(columns, None, None, training=True, eps=eps).T.reshape(s.shape) * gamma + beta
"""
GROUP_NORM_MODULE = """
def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    rows = (x + sublayer_output).reshape(1, -1, x.shape[-1])
    norm = nn.GroupNorm(rows.shape[1], rows.shape[1], eps=eps, affine=False)
    return norm(rows).reshape(x.shape) * gamma + beta
"""


@pytest.mark.sandbox
def test_the_sandboxed_grader_refuses_other_normalisations_once_and_keeps_the_honest_layer_norm():
    with Runner(
        mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()
    ) as runner:
        honest = grade_submission(notebook(SETUP, HONEST_LN, HONEST_AN), "05_layer_norm", runner)
        cheats = grade_submission(notebook(SETUP, INSTANCE_NORM, BATCH_NORM), "05_layer_norm", runner)
        module = grade_submission(notebook(SETUP, HONEST_LN, GROUP_NORM_MODULE), "05_layer_norm", runner)
    assert honest.status == "graded" and honest.flags == (), honest.messages
    assert [(f["status"], f["score"] == f["max_score"] > 0) for f in honest.functions] == [("passed", True)] * 2
    by_name = {f["function"]: f for f in cheats.functions}
    for name, call in (("layer_norm", "F.instance_norm"), ("add_and_norm", "F.batch_norm")):
        assert by_name[name]["status"] == "forbidden" and by_name[name]["score"] == 0, by_name[name]
        assert len(by_name[name]["notes"]) == 1 and call in by_name[name]["notes"][0], by_name[name]["notes"]
        assert all(r["feedback"] == "" for r in by_name[name]["results"]), by_name[name]["results"]
    statuses = {f["function"]: f["status"] for f in module.functions}
    assert statuses == {"layer_norm": "passed", "add_and_norm": "forbidden"}, module.functions
    assert any("torch.nn.GroupNorm" in flag for flag in module.flags), module.flags


TILED_IN_TORCH = inspect.getsource(honest_code.tiled_attention)
TILED_IN_NUMPY = """
def tiled_attention(q, k, v, mask=None, block_size=128):
    scores = q.double().numpy() @ np.swapaxes(k.double().numpy(), -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(np.broadcast_to(mask.numpy(), scores.shape), scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return torch.from_numpy((e / np.where(total == 0, 1.0, total)) @ v.double().numpy()).to(q.dtype)
"""


@pytest.mark.sandbox
def test_the_sandboxed_grader_refuses_numpy_in_tiled_attention_and_keeps_the_torch_one():
    setup = "import math\nimport numpy as np\n" + SETUP
    with Runner(
        mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()
    ) as runner:
        honest = grade_submission(notebook(setup, TILED_IN_TORCH), "07_efficient_attention", runner)
        cheat = grade_submission(notebook(setup, TILED_IN_NUMPY), "07_efficient_attention", runner)
    tiled = next(f for f in honest.functions if f["function"] == "tiled_attention")
    assert tiled["status"] == "passed" and tiled["score"] == tiled["max_score"] > 0, tiled
    tiled = next(f for f in cheat.functions if f["function"] == "tiled_attention")
    assert tiled["status"] == "forbidden" and tiled["score"] == 0, tiled
    assert len(tiled["notes"]) == 1 and "may use only torch and math" in tiled["notes"][0], tiled["notes"]


CAUSAL_ON_DEVICE = {
    "keyword": "def causal_mask(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool, device=device).tril()\n",
    "moved": (
        "def causal_mask(size, device=None):\n"
        "    pos = torch.arange(size)\n"
        "    return (pos[:, None] >= pos[None, :]).to(device)\n"
    ),
    "filled": (
        "def causal_mask(size, device=None):\n"
        "    mask = torch.zeros(size, size, dtype=torch.bool, device=device)\n"
        "    for l in range(size):\n"
        "        mask[l, : l + 1] = True\n"
        "    return mask\n"
    ),
}
CAUSAL_ON_CPU = "def causal_mask(size, device=None):\n    return torch.ones(size, size, dtype=torch.bool).tril()\n"


@pytest.mark.sandbox
def test_the_sandboxed_grader_sees_a_causal_mask_ignore_its_device_as_check_does():
    sources = {**CAUSAL_ON_DEVICE, "ignores device": CAUSAL_ON_CPU}
    with Runner(
        mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()
    ) as runner:
        graded = {k: grade_submission(notebook(SETUP, src), "06_transformer", runner) for k, src in sources.items()}
    for kind, src in sources.items():
        mask = next(f for f in graded[kind].functions if f["function"] == "causal_mask")
        namespace: dict = {}
        exec(SETUP + src, namespace)
        local = check(namespace["causal_mask"], name="causal_mask")
        verdicts = [(r["name"], r["points"], r["feedback"], r["diagnosis"]) for r in mask["results"]]
        assert verdicts == [(r.name, r.points, r.feedback, r.diagnosis) for r in local.results], kind
        if kind in CAUSAL_ON_DEVICE:
            assert mask["status"] == "passed" and mask["score"] == mask["max_score"] > 0, (kind, mask)
        else:
            assert [r["name"] for r in mask["results"] if not r["passed"]] == ["on the given device"], mask
            assert mask["results"][-1]["diagnosis"].startswith("your causal_mask ignores its `device` argument")
