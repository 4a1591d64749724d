"""Average pooling as one scope (torch semantics)::

    out[n, c, h, w] = sum[r, s] x[n, c, h*sh + r - ph, w*sw + s - pw] * 1/(kh*kw)

Like a convolution's, padded positions are reads out of bounds, which read 0; each window
divides by its full size (``count_include_pad=True``, torch's default). One scope, not windows
then a mean, so that a derivation sees the window sum next to the sums it can swap with
(``pool(conv1x1(x)) = conv1x1(pool(x))``: the product then runs on a quarter of the pixels).
"""
from __future__ import annotations

from ir.nodes import Const, Scope

from ir.ops._util import OpError, check_rank, iters, operand, read, scope, syms, tuple_arg

__all__ = ["avg_pool2d"]


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Scope:
    """torch.nn.functional.avg_pool2d. Refused where a window's divisor may not be its size
    (``divisor_override``, padding left out of the count) and with ``ceil_mode``: whole
    windows at these sizes may be a partial last one at others, which a graph with symbolic
    sizes would meet."""
    op = "avg_pool2d"
    x = operand(op, input)
    check_rank(op, x, [3, 4])
    kernel = tuple_arg(op, "kernel_size", kernel_size, 2, minimum=1)
    stride = tuple_arg(op, "stride", stride or kernel, 2, minimum=1)
    padding = tuple_arg(op, "padding", padding, 2, minimum=0)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise OpError(op, f"padding {padding} must be at most half the kernel {kernel}")
    spans = [n + 2 * p - k for n, p, k in zip(x.shape[-2:], padding, kernel)]
    if any(span < 0 for span in spans):
        raise OpError(op, f"kernel {kernel} is larger than the padded input {x.shape[-2:]}")
    if divisor_override or any(padding) and not count_include_pad or ceil_mode:
        raise OpError(op, "a window's divisor may not be its size (divisor_override, padding "
                          "left out of the count, or ceil_mode's partial last window)")
    lead = x.shape[:-2]
    out = iters(["n", "c"][-len(lead):] + ["h", "w"],
                [*lead, *(span // s + 1 for span, s in zip(spans, stride))])
    window = iters(["r", "s"], kernel)
    o, (r, s) = syms(out), syms(window)
    (h, w), (sh, sw), (ph, pw) = o[-2:], stride, padding
    body = read(x, *o[:-2], h * sh + r - ph, w * sw + s - pw) * \
        Const(1.0 / (kernel[0] * kernel[1]))
    return scope(op, out, window, body, dtype=x.dtype)
