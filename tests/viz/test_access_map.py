"""The sanitizer's access map view: colours by the program that wrote each element, outlines what a finding
names (tests/viz/test_magic.py checks that %%kernel --sanitize shows it)."""
import re

import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import SanitizerError
from kernellab.viz.access_map import access_map_html, program_color


@kl.jit
def blocks(x_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, offs.to(tl.float32))


@kl.jit
def overlapping(x_ptr, BLOCK: tl.constexpr):
    # each program writes its block and the first element of the next one: a race with that program
    r = tl.arange(0, 2 * BLOCK)
    offs = tl.program_id(0) * BLOCK + r
    tl.store(x_ptr + offs, tl.program_id(0).to(tl.float32) + offs * 0.0, mask=(r <= BLOCK) & (offs < 4 * BLOCK))


def _report(kernel, n=64, block=16):
    x = torch.zeros(n)
    try:
        kernel[(n // block,)](x, BLOCK=block, sanitize=True)
    except SanitizerError as e:
        return e.report
    return list(kernel.cache.values())[-1].sanitizer_report


def test_each_program_gets_its_colour():
    report = _report(blocks)
    assert report.ok
    html = access_map_html(report)
    # 64 elements, 4 programs of 16: four colours, each 16 times, no outline
    fills = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})"', html)
    assert len(fills) == 64
    assert [fills.count(program_color(p)) for p in range(4)] == [16, 16, 16, 16]
    assert 'stroke="#d62728"' not in html and "no findings" in html


def test_a_race_is_outlined_where_it_happens():
    report = _report(overlapping)
    assert not report.ok
    html = access_map_html(report)
    flagged = re.findall(r'<rect [^>]*stroke="#d62728"[^>]*><title>element (\d+)', html)
    assert flagged and {int(e) for e in flagged} <= {16, 32, 48}
    assert re.search(r"\d+ findings?", html)


def test_large_arguments_show_a_window():
    report = _report(blocks, n=8192, block=1024)
    html = access_map_html(report, columns=64, max_rows=8)
    assert len(re.findall(r"<rect ", html)) == 512
    assert "the first 512 of 8192 elements" in html


def test_the_view_draws_a_matrix_with_its_row_length():
    """AccessMapView(report, columns=N) lays a 2-D argument out as its rows (the notebooks draw M x N this way)."""
    from kernellab.viz.access_map import AccessMapView

    report = blocks[(4,)](torch.zeros(64), BLOCK=16, sanitize=True).sanitizer_report
    html = AccessMapView(report, columns=16)._repr_mimebundle_()["text/html"]
    ys = {int(y) for y in re.findall(r'<rect x="\d+" y="(\d+)"', html)}
    assert len(ys) == 4 and 'width="224"' in html  # 64 elements in 4 rows of 16 cells of 14 px
