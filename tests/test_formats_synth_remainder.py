"""``synth --expert-remainder`` / ``--expert-stride``: the second write-up's layout (every expert blob
1152 B past a page boundary at alignment 32, page-multiple strides) and the tiny-model case (strides
off the page, placement INERT), read back through open_index and the inspect report, one file and
sharded, GGUF and safetensors."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from workbench.cli import main
from workbench.cli.commands.formats import index_report
from workbench.errors import ParamError
from workbench.expert import plan_placements
from workbench.formats import PAGE_SIZE
from workbench.formats.synth import write_synthetic
from workbench.formats.synth_dims import odd_width
from workbench.formats.synth_remainder import PAD_PREFIX

LAYOUTS = [("gguf", None), ("safetensors", "split"), ("safetensors", "stacked")]


def _write(tmp_path, fmt, expert_layout=None, shards=1, **kw):
    out = tmp_path / (f"m.{fmt}" if shards == 1 else "set")
    return write_synthetic(out, format=fmt, layout="moe", size=3 << 20, experts=8, alignment=32,
                           expert_layout=expert_layout, shards=shards, seed=3, **kw)


def _weights(index):
    return [b for b in index.blobs if "bias" not in b.name]  # gpt-oss biases: tiny, as in real files


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("fmt,expert_layout", LAYOUTS)
def test_every_blob_starts_at_the_remainder_with_page_strides(tmp_path, fmt, expert_layout, shards):
    index = _write(tmp_path, fmt, expert_layout, shards, expert_remainder=1152)
    assert len(index.files) == shards
    assert index.blobs and {b.offset % PAGE_SIZE for b in index.blobs} == {1152}
    assert all(off % PAGE_SIZE == 1152 for b in _weights(index) for off, _ in b.slices)
    assert all(b.stride % PAGE_SIZE == 0 for b in _weights(index))
    _, report = plan_placements(_weights(index))
    assert report.state == "ON", str(report)  # 1152 is a multiple of 64: the kernels stay aligned
    blobs = index_report(index, None)["experts"]["blobs"]
    assert {b["offset_in_page"] for b in blobs} == {1152}
    assert all(b["stride_page_multiple"] for b in blobs if "bias" not in b["name"])


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("fmt,expert_layout", [("gguf", None), ("safetensors", "split")])
def test_odd_strides_keep_the_first_offset_and_make_placement_inert(tmp_path, fmt, expert_layout, shards):
    index = _write(tmp_path, fmt, expert_layout, shards, expert_remainder=1152, expert_stride="odd")
    assert {b.offset % PAGE_SIZE for b in index.blobs} == {1152}
    assert all(b.stride % PAGE_SIZE for b in index.blobs)
    assert all(len({off % PAGE_SIZE for off, _ in b.slices}) > 1 for b in index.blobs)
    _, report = plan_placements(index.blobs)
    assert report.state == "INERT" and report.placed == 0
    assert "not a multiple of the 4096 B block" in report.reasons[0]
    assert not any(b["stride_page_multiple"] for b in index_report(index, None)["experts"]["blobs"])


def test_odd_strides_without_a_remainder(tmp_path):
    index = _write(tmp_path, "gguf", expert_stride="odd")
    assert all(b.stride % PAGE_SIZE for b in index.blobs)
    assert plan_placements(index.blobs)[1].state == "INERT"


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_pads_are_zero_tensors_and_every_other_tensor_keeps_its_bytes(tmp_path, fmt):
    plain = _write(tmp_path / "a", fmt)
    padded = _write(tmp_path / "b", fmt, shards=3, expert_remainder=1152)
    pads = [t for t in padded.tensors if t.name.startswith(PAD_PREFIX)]
    assert pads and all(0 < t.nbytes < PAGE_SIZE for t in pads)
    assert {t.name for t in padded.tensors} - {t.name for t in pads} == {t.name for t in plain.tensors}
    by_name = {t.name: t for t in padded.tensors}

    def read(t):
        with open(t.file, "rb") as f:
            f.seek(t.offset)
            return f.read(t.nbytes)

    assert all(read(t) == bytes(t.nbytes) for t in pads)
    for t in plain.tensors[::7]:
        assert read(t) == read(by_name[t.name]), t.name


def test_the_safetensors_library_and_gguf_py_read_the_padded_files(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    st = _write(tmp_path, "safetensors", expert_remainder=1152)
    with safetensors.safe_open(st.path, "numpy") as f:
        names = set(f.keys())
        pad = next(n for n in names if n.startswith(PAD_PREFIX))
        assert not f.get_tensor(pad).any()
    assert names == {t.name for t in st.tensors}
    from gguf import GGUFReader

    gg = _write(tmp_path, "gguf", expert_remainder=1152)
    reader = GGUFReader(gg.path)
    offsets = {t.name: int(t.data_offset) for t in reader.tensors}
    assert all(offsets[t.name] == t.offset for t in gg.tensors)


def test_the_cli_writes_the_write_ups_layout_and_inspect_shows_it(tmp_path):
    out = tmp_path / "m.gguf"
    res = CliRunner().invoke(main, ["synth", str(out), "--format", "gguf", "--layout", "moe", "--size", "3MiB",
                                    "--expert-remainder", "1152"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["inspect", str(out), "--no-hash"])
    assert "first-expert offset mod page: 1152" in res.output and "page multiple: 9/9" in res.output, res.output
    res = CliRunner().invoke(main, ["inspect", str(out), "--no-hash", "--json"])
    assert {b["offset_in_page"] for b in json.loads(res.output)["experts"]["blobs"]} == {1152}


@pytest.mark.parametrize("args,needle", [
    (["--layout", "dense", "--expert-remainder", "1152"], "applies to --layout moe"),
    (["--layout", "moe", "--expert-remainder", "1000"], "multiple of the GGUF alignment 32"),
    (["--layout", "moe", "--expert-remainder", "4096"], "must be in [0, 4096)"),
    (["--layout", "moe", "--expert-stride", "sideways"], "sideways"),
])
def test_bad_layout_requests_are_one_line(tmp_path, args, needle):
    res = CliRunner().invoke(main, ["synth", str(tmp_path / "m.gguf"), "--format", "gguf", "--size", "2MiB", *args])
    assert res.exit_code == 2 and needle in res.output, res.output
    assert not (tmp_path / "m.gguf").exists()


def test_odd_width_is_off_the_page_where_one_exists():
    for hidden, dtype in [(64, "Q4_0"), (256, "F16"), (1024, "Q4_0")]:
        w = odd_width(hidden, dtype)
        nbytes = w * hidden // 32 * 18 if dtype == "Q4_0" else w * hidden * 2
        assert nbytes % PAGE_SIZE and (dtype != "Q4_0" or w % 32 == 0)
    with pytest.raises(ValueError, match="whole number of pages"):
        odd_width(2048, "Q4_0")  # 2048 x 32 at Q4_0 is nine pages: every block-multiple width is


def test_write_synthetic_refuses_a_remainder_off_the_element_size(tmp_path):
    with pytest.raises(ParamError, match="multiple of the 8 B"):
        _write(tmp_path, "safetensors", expert_remainder=1156)
