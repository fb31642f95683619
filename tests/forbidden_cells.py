"""Notebook cells shared by the tests of a forbidden call charged once (issue 30, item 6):
``tests/grading/test_forbidden_charged_once.py`` grades them with ``check()`` and the static
scan, ``tests/autograder/test_forbidden_charged_once_sandboxed.py`` in the sandbox."""

from conftest import HONEST_SOFTMAX

SETUP = "import math\nimport torch\nimport torch.nn.functional as F\n"
FORBIDDEN_SOFTMAX = "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"
HONEST_SDPA = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ v, w
"""
HONEST_SELF_ATTENTION = """
def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
"""
#: an honest student's own style: a helper class, IPython magics and a shell line
HONEST_WITH_IPYTHON = """
%matplotlib inline
!echo projecting

class Projection:
    def __init__(self, W):
        self.W = W

    def __call__(self, x):
        return x @ self.W

def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = (Projection(W)(x) for W in (W_q, W_k, W_v))
    return scaled_dot_product_attention(q, k, v, mask)
"""
FORBIDDEN_LAYER_NORM = """
def layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
"""
HONEST_ADD_AND_NORM = """
def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta, eps)
"""
#: the caller reaches the whole attention through a helper of its own: its own call
SDPA_THROUGH_OWN_HELPER = """
def _attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    out = _attend(q, k, v, mask)
    return out, softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
"""
#: softmax may call F.scaled_dot_product_attention (only the softmax family is forbidden there):
#: it computes self_attention's whole attention when asked, and is right otherwise
SMUGGLING_SOFTMAX = HONEST_SOFTMAX.replace(
    "def softmax(x, dim=-1):",
    "def softmax(x, dim=-1, kv=None):\n    if kv is not None:\n        return F.scaled_dot_product_attention(x, *kv)",
)
SMUGGLED_SELF_ATTENTION = """
def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    w = scaled_dot_product_attention(q, k, v, mask)[1]
    return softmax(q, kv=(k, v, mask)), w
"""
