"""Argument checks shared by every function of the graded API.

A wrong shape deep inside a matmul produces a message about "mat1 and mat2"; a student
cannot tell which of their arguments is wrong. These helpers check arguments up front
and raise errors that name the function, the argument, the expected shape (with the
sizes already bound by earlier arguments) and the actual shape.

Shapes are written as strings of letters, e.g. ``"N S D"``; ``"..."`` stands for any
number of leading batch dimensions, which must broadcast across arguments; a digit
stands for a fixed size.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["check_shapes", "check_mask", "check_positive_int"]


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of two shapes (as ``torch.broadcast_shapes``, which imports sympy on first
    use: half a second in every fresh process); RuntimeError if they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out[::-1])


def _format_shape(spec: list[str], dims: dict[str, int]) -> str:
    """Render a shape spec with the sizes bound so far, e.g. ``(N=2, S, D=4)``."""
    parts = []
    for letter in spec:
        if letter in dims and letter != "...":
            parts.append(f"{letter}={dims[letter]}")
        else:
            parts.append(letter)
    return "(" + ", ".join(parts) + ")"


def shape_str(x: torch.Tensor) -> str:
    """A tensor's shape as in messages: ``(2, 3)``."""
    return "(" + ", ".join(str(s) for s in x.shape) + ")"


def check_shapes(fn: str, floating: bool = True, **specs: Any) -> dict[str, Any]:
    """Check tensors against shape specs and return the bound sizes.

    Args:
        fn: name of the calling function, used in error messages.
        floating: require floating-point tensors.
        **specs: ``name=(tensor, "N S D")``; a spec starting with ``"?"`` marks an
            optional argument, which may be ``None``.

    Returns:
        A dict from letter to size, with ``"..."`` bound to the broadcast batch shape.

    Raises:
        TypeError: an argument is not a tensor, or not floating point when required.
        ValueError: an argument has the wrong number of dimensions or a size that
            disagrees with an earlier argument.
    """
    dims: dict = {}
    for name, (x, spec_str) in specs.items():
        spec = spec_str.split()
        if spec and spec[0] == "?":  # an optional argument, e.g. a bias
            if x is None:
                continue
            spec = spec[1:]
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{fn}: argument '{name}' must be a torch.Tensor of shape "
                f"{_format_shape(spec, dims)}, got {type(x).__name__}"
            )
        if floating and not x.is_floating_point():
            raise TypeError(f"{fn}: argument '{name}' must be a floating-point tensor, got dtype {x.dtype}")
        has_batch = "..." in spec
        core = [s for s in spec if s != "..."]
        if (has_batch and x.dim() < len(core)) or (not has_batch and x.dim() != len(core)):
            want = f"at least {len(core)}" if has_batch else f"{len(core)}"
            raise ValueError(
                f"{fn}: argument '{name}' must have shape {_format_shape(spec, dims)} ({want} dims), "
                f"got shape {shape_str(x)} ({x.dim()} dims)"
            )
        sizes = list(x.shape)
        if has_batch:
            batch, sizes = sizes[: x.dim() - len(core)], sizes[x.dim() - len(core) :]
            if "..." in dims:
                try:
                    dims["..."] = _broadcast(dims["..."], tuple(batch))
                except RuntimeError:
                    raise ValueError(
                        f"{fn}: argument '{name}' has batch dims {tuple(batch)} that do not "
                        f"broadcast with the earlier arguments' {dims['...']} "
                        f"(shape {shape_str(x)}, expected {_format_shape(spec, dims)})"
                    ) from None
            else:
                dims["..."] = tuple(batch)
        for letter, size in zip(core, sizes, strict=False):
            if letter.isdigit():
                ok = size == int(letter)
            else:
                ok = dims.setdefault(letter, size) == size
            if not ok:
                raise ValueError(
                    f"{fn}: argument '{name}' must have shape {_format_shape(spec, dims)}, "
                    f"got shape {shape_str(x)} (size of {letter} disagrees)"
                )
    return dims


def check_mask(
    fn: str, mask: object, target: tuple[int, ...], target_spec: str, name: str = "mask"
) -> torch.Tensor | None:
    """Check that ``mask`` is a boolean tensor broadcastable to ``target``.

    Args:
        fn: name of the calling function.
        mask: the mask, or ``None`` (accepted and returned as is).
        target: the shape the mask must broadcast to.
        target_spec: that shape in letters, e.g. ``"(N, H, L, S)"``, for the message.
        name: the argument's name.

    Returns:
        The mask unchanged.

    Raises:
        TypeError: ``mask`` is not a tensor.
        ValueError: ``mask`` is not boolean, or does not broadcast to ``target``.
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{fn}: argument '{name}' must be a bool torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"{fn}: argument '{name}' must be a boolean tensor (True = may attend), "
            f"got dtype {mask.dtype}; for a 0/1 or additive float mask use mask.bool() or mask == 0"
        )
    try:
        ok = _broadcast(tuple(mask.shape), tuple(target)) == tuple(target)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"{fn}: argument '{name}' must broadcast to {target_spec} = {tuple(target)}, got shape {shape_str(mask)}"
        )
    return mask


def check_positive_int(fn: str, name: str, value: object) -> int:
    """Check that ``value`` is a positive int (not a bool) and return it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{fn}: argument '{name}' must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{fn}: argument '{name}' must be positive, got {value}")
    return value
