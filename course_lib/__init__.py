"""course_lib: reference implementations and grading tools for *Attention and Transformers, from Scratch*.

The library modules mirror the book's chapters:

- :mod:`course_lib.scores`, :mod:`course_lib.pooling`, :mod:`course_lib.seq2seq`: seq2seq with attention
- :mod:`course_lib.softmax`, :mod:`course_lib.attention`: self-attention
- :mod:`course_lib.multihead`: multi-head attention
- :mod:`course_lib.positional`: positional encoding
- :mod:`course_lib.layernorm`: LayerNorm
- :mod:`course_lib.masks`, :mod:`course_lib.feedforward`, :mod:`course_lib.losses`,
  :mod:`course_lib.transformer`: the transformer
- :mod:`course_lib.efficient`: efficient attention (tiled, sliding-window, one KV-cache step);
  :mod:`course_lib.memory_probe` measures tiled attention's peak memory (``python -m``)

Around them:

- :mod:`course_lib.assignments`: the graded API in one table (each assignment, its functions)
- :mod:`course_lib._validation`: the argument checks every graded function runs first
- :mod:`course_lib.tasks`, :mod:`course_lib.models`, :mod:`course_lib.training`,
  :mod:`course_lib.decoding`: toy tasks, whole models, training and checkpoints, decoding
- :mod:`course_lib.cli`: the ``course-lib`` command line
- :mod:`course_lib.grading`: the student's side, what notebooks import (``check``)
- :mod:`course_lib.autograder`: the instructor's side (assign, grade, export, class report)

Conventions: batch-first; boolean masks with ``True`` = may attend; weight matrices
multiply from the right (``x @ W``); attention functions return ``(output, weights)``.
"""

from .assignments import GRADED_FUNCTIONS
from .attention import scaled_dot_product_attention, self_attention
from .efficient import cached_attention_step, sliding_window_attention, sliding_window_mask, tiled_attention
from .feedforward import PositionwiseFeedForward, position_wise_feed_forward
from .layernorm import LayerNorm, add_and_norm, layer_norm
from .losses import label_smoothing_loss
from .masks import causal_mask, padding_mask
from .multihead import (
    MultiHeadAttention,
    merge_heads,
    multi_head_attention,
    multi_head_attention_sum_form,
    split_heads,
)
from .pooling import attention_pool, local_attention_weights
from .positional import SinusoidalPositionalEncoding, relative_position_matrix, sinusoidal_positional_encoding
from .scores import additive_score, cosine_score, dot_score, multiplicative_score, scaled_dot_score
from .seq2seq import Seq2SeqAttention
from .softmax import masked_softmax, softmax
from .transformer import DecoderLayer, EncoderLayer, Transformer

__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it)

__all__ = [
    *GRADED_FUNCTIONS,  # the graded API, in course order (course_lib/assignments.py)
    "GRADED_FUNCTIONS",
    "masked_softmax",
    "MultiHeadAttention",
    "LayerNorm",
    "SinusoidalPositionalEncoding",
    "PositionwiseFeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Transformer",
    "Seq2SeqAttention",
    "sliding_window_attention",  # tiled_attention, sliding_window_mask, cached_attention_step: graded (above)
]
