"""ExecuTorch: ops its portable runtime has no kernel for (key ``"executorch"``) that only appear in the traced graph,
rewritten by FX node fixes (stage 5) into ops it has (Python-level calls are in ``kernel_patches.py``). Each keeps
eager's numerics (exact or to float rounding) and says which models need it.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ...registry import register_fx_node_fix
from .fixes import _call_with_value

_UNSTABLE_SORTS = (torch.ops.aten.sort.default, torch.ops.aten.argsort.default)


@register_fx_node_fix("executorch")
def _fix_sort_as_topk(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # vjepa2's token argsort, jetmoe's expert grouping: the runtime has no sort kernel ("Missing operator:
    # aten::sort.values", 0x14 at load); a sorted topk of the whole dimension orders the same (stable sorts stay).
    # Upstream: ExecuTorch's portable kernels have topk but no sort.
    if node.target not in _UNSTABLE_SORTS:
        return False
    source, dim, descending = node.args[0], *_sort_arguments(*node.args[1:], **node.kwargs)
    graph, length = graph_module.graph, source.meta["val"].shape[dim]
    with graph.inserting_before(node):
        if isinstance(length, torch.SymInt):
            length = _call_with_value(graph, torch.ops.aten.sym_size.int, source, dim)
        topk = _call_with_value(graph, torch.ops.aten.topk.default, source, length, dim, descending, True)
        if node.target is torch.ops.aten.argsort.default:
            topk = _call_with_value(graph, operator.getitem, topk, 1)
    node.replace_all_uses_with(topk)
    graph.erase_node(node)
    return True


def _sort_arguments(dim: int = -1, descending: bool = False) -> tuple[int, bool]:
    return dim, descending


@register_fx_node_fix("executorch")
def _fix_bucketize_as_count(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # idefics3/smolvlm's patch positions: the runtime has no bucketize kernel ("Missing operator:
    # aten::bucketize.Tensor_out", 0x14 at load); a value's bucket is the number of boundaries below it (or at it,
    # with right=True). Upstream: ExecuTorch's portable kernels have no bucketize.
    if node.target is not torch.ops.aten.bucketize.Tensor:
        return False
    values, boundaries = node.args[:2]
    below = torch.ops.aten.ge.Tensor if node.kwargs.get("right", False) else torch.ops.aten.gt.Tensor
    dtype = torch.int32 if node.kwargs.get("out_int32", False) else torch.int64
    graph = graph_module.graph
    with graph.inserting_before(node):
        column = _call_with_value(graph, torch.ops.aten.unsqueeze.default, values, -1)
        passed = _call_with_value(graph, below, column, boundaries)
        count = _call_with_value(graph, torch.ops.aten.sum.dim_IntList, passed, [-1], False, dtype=dtype)
    node.replace_all_uses_with(count)
    graph.erase_node(node)
    return True


_INVERSE_REAL_FFTS = (torch.ops.aten.fft_irfft.default, torch.ops.aten._fft_c2r.default)


@register_fx_node_fix("executorch")
def _fix_irfft_of_polar_as_real_dft(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # neucodec, xcodec2 (the vocos ISTFT head, irfft(polar(magnitude, phase))): the runtime has no polar kernel nor
    # any other way to make the complex tensor its FFT takes ("Missing operator: aten::polar.out", 0x14 at load); the
    # inverse real DFT of magnitude x (cos, sin) of the phase is two matmuls by cos/sin DFT matrices.
    spectrum = node.args[0] if node.target in _INVERSE_REAL_FFTS else None
    if not isinstance(spectrum, torch.fx.Node) or spectrum.target is not torch.ops.aten.polar.default:
        return False
    magnitude, phase = spectrum.args
    bins, rank = magnitude.meta["val"].shape[-1], magnitude.meta["val"].dim()
    length, dim, scale = _irfft_arguments(node, bins)
    if dim not in (-1, rank - 1) or not isinstance(bins, int) or not isinstance(length, int):
        return False
    used = min(bins, length // 2 + 1)  # irfft drops the bins past the Nyquist one, and zero-pads missing ones
    value, graph = node.meta["val"], graph_module.graph
    call = functools.partial(_call_with_value, graph)

    aten = torch.ops.aten
    with graph.inserting_before(node), value.fake_mode:
        if used < bins:
            magnitude, phase = (call(aten.slice.Tensor, part, -1, 0, used) for part in (magnitude, phase))
        real = call(aten.mul.Tensor, magnitude, call(aten.cos.default, phase))
        imaginary = call(aten.mul.Tensor, magnitude, call(aten.sin.default, phase))
        frequency = call(aten.arange.default, used, dtype=torch.int64)
        angle = _dft_angles(call, frequency, length, length, value.dtype)
        # Every bin stands for itself and its mirror image, but the DC and Nyquist ones: k * (n - 2k) == 0.
        mirrored = call(aten.mul.Tensor, frequency, call(aten.rsub.Scalar, call(aten.mul.Tensor, frequency, 2), length))
        single = call(aten._to_copy.default, call(aten.eq.Scalar, mirrored, 0), dtype=value.dtype)
        weight = call(aten.unsqueeze.default, call(aten.mul.Tensor, call(aten.rsub.Scalar, single, 2), scale), 1)
        cosines = call(aten.mul.Tensor, call(aten.cos.default, angle), weight)
        sines = call(aten.mul.Tensor, call(aten.sin.default, angle), weight)
        signal = call(
            aten.sub.Tensor, call(aten.matmul.default, real, cosines), call(aten.matmul.default, imaginary, sines)
        )
    node.replace_all_uses_with(signal)
    graph.erase_node(node)
    return True


def _dft_angles(call: Callable[..., torch.fx.Node], rows: torch.fx.Node, columns: int, length: int, dtype: Any) -> Any:
    """Graph nodes of the ``length``-point DFT angles 2 pi (row x column) / length, rows a node of int64 indices."""
    aten = torch.ops.aten
    turns = call(aten.mul.Tensor, call(aten.unsqueeze.default, rows, 1), call(aten.arange.default, columns))
    turns = call(aten.remainder.Scalar, turns, length)  # exact in integers, before any rounding
    return call(aten.mul.Tensor, call(aten._to_copy.default, turns, dtype=dtype), 2 * math.pi / length)


_CONJUGATES = (torch.ops.aten._conj.default, torch.ops.aten.conj.default, torch.ops.aten.conj_physical.default)


@register_fx_node_fix("executorch")
def _fix_irfft_of_spectra_product_as_circular_correlation(
    graph_module: torch.fx.GraphModule, node: torch.fx.Node
) -> bool:
    # autoformer (its auto-correlation, irfft(rfft(q) * conj(rfft(k)))): lowering rejects the complex conj ("_conj_copy
    # does not support automatic differentiation for outputs with complex dtype") and the runtime has no FFT kernel;
    # it is the circular cross-correlation of q and k, real DFTs as matmuls by cos/sin matrices.
    operands = _correlated_signals(node)
    if operands is None:
        return False
    (signal, reference), length, dim = operands
    value, graph = node.meta["val"], graph_module.graph
    call = functools.partial(_call_with_value, graph)

    aten = torch.ops.aten
    with graph.inserting_before(node), value.fake_mode:
        angle = _dft_angles(call, call(aten.arange.default, length), length, length, value.dtype)
        cosines, sines = call(aten.cos.default, angle), call(aten.sin.default, angle)
        spectra = []  # per signal, its DFT's real part and minus its imaginary part, along the last dim
        for part in (signal, reference):
            part = call(aten.transpose.int, part, dim, -1)
            used = min(part.meta["val"].shape[-1], length)  # rfft zero-pads a shorter signal and cuts a longer one
            if used < part.meta["val"].shape[-1]:
                part = call(aten.slice.Tensor, part, -1, 0, used)
            rows = (
                (cosines, sines)
                if used == length
                else [call(aten.slice.Tensor, m, 0, 0, used) for m in (cosines, sines)]
            )
            spectra.append(tuple(call(aten.matmul.default, part, matrix) for matrix in rows))
        (signal_cos, signal_sin), (reference_cos, reference_sin) = spectra
        product_real = call(
            aten.add.Tensor,
            call(aten.mul.Tensor, signal_cos, reference_cos),
            call(aten.mul.Tensor, signal_sin, reference_sin),
        )
        product_imaginary = call(
            aten.sub.Tensor,
            call(aten.mul.Tensor, signal_cos, reference_sin),
            call(aten.mul.Tensor, signal_sin, reference_cos),
        )
        inverse = call(
            aten.sub.Tensor,
            call(aten.matmul.default, product_real, cosines),
            call(aten.matmul.default, product_imaginary, sines),
        )
        correlation = call(aten.transpose.int, call(aten.div.Tensor, inverse, length), dim, -1)
    node.replace_all_uses_with(correlation)
    graph.erase_node(node)
    return True


def _correlated_signals(node: torch.fx.Node) -> tuple[tuple[torch.fx.Node, torch.fx.Node], int, int] | None:
    """((q, k), n, dim) of ``fft_irfft(fft_rfft(q) * conj(fft_rfft(k)))`` with one static n, dim and default norms."""
    if node.target is not torch.ops.aten.fft_irfft.default:
        return None
    product = node.args[0]
    if not isinstance(product, torch.fx.Node) or product.target is not torch.ops.aten.mul.Tensor:
        return None
    left, right = product.args
    if isinstance(left, torch.fx.Node) and left.target in _CONJUGATES:
        left, right = right, left
    if not isinstance(right, torch.fx.Node) or right.target not in _CONJUGATES:
        return None
    transforms = (left, right.args[0])
    if not all(isinstance(t, torch.fx.Node) and t.target is torch.ops.aten.fft_rfft.default for t in transforms):
        return None
    length, dim, norm = _fft_options(*node.args[1:], **node.kwargs)
    rank = node.meta["val"].dim()
    for transform in transforms:
        if _fft_options(*transform.args[1:], **transform.kwargs) != (length, dim, norm):
            return None
    if not isinstance(length, int) or norm != "backward":
        return None
    signals = tuple(t.args[0] for t in transforms)
    if any(not isinstance(s.meta["val"].shape[dim], int) for s in signals):
        return None
    return signals, length, dim % rank


def _irfft_arguments(node: torch.fx.Node, bins: Any) -> tuple[Any, int | None, float]:
    """(output length, dim, scale) of an ``fft_irfft`` or ``_fft_c2r`` node; dim None for several dims, length a
    SymInt where it is not static."""
    if node.target is torch.ops.aten._fft_c2r.default:
        dims, normalization, length = node.args[1:4]
        norm = ("forward", "ortho", "backward")[normalization]  # fft_norm_mode none, by_root_n, by_n, as inverse
        dim = dims[0] if len(dims) == 1 else None
    else:
        length, dim, norm = _fft_options(*node.args[1:], **node.kwargs)
        length = 2 * (bins - 1) if length is None else length
    if not isinstance(length, int):
        return length, dim, 1.0
    return length, dim, {"backward": 1 / length, "ortho": length**-0.5, "forward": 1.0}[norm]


def _fft_options(n: Any = None, dim: int = -1, norm: str | None = "backward") -> tuple[Any, int, str | None]:
    return n, dim, norm or "backward"


_REMAINDERS = (torch.ops.aten.remainder.Scalar, torch.ops.aten.remainder.Tensor)


@register_fx_node_fix("executorch")
def _fix_integer_remainder_from_floor_division(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # blt's n-gram hashes (wrapped int64 products % vocabulary): the runtime's integer remainder takes the dividend's
    # sign (C's %), torch's the divisor's, so a negative hash indexes its embedding below 0 (0x12); x - (x // y) * y
    # is torch's, from the runtime's floor_divide (right for integers, as float remainder is).
    if node.target not in _REMAINDERS or node.meta["val"].dtype.is_floating_point:
        return False
    dividend, divisor = node.args[:2]
    graph = graph_module.graph
    with graph.inserting_before(node):
        quotient = _call_with_value(graph, torch.ops.aten.floor_divide.default, dividend, divisor)
        multiple = _call_with_value(graph, torch.ops.aten.mul.Tensor, quotient, divisor)
        remainder = _call_with_value(graph, torch.ops.aten.sub.Tensor, dividend, multiple)
    node.replace_all_uses_with(remainder)
    graph.erase_node(node)
    return True


_INTEGER_POWERS = (torch.ops.aten.pow.Tensor_Tensor, torch.ops.aten.pow.Scalar, torch.ops.aten.pow.Tensor_Scalar)


@register_fx_node_fix("executorch")
def _fix_integer_power_by_squaring(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # blt's hash prime powers (prime ** arange(n), int64): the runtime's pow goes through double, so a power past 2**63
    # saturates where torch's wraps around; multiplying the squares the exponent's bits pick wraps as torch does.
    value = node.meta["val"]
    if node.target not in _INTEGER_POWERS or value.dtype.is_floating_point or value.dtype is torch.bool:
        return False
    base, exponent = node.args[:2]
    if isinstance(exponent, int) and exponent <= 0:
        return False
    graph = graph_module.graph
    with graph.inserting_before(node):
        multiply = functools.partial(_call_with_value, graph, torch.ops.aten.mul.Tensor)
        power = functools.reduce(multiply, _squares_picked(graph, base, exponent))
        if power.meta["val"].dtype != value.dtype:
            power = _call_with_value(graph, torch.ops.aten._to_copy.default, power, dtype=value.dtype)
    node.replace_all_uses_with(power)
    graph.erase_node(node)
    return True


def _squares_picked(graph: torch.fx.Graph, base: Any, exponent: Any) -> Iterator[torch.fx.Node]:
    """``base ** 2 ** k`` for each bit k the exponent sets; where the bits are only known at run time, for each bit
    it may set: that square or 1."""
    known = isinstance(exponent, int)
    bits = exponent.bit_length() if known else _exponent_bits(exponent)
    square = base
    for bit in range(bits):
        if not known:
            shifted = _call_with_value(graph, torch.ops.aten.bitwise_right_shift.Tensor_Scalar, exponent, bit)
            odd = _call_with_value(graph, torch.ops.aten.bitwise_and.Scalar, shifted, 1)
            picked = _call_with_value(graph, torch.ops.aten.ne.Scalar, odd, 0)
            where = torch.ops.aten.where.Scalar if isinstance(square, int) else torch.ops.aten.where.ScalarOther
            yield _call_with_value(graph, where, picked, square, 1)
        elif exponent >> bit & 1:
            yield square
        if bit + 1 == bits:
            break
        if isinstance(square, int):  # a scalar base: its squares are known now
            square = _wrapped(square * square)
        else:
            square = _call_with_value(graph, torch.ops.aten.mul.Tensor, square, square)


def _exponent_bits(exponent: torch.fx.Node) -> int:
    """How many low bits of an integer exponent can be set: from ``arange``'s end where it made the exponents."""
    if exponent.target in (torch.ops.aten.arange.default, torch.ops.aten.arange.start):
        end = exponent.args[0] if exponent.target is torch.ops.aten.arange.default else exponent.args[1]
        if isinstance(end, int):
            return max((end - 1).bit_length(), 1)
    return torch.iinfo(exponent.meta["val"].dtype).bits - 1


def _wrapped(number: int) -> int:
    """``number`` as int64 arithmetic leaves it: wrapped around into [-2**63, 2**63)."""
    return (number + 2**63) % 2**64 - 2**63


@register_fx_node_fix("executorch")
def _fix_integer_sum_as_cumsum_end(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # blt's hashes (sums of wrapped int64 products): the runtime sums integers over a dimension in double, off past
    # 2**53, where its cumsum adds integers exactly: each dimension's sum is its cumsum's last element.
    value = node.meta["val"]
    if node.target is not torch.ops.aten.sum.dim_IntList or value.dtype.is_floating_point:
        return False
    source, (dims, keepdim) = node.args[0], _sum_arguments(*node.args[1:], **node.kwargs)
    rank = source.meta["val"].dim()
    if source.meta["val"].dtype in (torch.bool, torch.uint8) or not dims or rank == 0:
        return False
    dims = sorted({dim % rank for dim in dims})
    graph, summed = graph_module.graph, source
    with graph.inserting_before(node):
        for dim in dims:
            summed = _call_with_value(graph, torch.ops.aten.cumsum.default, summed, dim, dtype=value.dtype)
            summed = _call_with_value(graph, torch.ops.aten.slice.Tensor, summed, dim, -1, 2**63 - 1)
        if not keepdim:
            summed = _call_with_value(graph, torch.ops.aten.squeeze.dims, summed, dims)
    node.replace_all_uses_with(summed)
    graph.erase_node(node)
    return True


def _sum_arguments(dim: list[int] | None, keepdim: bool = False, *, dtype: Any = None) -> tuple[list[int] | None, bool]:
    return dim, keepdim


_SIZED_DRAWS = {
    torch.ops.aten.randn_like.default: torch.ops.aten.randn.default,
    torch.ops.aten.rand_like.default: torch.ops.aten.rand.default,
}


@register_fx_node_fix("executorch")
def _fix_random_like_as_sized_draw(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # vits's prior sampling, vibevoice's latent noise (randn_like): the runtime has randn and rand kernels but none
    # for their _like forms ("Missing operator: aten::randn_like.out", 0x14 at load); draw at the input's sizes.
    draw = _SIZED_DRAWS.get(node.target)
    if draw is None:
        return False
    value, graph = node.meta["val"], graph_module.graph
    with graph.inserting_before(node), value.fake_mode:
        sizes = _sizes(graph, node.args[0])
        sized = _call_with_value(graph, draw, sizes, dtype=value.dtype, device=value.device)
    node.replace_all_uses_with(sized)
    graph.erase_node(node)
    return True


@register_fx_node_fix("executorch")
def _fix_randint_as_scaled_rand(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # informer's ProbSparse attention samples keys with torch.randint: the runtime has no randint kernel ("Missing
    # operator: aten::randint.low_out", 0x14 at load); low + floor(rand * (high - low)) draws the same uniform
    # integers from its rand kernel (in float64: exact for ranges up to 2**53).
    if node.target not in (torch.ops.aten.randint.default, torch.ops.aten.randint.low):
        return False
    low, high, size = (0, *node.args[:2]) if node.target is torch.ops.aten.randint.default else node.args[:3]
    value, graph = node.meta["val"], graph_module.graph
    with graph.inserting_before(node), value.fake_mode:
        count = high if low == 0 else _call_with_value(graph, operator.sub, high, low)
        uniform = _call_with_value(graph, torch.ops.aten.rand.default, size, dtype=torch.float64)
        scaled = _call_with_value(graph, torch.ops.aten.mul.Tensor, uniform, count)
        drawn = _call_with_value(graph, torch.ops.aten.floor.default, scaled)
        drawn = _call_with_value(graph, torch.ops.aten._to_copy.default, drawn, dtype=value.dtype)
        if low != 0:
            drawn = _call_with_value(graph, torch.ops.aten.add.Tensor, drawn, low)
    node.replace_all_uses_with(drawn)
    graph.erase_node(node)
    return True


def _sizes(graph: torch.fx.Graph, source: torch.fx.Node) -> list[Any]:
    """``source``'s sizes as graph arguments: ints where static, ``sym_size`` nodes where dynamic."""
    shape = source.meta["val"].shape
    return [
        _call_with_value(graph, torch.ops.aten.sym_size.int, source, dim) if isinstance(size, torch.SymInt) else size
        for dim, size in enumerate(shape)
    ]
