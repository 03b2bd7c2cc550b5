"""``workbench synth`` and ``workbench inspect`` through click's CliRunner."""
from __future__ import annotations

import json

import pytest
import xxhash
from click.testing import CliRunner

from workbench.cli import main
from workbench.formats import open_index


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_synth_then_inspect_json(tmp_path, fmt):
    out = tmp_path / f"m.{fmt}"
    res = invoke("synth", str(out), "--format", fmt, "--layout", "moe", "--size", "1MiB", "--experts", "4",
                 "--alignment", "64", "--seed", "5")
    assert res.exit_code == 0, res.output
    assert str(out) in res.output and "expert blobs" in res.output
    res = invoke("inspect", str(out), "--json")
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    index = open_index(out)
    assert report["path"] == str(out) and report["format"] == fmt and report["size"] == out.stat().st_size
    assert report["hash"] == "xxh3_128:" + xxhash.xxh3_128(out.read_bytes()).hexdigest()
    assert report["n_tensors"] == len(report["tensors"]) == len(index)
    assert report["data_offset"] == index.data_offset and report["alignment"] == index.alignment
    assert report["n_page_aligned"] == sum(t["offset"] % 4096 == 0 for t in report["tensors"])
    assert report["tensors"][0] == {"name": index.tensors[0].name, "offset": index.tensors[0].offset,
                                    "nbytes": index.tensors[0].nbytes, "dtype": index.tensors[0].dtype,
                                    "shape": list(index.tensors[0].shape), "file": out.name}
    assert [f["name"] for f in report["files"]] == [out.name] and report["index_file"] is None
    blobs = report["experts"]["blobs"]
    assert len(blobs) == len(index.blobs) > 0
    for b, blob in zip(blobs, index.blobs):
        assert (b["layer"], b["name"], b["n_experts"], b["stride"], b["contiguous"]) == \
            (blob.layer, blob.name, 4, blob.stride, blob.contiguous)


def test_inspect_human_summary(tmp_path):
    out = tmp_path / "m.gguf"
    assert invoke("synth", str(out), "--format", "gguf", "--layout", "moe", "--size", "1MiB").exit_code == 0
    res = invoke("inspect", str(out), "--no-hash")
    assert res.exit_code == 0, res.output
    index = open_index(out)
    assert f"{len(index)}," in res.output and "alignment   32" in res.output
    assert f"{len(index.blobs)} blobs" in res.output and "(skipped)" in res.output
    lines = res.output.splitlines()
    largest = max(index.tensors, key=lambda t: t.nbytes)
    shown = min(20, len(index))
    assert f"largest {shown} of {len(index)} tensors" in res.output and largest.name in lines[7]
    assert len(lines) == 6 + 1 + shown  # summary, heading, the largest (20 at most)
    everything = invoke("inspect", str(out), "--no-hash", "--all").output.splitlines()
    assert everything[-len(index):] == [line for line in everything if line.startswith("    ")]
    assert [line.split()[0] for line in everything[-len(index):]] == [t.name for t in index.sorted_by_offset()]


@pytest.mark.parametrize("content", [b"", b"GGUF" + bytes(20), b"not a model at all, just text\n"])
def test_inspect_bad_file_exit_2_one_line(tmp_path, content):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    res = invoke("inspect", str(bad))
    assert res.exit_code == 2
    assert res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and str(bad) in res.stderr
    assert "Traceback" not in res.stderr


def test_inspect_missing_file(tmp_path):
    res = invoke("inspect", str(tmp_path / "missing.gguf"), "--json")
    assert res.exit_code == 2 and "no such file" in res.stderr


@pytest.mark.parametrize("args", [["--size", "lots"], ["--size", "1MiB", "--alignment", "48"],
                                  ["--size", "100"]])
def test_synth_bad_parameters_exit_2(tmp_path, args):
    res = invoke("synth", str(tmp_path / "x.gguf"), "--format", "gguf", "--layout", "dense", *args)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.gguf").exists()


def test_synth_layout_defaults_to_dense_and_sizes_use_a_unit_that_fits(tmp_path):
    out = tmp_path / "small.gguf"
    res = invoke("synth", str(out), "--format", "gguf", "--size", "128KiB")
    assert res.exit_code == 0, res.output
    assert "gguf dense" in res.output and " KiB)" in res.output and "MiB" not in res.output
    summary = invoke("inspect", str(out), "--no-hash").output
    assert "0.0 MiB" not in summary and " KiB" in summary
    from workbench.cli.commands.formats import _size

    assert [_size(n) for n in (512, 4096, 3 << 20, 5 << 30)] == ["512 B", "4.0 KiB", "3.0 MiB", "5.00 GiB"]


def test_synth_bf16_and_a_refused_shape(tmp_path):
    out = tmp_path / "m.safetensors"
    res = invoke("synth", str(out), "--format", "safetensors", "--layout", "dense", "--size", "1MiB", "--dtype", "bf16")
    assert res.exit_code == 0, res.output
    assert {t.dtype for t in open_index(out)} == {"BF16"}
    res = invoke("synth", str(tmp_path / "y.safetensors"), "--format", "safetensors", "--layout", "dense",
                 "--size", "1MiB", "--shape", "llama3-8b")
    assert res.exit_code == 2 and "too small for a llama3-8b" in res.stderr
