"""Host-side microscaling (OCP MX v1.0) data: fp4 e2m1 elements and e8m0 block scales, as torch uint8 tensors.

Served as `triton.tools.mxfp` by kernellab.compat (Triton's names and methods), so programs that build MX
test data for `tl.dot_scaled` run unchanged.

- `MXFP4Tensor`: one e2m1 code per uint8 (low 4 bits: sign, 2 exponent bits with bias 1, 1 mantissa bit).
  The 8 magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4, 6; there is no infinity or NaN. From float: round to nearest,
  ties to the even code (mantissa 0); beyond 6 (infinities and NaN too) saturate to +-6 keeping the sign
  bit; zero keeps its sign. `to_packed_tensor(dim)` puts two codes in a byte (the even index in the low
  nibble), padding an odd length with a zero code.
- `MXScaleTensor`: one e8m0 code per uint8: 2**(code - 127), and 255 is NaN. From float: the exponent of the
  value (floor(log2 x), exactly), clamped to codes 0..254; zero, negatives, infinities and NaN give 255.
"""
from __future__ import annotations

import math

import torch

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # by code 0..7
E8M0_NAN = 255


def _size(size):
    return tuple(size) if isinstance(size, (tuple, list, torch.Size)) else (size,)


class MXFP4Tensor:
    """fp4 e2m1 codes (`.data`, uint8); made from float32 `data`, or of a `size` to be filled by `random()`."""

    def __init__(self, data=None, size=None, device=None):
        self.device = device
        if data is not None:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"MXFP4Tensor(data=...) takes a torch tensor of floats, got {type(data).__name__}")
            self.device = data.device
            self.data = self._from_float(data)
        elif size is not None:
            self.size = _size(size)
        else:
            raise ValueError("MXFP4Tensor needs data (a float tensor) or a size")

    def random(self):
        """Uniformly random codes (each sign, exponent and mantissa bit independently)."""
        s = torch.randint(0, 2, size=self.size, dtype=torch.uint8, device=self.device)
        e = torch.randint(0, 4, size=self.size, dtype=torch.uint8, device=self.device)
        m = torch.randint(0, 2, size=self.size, dtype=torch.uint8, device=self.device)
        self.data = (s << 3) | (e << 1) | m
        return self

    @staticmethod
    def _table(device):
        mags = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=device)
        return torch.cat([mags, -mags])  # code 8 is -0.0

    def to(self, dtype):
        """The codes' values as a float tensor (float32, as Triton supports; other float dtypes hold them exactly)."""
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"MXFP4Tensor.to() converts to a float dtype (torch.float32), got {dtype}")
        return self._table(self.data.device)[(self.data & 0xF).long()].to(dtype)

    def _from_float(self, values):
        x = values.to(torch.float32)
        sign = torch.signbit(x).to(torch.uint8)
        mag = x.abs().nan_to_num(nan=math.inf)  # NaN saturates like an infinity
        grid = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=x.device)
        hi = torch.searchsorted(grid, mag.contiguous()).clamp(max=len(E2M1_MAGNITUDES) - 1)
        lo = (hi - 1).clamp(min=0)
        d_lo, d_hi = mag - grid[lo], grid[hi] - mag
        # nearest; a tie goes to the even code (mantissa bit 0); beyond 6, hi = lo = 7 after the clamp
        code = torch.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
        code = torch.where(mag >= grid[-1], len(E2M1_MAGNITUDES) - 1, code)
        return (sign << 3) | code.to(torch.uint8)

    def to_packed_tensor(self, dim):
        """Two codes per byte along `dim`: element 2i in the low nibble, 2i+1 in the high one."""
        data = self.data
        assert 0 <= dim < data.ndim, f"dim {dim} is not a dimension of a {data.ndim}-d tensor"
        if data.size(dim) % 2:
            pad = list(data.shape)
            pad[dim] = 1
            data = torch.cat([data, torch.zeros(pad, dtype=data.dtype, device=data.device)], dim=dim)
        pairs = data.unflatten(dim, (data.size(dim) // 2, 2))
        return (pairs.select(dim + 1, 1) << 4) | pairs.select(dim + 1, 0)

    def unpack_packed_tensor(self, packed_tensor, dim, original_shape):
        """The codes of `to_packed_tensor(dim)` again, one per byte, cut to `original_shape[dim]`."""
        pairs = torch.stack((packed_tensor & 0xF, (packed_tensor >> 4) & 0xF), dim=dim + 1)
        data = pairs.flatten(dim, dim + 1)
        return data.narrow(dim, 0, original_shape[dim]).to(torch.uint8)


class MXScaleTensor:
    """e8m0 scale codes (`.data`, uint8); made from float32 `data`, or of a `size` to be filled by `random()`."""

    def __init__(self, data=None, size=None, device=None):
        self.device = device
        if data is not None:
            if not isinstance(data, torch.Tensor):
                raise TypeError(f"MXScaleTensor(data=...) takes a torch tensor of floats, got {type(data).__name__}")
            self.device = data.device
            self.data = self._from_float(data)
        elif size is not None:
            self.size = _size(size)
        else:
            raise ValueError("MXScaleTensor needs data (a float tensor) or a size")

    def random(self, low=None, high=None):
        """Uniformly random codes 0..254 (never NaN); `low` / `high` bound the scale values (powers of two
        between their exponents)."""
        def exponent(v):  # the biased exponent of a bound, as Triton computes it (float32 log2, truncated)
            return int(torch.log2(torch.tensor(v, dtype=torch.float32))) + 127

        lo = 0 if low is None else max(0, exponent(low))
        hi = 254 if high is None else min(254, max(0, exponent(high)))
        if lo > hi:
            raise ValueError(f"MXScaleTensor.random: low={low} is above high={high}")
        self.data = torch.randint(lo, hi + 1, size=self.size, dtype=torch.uint8, device=self.device)
        return self

    def to(self, dtype):
        """The scales' values (2**(code - 127); NaN for code 255) as a float tensor."""
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"MXScaleTensor.to() converts to a float dtype (torch.float32), got {dtype}")
        table = torch.tensor([math.ldexp(1.0, c - 127) for c in range(255)] + [math.nan], dtype=torch.float64,
                             device=self.data.device)
        return table[self.data.long()].to(dtype)

    def _from_float(self, values):
        x = values.to(torch.float32)
        invalid = ~torch.isfinite(x) | (x <= 0)
        _, e = torch.frexp(torch.where(invalid, torch.ones_like(x), x))  # x = m * 2**e, 0.5 <= m < 1
        code = (e.to(torch.int32) - 1 + 127).clamp(0, 254)
        return torch.where(invalid, E8M0_NAN, code).to(torch.uint8)
