"""The position-wise feed-forward network (transformer chapter)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._validation import check_positive_int, check_shapes

__all__ = ["position_wise_feed_forward", "PositionwiseFeedForward"]


def position_wise_feed_forward(
    x: torch.Tensor,
    W_1: torch.Tensor,
    b_1: torch.Tensor,
    W_2: torch.Tensor,
    b_2: torch.Tensor,
    *,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    r"""Two linear maps with a ReLU between, applied to every position alike.

    :math:`\mathrm{FFN}(x) = \max(0,\ x W_1 + b_1)\, W_2 + b_2` (Vaswani et al., 2017, eq. 2).

    Args:
        x: token vectors.
        W_1, b_1: expansion to the hidden width F (usually 4E).
        W_2, b_2: projection back to E.
        dropout_p: dropout after the ReLU (training only; as PyTorch's transformer layers).

    Shape:
        - x: :math:`(*, E)`
        - W_1: :math:`(E, F)`; b_1: :math:`(F)`
        - W_2: :math:`(F, E_{out})`; b_2: :math:`(E_{out})`
        - output: :math:`(*, E_{out})`

    Returns:
        One output vector per position, in the dtype of ``x`` when the weights share it.
    """
    check_shapes(
        "position_wise_feed_forward",
        x=(x, "... E"),
        W_1=(W_1, "E F"),
        b_1=(b_1, "F"),
        W_2=(W_2, "F O"),
        b_2=(b_2, "O"),
    )
    hidden = torch.relu(x @ W_1 + b_1)  # (*, F)
    if dropout_p > 0:
        hidden = F.dropout(hidden, p=dropout_p)
    return hidden @ W_2 + b_2  # (*, E_out)


class PositionwiseFeedForward(nn.Module):
    """Module form of :func:`position_wise_feed_forward`, with dropout after the ReLU.

    Args:
        d_model: E.
        dim_feedforward: the hidden width F.
        dropout: dropout probability after the ReLU.

    Shape:
        - x: :math:`(*, E)`; output: same
    """

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float = 0.0):
        super().__init__()
        check_positive_int("PositionwiseFeedForward", "d_model", d_model)
        check_positive_int("PositionwiseFeedForward", "dim_feedforward", dim_feedforward)
        self.dropout = dropout
        # nn.Linear's default initialisation, stored transposed for x @ W.
        lin1, lin2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.W_1 = nn.Parameter(lin1.weight.detach().T.clone())
        self.b_1 = nn.Parameter(lin1.bias.detach().clone())
        self.W_2 = nn.Parameter(lin2.weight.detach().T.clone())
        self.b_2 = nn.Parameter(lin2.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return position_wise_feed_forward(
            x, self.W_1, self.b_1, self.W_2, self.b_2, dropout_p=self.dropout if self.training else 0.0
        )

    def load_linear_(self, linear1: nn.Linear, linear2: nn.Linear) -> PositionwiseFeedForward:
        """Copy the weights of two :class:`torch.nn.Linear` layers (as in PyTorch's transformer)."""
        with torch.no_grad():
            self.W_1.copy_(linear1.weight.T)
            self.b_1.copy_(linear1.bias)
            self.W_2.copy_(linear2.weight.T)
            self.b_2.copy_(linear2.bias)
        return self
