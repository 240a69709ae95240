"""TMA tensor maps at launch, without a GPU: a recipe evaluated on a launch's arguments, the checks
cuTensorMapEncodeTiled would make, the cache (one encoding per distinct map), and the packed kernel
parameters (128 bytes, 64-byte aligned, interleaved with the scalar slots in signature order)."""
from __future__ import annotations

import ctypes
import struct

import pytest

from kernellab.errors import LaunchError
from kernellab.runtime import tensormap
from kernellab.runtime.driver import ArgPacker

# A's map of the block-pointer matmul: base = arg 0, dims (K, M) = args 5 and 3, row stride = arg 6
RECIPE = {"base": 0, "dims": [["arg", 5], ["arg", 3]], "strides": [["arg", 6]], "box": [64, 128], "swizzle": 128,
          "dtype": "f16"}


class FakeTensor:
    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


def fake_encoder(calls):
    def encode(key):
        calls.append(key)
        return struct.pack("<16Q", *([len(calls)] * 16))

    return encode


@pytest.fixture(autouse=True)
def empty_cache():
    tensormap._CACHE.clear()
    yield
    tensormap._CACHE.clear()


def test_recipe_evaluates_to_the_encoders_arguments():
    args = [FakeTensor(0x7000_0000), None, None, 300, 0, 1024, 1040]
    key = tensormap.evaluate(RECIPE, args)
    assert key == ("f16", 0x7000_0000, (1024, 300), (2080,), (64, 128), 128)
    const = dict(RECIPE, dims=[["const", 64], ["arg", 3]])
    assert tensormap.evaluate(const, args)[2] == (64, 300)


def test_maps_are_encoded_once_per_distinct_key():
    calls = []
    enc = fake_encoder(calls)
    a = [FakeTensor(0x1000), None, None, 256, 0, 512, 512]
    first = tensormap.tensormap(tensormap.evaluate(RECIPE, a), "k", enc)
    again = tensormap.tensormap(tensormap.evaluate(RECIPE, a), "k", enc)
    assert first is again and len(calls) == 1
    moved = [FakeTensor(0x2000)] + a[1:]  # another tensor: another map
    assert tensormap.tensormap(tensormap.evaluate(RECIPE, moved), "k", enc) != first and len(calls) == 2
    bigger = a[:3] + [384] + a[4:]  # another extent: another map
    tensormap.tensormap(tensormap.evaluate(RECIPE, bigger), "k", enc)
    assert len(calls) == 3 and calls[2][2] == (512, 384)


@pytest.mark.parametrize("args, what", [
    ([FakeTensor(0x1008), None, None, 256, 0, 512, 512], "not 16-byte aligned"),
    ([FakeTensor(0x1000), None, None, 256, 0, 512, 516], "not a positive multiple of 16"),
])
def test_misaligned_maps_are_refused_with_the_kernel_named(args, what):
    with pytest.raises(LaunchError, match=f"kernel 'mm'.*{what}"):
        tensormap.tensormap(tensormap.evaluate(RECIPE, args), "mm", fake_encoder([]))


def test_an_empty_tensor_gets_a_zero_map_without_encoding():
    calls = []
    blob = tensormap.tensormap(tensormap.evaluate(RECIPE, [FakeTensor(0x1000), None, None, 256, 0, 0, 512]), "k",
                               fake_encoder(calls))
    assert blob == bytes(128) and calls == []


def test_packer_places_tensor_maps_after_the_scalars(monkeypatch):
    calls = []
    monkeypatch.setattr(tensormap, "encode_with_driver", fake_encoder(calls))
    sig = ["ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", {"tensormap": RECIPE},
           {"tensormap": dict(RECIPE, base=1, box=[64, 64])}]
    p = ArgPacker(sig, "mm")
    assert p.signature[7] == {"tensormap": RECIPE} and p.scalars == ("ptr",) * 3 + ("i32",) * 4
    a, b, c = FakeTensor(0x10000), FakeTensor(0x20000), FakeTensor(0x30000)
    p.pack([a, b, c, 256, 256, 256, 256])
    params = [p.params[i] for i in range(9)]
    assert params[:7] == [ctypes.addressof(p.storage) + 8 * i for i in range(7)]
    assert params[7:] == p.tensormaps.addresses and all(x % 64 == 0 for x in params[7:])
    assert params[8] - params[7] == 128
    assert [c[1] for c in calls] == [a.data_ptr(), b.data_ptr()] and calls[1][4] == (64, 64)
    assert p.tensormaps.contents(0) == struct.pack("<16Q", *[1] * 16)
    assert p.tensormaps.contents(1) == struct.pack("<16Q", *[2] * 16)
    p.pack([a, b, c, 256, 256, 256, 256])  # the same launch again: from the cache
    assert len(calls) == 2
    assert struct.unpack_from("<i", p.as_bytes(), 8 * 3)[0] == 256


def test_packer_reports_a_bad_tensor_map_as_a_launch_error(monkeypatch):
    monkeypatch.setattr(tensormap, "encode_with_driver", fake_encoder([]))
    p = ArgPacker(["ptr", "ptr", "ptr", "i32", "i32", "i32", "i32", {"tensormap": RECIPE}], "mm")
    args = [FakeTensor(0x1004), 0, 0, 256, 256, 256, 256]
    with pytest.raises(LaunchError):
        p.pack(args)
    err = p.explain(args, "mm")
    assert "kernel 'mm'" in str(err) and "16-byte aligned" in str(err)


@pytest.mark.parametrize("dtype, size", [("f8e4nv", 1), ("f8e5", 1), ("i8", 1), ("f32", 4), ("bf16", 2)])
def test_recipe_of_every_tile_type_scales_strides_by_its_bytes(dtype, size):
    """fp8, int8 and fp32 stages are filled by TMA too (the tf32 and fp8 wgmma pipelines): the row stride is
    in bytes of the element, and the box's row must fit the swizzle span."""
    args = [FakeTensor(0x7000_0000), None, None, 300, 0, 1024, 1040]
    key = tensormap.evaluate(dict(RECIPE, dtype=dtype, box=[128 // size, 64]), args)
    assert key[3] == (1040 * size,)
    tensormap.check(key, "k")
    with pytest.raises(LaunchError, match="does not fit swizzle"):
        tensormap.check(tensormap.evaluate(dict(RECIPE, dtype=dtype, box=[256 // size, 64]), args), "k")


@pytest.mark.parametrize("dtype, esize, box", [("f32", 4, [32, 128]), ("i8", 1, [128, 64]), ("f8e4nv", 1, [128, 64])])
def test_wider_and_narrower_elements_for_tma_stores(dtype, esize, box):
    """A TMA store's map (passes/tma_store.py) of an fp32, int8 or fp8 result: strides in bytes of its elements, one
    128-byte swizzle column wide."""
    recipe = dict(RECIPE, dtype=dtype, box=box)
    key = tensormap.evaluate(recipe, [FakeTensor(0x1000), None, None, 200, None, 96, 96])
    assert key == (dtype, 0x1000, (96, 200), (96 * esize,), tuple(box), 128)
    tensormap.check(key, "k")
    assert tensormap._elem(dtype)[1] in ("FLOAT32", "UINT8")
