"""What `tl.device_print` / `print` lines look like: Triton's GPU format, written once for the GPU backend (a
printf format per operand) and the interpreter (the same text, formatted on the host).

Triton 3.6 prints, per element of each operand,

    pid (<x>, <y>, <z>) idx (<i>, <j>, ...)<prefix>[(operand <n>) ]<value>

with the index padded to the digits of each dimension (ceil(log10(dim))), `(operand n)` only when several
operands are printed, and a print without operands printing `pid (x, y, z)<prefix>`. The prefix is first made
to read well: it ends in ": " and, if longer than 2 characters, starts with " " (`triton_prefix`). Values:
integers in decimal by signedness (narrower than 32 bits are first widened to 32 bits by their signedness,
as C's varargs are), floats with "%f", pointers with "%p"; with hex=True, "0x" and as many hex digits as the
type has nibbles (a minimum width: a negative narrow signed int shows its 32-bit sign extension, as Triton's).

Where kernellab goes beyond Triton (which rejects them), the frontend turns the value into one of the above
first (`print_operand`): fp8 prints as its float32 value, and hex=True of a float prints its bits.
"""
from __future__ import annotations

import math

import numpy as np

from .fp8 import FORMATS as _FP8
from .fp8 import encode as _fp8_encode


def triton_prefix(prefix: str, num_operands: int) -> str:
    """Triton's tidying of a print's prefix: "x" -> " x: ", "" -> ": ", no change without operands except the
    leading space."""
    if num_operands:
        if not prefix.endswith(" "):
            prefix += " "
        if not prefix.endswith(": "):
            prefix = prefix[:-1] + ": "
    if len(prefix) > 2 and not prefix.startswith(" "):
        prefix = " " + prefix
    return prefix


def index_widths(shape) -> list[int]:
    """The printed width of each index: the digits of its dimension's size (Triton's ceil(log10(dim)))."""
    return [math.ceil(math.log10(d)) if d > 0 else 0 for d in shape]


def value_spec(elem, hex_: bool) -> str:
    """The printf conversion for one value of scalar type `elem` (after `print_operand`)."""
    if elem.is_ptr():
        return "%p"
    bits = elem.bits
    if hex_:
        return f"0x%0{bits // 4}{'ll' if bits > 32 else ''}x"
    if elem.is_floating():
        return "%f"
    signed = elem.kind == "int"
    return ("%lli" if signed else "%llu") if bits == 64 else ("%i" if signed else "%u")


def pid_format() -> str:
    return "pid (%u, %u, %u)"


def line_format(prefix: str, shape, elem, hex_: bool, operand: int, num_operands: int) -> str:
    """The printf format (no newline) of one element of an operand of `shape` (() for a scalar); its arguments
    are the three program ids, the element's index (one per dimension) and the value. `prefix` is already
    tidied (`triton_prefix`)."""
    idx = ", ".join(f"%{w}u" for w in index_widths(shape))
    operand_text = f"(operand {operand}) " if num_operands > 1 else ""
    return f"{pid_format()} idx ({idx}){_escape(prefix)}{operand_text}{value_spec(elem, hex_)}"


def no_operand_format(prefix: str) -> str:
    """A print without operands: the program ids and the prefix."""
    return pid_format() + _escape(prefix)


def _escape(prefix: str) -> str:
    """The prefix as printf text: a '%' in it prints as itself."""
    return prefix.replace("%", "%%")


def _host_value(v, elem, hex_: bool):
    """An element as the GPU passes it to printf (C varargs), for Python's % operator."""
    if elem.is_ptr():
        return "0x%x" % (int(v) & (2**64 - 1))
    if elem.is_floating():
        return float(v)
    v = int(v)  # a narrow int widened by its signedness (C varargs), so a negative one keeps its sign
    if hex_:  # %x reads the (widened) bits as unsigned
        return v & (2**64 - 1 if elem.bits > 32 else 2**32 - 1)
    return v


def host_lines(pid, prefix: str, operands, hex_: bool) -> list[str]:
    """The lines a print writes, for the interpreter: `operands` are (value, type) pairs (a NumPy array or
    scalar, and its tile-IR type), elements in row-major order, each once (a GPU may repeat an element that
    several threads hold; a scalar is printed by every thread there)."""
    head = "pid (%d, %d, %d)" % tuple(int(p) for p in pid)
    if not operands:
        return [head + prefix]
    out = []
    for n, (value, ty) in enumerate(operands):
        shape = tuple(getattr(ty, "shape", ()) or ())
        elem = ty.scalar if hasattr(ty, "scalar") else ty
        spec = value_spec(elem, hex_).replace("%p", "%s").replace("ll", "")
        widths = index_widths(shape)
        a = np.asarray(value)
        if hex_ and elem.is_floating():  # print_operand made these ints; raw IR may still hold floats
            a = float_bits(a, elem)
            elem = _UINT[elem.bits]
        operand_text = f"(operand {n}) " if len(operands) > 1 else ""
        if not shape:
            out.append(f"{head} idx (){prefix}{operand_text}" + spec % _host_value(a[()], elem, hex_))
            continue
        for idx in np.ndindex(*shape):
            index = ", ".join(f"%{w}d" % i for w, i in zip(widths, idx))
            out.append(f"{head} idx ({index}){prefix}{operand_text}" + spec % _host_value(a[idx], elem, hex_))
    return out


class _U:
    def __init__(self, bits):
        self.bits, self.kind = bits, "uint"

    def is_ptr(self):
        return False

    def is_floating(self):
        return False


_UINT = {b: _U(b) for b in (8, 16, 32, 64)}


def float_bits(a, elem) -> np.ndarray:
    """The bit patterns of float values held in the interpreter's carriers (bf16 and fp8 in float32)."""
    a = np.asarray(a)
    if elem.ir in _FP8:
        return _fp8_encode(elem.ir, a).astype(np.uint64)
    if elem.ir == "bf16":
        return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint64)
    dt = {16: np.float16, 32: np.float32, 64: np.float64}[elem.bits]
    ut = {16: np.uint16, 32: np.uint32, 64: np.uint64}[elem.bits]
    return a.astype(dt).view(ut).astype(np.uint64)


def static_text(v) -> str:
    """How `tl.static_print` shows a value: as Python prints it, except a tensor, which Triton shows as its
    type and shape (`int32[constexpr[128]]`; a scalar `fp32[]`; a pointer `pointer<fp32>[...]`)."""
    from ..language.core import tensor, unwrap

    v = unwrap(v)
    if isinstance(v, tensor):
        t = v.type
        elem = t.scalar
        name = f"pointer<{elem.elem.name}>" if elem.is_ptr() else elem.name
        shape = v.shape
        return f"{name}[{', '.join(f'constexpr[{d}]' for d in shape)}]"
    return str(v)
