"""The sanitizer's access map view: colours by the program that wrote each element, outlines what a finding
names (tests/viz/test_magic.py checks that %%kernel --sanitize shows it)."""
import re

import torch

import kernellab as kl
import kernellab.language as tl
from kernellab.errors import SanitizerError
from kernellab.viz.access_map import CELL, access_map_html, program_color


def _covered(html: str, fill: str, cls: str = "e") -> int:
    """Elements drawn in `fill`: the map draws runs of equal elements as one rectangle CELL px high."""
    return sum(int(w) // CELL for w in re.findall(rf'<rect class="{cls}" [^>]*width="(\d+)"[^>]*fill="{fill}"', html))


def _spans(titles) -> list[int]:
    """The elements of titles "element N" / "elements A..B"."""
    out = []
    for t in titles:
        a, _, b = t.partition("..")
        out += list(range(int(a), int(b or a) + 1))
    return out


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
    # 64 elements, 4 programs of 16: four colours, each over 16 elements, no outline; one rectangle per program's
    # run of elements (not one per element: a map of 3072 elements stays small)
    assert [_covered(html, program_color(p)) for p in range(4)] == [16, 16, 16, 16]
    assert len(re.findall(r'<rect class="e"', html)) == 4
    assert 'stroke="#d62728"' not in html and "no findings" in html


def test_a_race_is_outlined_where_it_happens():
    report = _report(overlapping)
    assert not report.ok
    html = access_map_html(report)
    flagged = re.findall(r'<rect [^>]*stroke="#d62728"[^>]*><title>element (\d+)', html)
    assert flagged and {int(e) for e in flagged} <= {16, 32, 48}
    assert re.search(r"\d+ findings?", html)


def test_a_large_argument_is_drawn_whole():
    """8192 elements in 8 rows of 64 cells: a cell per 16 elements, all 8 programs on the map (the first 512
    elements alone showed only program 0 of a matmul's or a softmax's many)."""
    report = _report(blocks, n=8192, block=1024)
    html = access_map_html(report, columns=64, max_rows=8)
    assert [_covered(html, program_color(p)) for p in range(8)] == [64] * 8
    assert len(re.findall(r'<rect class="e"', html)) == 8  # a run a row
    assert "a cell per 16 elements" in html and "elements 1024..2047: written by program 1" in html


def test_elements_only_read_take_the_readers_colour_pale():
    """An input nobody writes is drawn in its readers' colours (pale), not as a blank sheet."""
    x, out = torch.randn(100), torch.full((100,), float("nan"))
    report = scale_masked[(4,)](x, out, 100, BLOCK=32, sanitize=True).sanitizer_report
    html = access_map_html(report, columns=32)
    pale = re.findall(r'<rect class="e" [^>]*width="(\d+)"[^>]*fill="(#[0-9a-f]{6})" fill-opacity="0.35"', html)
    assert sorted((int(w) // CELL, f) for w, f in pale) == sorted([(32, program_color(p)) for p in range(3)]
                                                                   + [(4, program_color(3))])
    assert "only read, by 4 programs" in html


def test_the_view_draws_a_matrix_with_its_row_length():
    """AccessMapView(report, columns=N) lays a 2-D argument out as its rows (the notebooks draw M x N this way)."""
    from kernellab.viz.access_map import AccessMapView

    report = blocks[(4,)](torch.zeros(64), BLOCK=16, sanitize=True).sanitizer_report
    html = AccessMapView(report, columns=16)._repr_mimebundle_()["text/html"]
    ys = {int(y) for y in re.findall(r'<rect class="e" x="\d+" y="(\d+)"', html.split("per program")[0])}
    assert len(ys) == 4 and 'width="224"' in html  # 64 elements in 4 rows of 16 cells of 14 px


@kl.jit
def scale_masked(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=mask), mask=mask)


def test_each_program_records_what_it_read_and_wrote_and_its_masked_lanes():
    """The interpreter knows per program and lane what a masked access pointed at: 100 elements in blocks of 32,
    so the last program reads and writes 4 and masks off 28 lanes past the end (offsets 100..127)."""
    x, out = torch.randn(100), torch.full((100,), float("nan"))
    report = scale_masked[(4,)](x, out, 100, BLOCK=32, sanitize=True).sanitizer_report
    assert sorted(report.programs) == [0, 1, 2, 3]
    for p in range(3):
        xa, oa = report.programs[p]["x_ptr"], report.programs[p]["out_ptr"]
        assert xa.read.tolist() == list(range(32 * p, 32 * p + 32)) and not len(xa.written) and not len(xa.masked)
        assert oa.written.tolist() == list(range(32 * p, 32 * p + 32)) and not len(oa.read)
    last = report.programs[3]
    assert last["x_ptr"].read.tolist() == [96, 97, 98, 99] and last["out_ptr"].written.tolist() == [96, 97, 98, 99]
    assert last["x_ptr"].masked.tolist() == list(range(100, 128)) == last["out_ptr"].masked.tolist()


def test_the_per_program_map_marks_masked_lanes_outside_the_argument():
    from kernellab.viz.access_map import READ, WRITTEN, program_map_html, programs_html

    x, out = torch.randn(100), torch.full((100,), float("nan"))
    report = scale_masked[(4,)](x, out, 100, BLOCK=32, sanitize=True).sanitizer_report
    last = program_map_html(report, 3, columns=32)
    # program 3: the row of elements 96..127: 4 read (x) / written (out), 28 masked lanes past the end, outlined red
    assert _covered(last, READ) == 4 and _covered(last, WRITTEN) == 4
    outside = re.findall(r'<rect class="m"[^>]*stroke="#d62728"[^>]*><title>elements? ([\d.]+)', last)
    assert sorted(_spans(outside)) == sorted(list(range(100, 128)) * 2)
    assert "28 masked-off lanes" in last and "28 of them outside the argument" in last
    first = program_map_html(report, 0, columns=32)
    assert _covered(first, READ) == 32 and 'class="m"' not in first
    # the picker opens on the program whose mask matters, and every program has a panel
    html = programs_html(report, columns=32)
    assert re.search(r'id="klam\d+p3" class="kl-am-radio" checked', html)
    assert len(re.findall(r'class="kl-am-prog klam\d+p\d"', html)) == 4 and html.count("⚠") == 1 + 1  # + legend


def test_the_view_shows_the_programs_too():
    from kernellab.viz.access_map import AccessMapView

    x, out = torch.randn(100), torch.full((100,), float("nan"))
    report = scale_masked[(4,)](x, out, 100, BLOCK=32, sanitize=True).sanitizer_report
    html = AccessMapView(report, columns=32)._repr_mimebundle_()["text/html"]
    assert "per program" in html and "kl-am-radio" in html


def test_a_row_kernels_map_stays_small():
    """Runs, not elements: 7 programs of a 1024-wide masked row over 2 arguments drew ~30k rectangles (megabytes in
    the notebook); the whole view now stays well under 200 kB."""
    from kernellab.viz.access_map import AccessMapView

    x, out = torch.randn(6248), torch.full((6248,), float("nan"))
    report = scale_masked[(7,)](x, out, 6248, BLOCK=1024, sanitize=True).sanitizer_report
    html = AccessMapView(report)._repr_mimebundle_()["text/html"]
    assert len(html) < 200_000, len(html)
    assert "2 of them outside" not in html and "920 of them outside the argument" in html
