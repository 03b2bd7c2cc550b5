"""``workbench synth`` (write a synthetic model) and ``workbench inspect`` (show a file's tensor index)."""
from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

import click

from workbench.cli import numbers
from workbench.formats.index import PAGE_SIZE, TensorIndex
from workbench.output.untrusted import for_terminal, terminal_lines


def _size(n: int) -> str:
    """A byte count in the largest binary unit it fills: ``512 B``, ``4.0 KiB``, ``1.5 MiB``, ``2.00 GiB``."""
    for unit, scale, digits in (("GiB", 1 << 30, 2), ("MiB", 1 << 20, 1), ("KiB", 1 << 10, 1)):
        if n >= scale:
            return f"{n / scale:,.{digits}f} {unit}"
    return f"{n} B"


@click.command()
@click.argument("out", type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["gguf", "safetensors"]), required=True)
@click.option("--layout", type=click.Choice(["dense", "moe"]), default="dense", show_default=True)
@click.option("--size", default=None, help="Target model size: 256MiB, 2GiB, 500MB, or bytes (required "
              "unless --shape names a real model: then its full size).")
@click.option("--experts", type=numbers.count(1, numbers.MAX_EXPERTS), default=8, show_default=True, help="Experts per MoE layer.")
@click.option("--alignment", type=numbers.count(1, 2**30), default=32, show_default=True,
              help="GGUF general.alignment (4096 puts every tensor on a page boundary).")
@click.option("--seed", type=numbers.seed(), default=0, show_default=True, help="Content seed (same seed, same bytes).")
@click.option("--expert-layout", type=click.Choice(["stacked", "split"]), default=None,
              help="MoE safetensors: one tensor per expert (split, the default) or gpt-oss style "
                   "experts.gate_up_proj/down_proj holding a layer's experts (stacked). GGUF is always stacked.")
@click.option("--dtype", type=click.Choice(["f16", "bf16"]), default="f16", show_default=True,
              help="safetensors: F16 matrices with F32 norms, or every tensor BF16 (as real checkpoints).")
@click.option("--shape", type=click.Choice(["llama3-8b"]), default=None,
              help="A real dense model's dimensions; with --size the layer count fills it (8GiB: 14 layers), "
                   "without it the whole model (llama3-8b: 32 layers, 16.06 GB in bf16, 4 shards).")
@click.option("--shards", type=numbers.count(1, numbers.MAX_SHARDS), default=None,
              help="Write a sharded model: N files (OUT is a directory, or a file name whose stem names "
                   "the shards), as save_pretrained / gguf-split lay them out.")
@click.option("--max-shard-size", default=None,
              help="Write a sharded model, a new file whenever the next tensor would pass this size (5GB).")
@click.option("--expert-remainder", type=numbers.count(0, 2**30), default=None,
              help="MoE: every expert blob starts this many bytes past a page boundary, in every file "
                   "(the measured family: 1152 at alignment 32); zero pad tensors go in front of blobs.")
@click.option("--expert-stride", type=click.Choice(["page", "odd"]), default="page", show_default=True,
              help="MoE: every expert a whole number of pages (real quantized checkpoints), or none "
                   "(a tiny test model's case: in-place O_DIRECT placement stays INERT).")
@click.option("--force", is_flag=True, help="Replace an existing model or ledger file at OUT.")
def synth(out: str, fmt: str, layout: str, size: str | None, experts: int, alignment: int, seed: int,
          expert_layout: str | None, dtype: str, shape: str | None, shards: int | None,
          max_shard_size: str | None, expert_remainder: int | None, expert_stride: str,
          force: bool) -> None:
    """Write a synthetic dense or MoE model (one file or a sharded set) with deterministic content."""
    from workbench.formats.synth import parse_size, write_synthetic

    if shards is None and max_shard_size is None and shape is not None and size is None:
        shards = 4  # the published checkpoint's layout
    t0 = time.perf_counter()
    index = write_synthetic(out, format=fmt, layout=layout, size=None if size is None else parse_size(size),
                            experts=experts, alignment=alignment, seed=seed, expert_layout=expert_layout,
                            dtype=dtype, shape=shape, shards=shards or 1,
                            max_shard_size=None if max_shard_size is None else parse_size(max_shard_size),
                            expert_remainder=expert_remainder, expert_stride=expert_stride, force=force)
    dt = time.perf_counter() - t0
    blobs = f", {len(index.blobs)} expert blobs" if index.blobs else ""
    files = f" in {len(index.files)} files" if index.sharded else ""
    click.echo(for_terminal(f"wrote {index.path}: {fmt} {layout}, {index.size:,} bytes ({_size(index.size)}){files}, "
                            f"{len(index)} tensors{blobs} in {dt:.2f} s ({index.size / max(dt, 1e-9) / 1e6:,.0f} MB/s)"))


@click.command()
@click.argument("model", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the whole index as JSON.")
@click.option("--no-hash", is_flag=True, help="Skip the whole-model hash (it reads every byte once).")
@click.option("--top", type=numbers.count(0, numbers.MAX_LISTED), default=20, show_default=True, help="Tensors to list (largest first).")
@click.option("--all", "show_all", is_flag=True, help="List every tensor, in file order.")
def inspect(model: str, as_json: bool, no_hash: bool, top: int, show_all: bool) -> None:
    """Show a model's tensor index: its files, tensors, alignment facts and MoE expert blobs.

    MODEL is a model file, a directory, a safetensors index or any shard of a set."""
    from workbench.formats import open_index

    index = open_index(model)
    digest = None
    if not no_hash:
        from workbench.io.identity import model_identity

        digest = model_identity(index).hash
    report = index_report(index, digest)
    report["left_out"] = left_out_report(model)  # beside the files resolved: what the directory held besides
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        click.echo(_summary(report, None if show_all else max(0, top)))


def index_report(index: TensorIndex, digest: str | None) -> dict[str, Any]:
    """The JSON form of an index: identity, files, alignment facts, tensors and expert blobs."""
    return {
        "path": index.path, "format": index.format, "size": index.size, "hash": digest,
        "data_offset": index.data_offset, "alignment": index.alignment, "n_tensors": len(index),
        "n_page_aligned": index.page_aligned, "page_size": PAGE_SIZE, "nbytes": index.nbytes,
        "index_file": index.index_file or None,
        "files": [{"path": f.path, "name": f.name, "size": f.size, "n_tensors": f.n_tensors,
                   "data_offset": f.data_offset, "data_start": f.data_start, "data_end": f.data_end,
                   "alignment": f.alignment} for f in index.files],
        "tensors": [{"name": t.name, "file": os.path.basename(t.file), "offset": t.offset, "nbytes": t.nbytes,
                     "dtype": t.dtype, "shape": list(t.shape)} for t in index.sorted_by_offset()],
        "experts": {"n_blobs": len(index.blobs), "blobs": [_blob_report(b) for b in index.blobs]},
        "notes": list(index.notes),
        "metadata": dict(index.metadata),
    }


def left_out_report(model: str) -> list[dict[str, str]]:
    """The weights files beside the model that it does not include, each with why (a directory's; a
    file named on its own leaves nothing out): ``[{"name": "model.fp16.safetensors", "why": …}]``."""
    from workbench.formats.resolve import resolve_model

    return [{"name": name, "why": why} for name, why in resolve_model(model).left_out]


def _blob_report(b) -> dict[str, Any]:  # noqa: ANN001 - ExpertBlob
    return {"layer": b.layer, "name": b.name, "file": os.path.basename(b.file), "n_experts": b.n_experts, "stride": b.stride,
            "contiguous": b.contiguous, "offset": b.offset, "nbytes": b.nbytes,
            "offset_in_page": b.offset % PAGE_SIZE, "stride_page_multiple": b.stride > 0 and b.stride % PAGE_SIZE == 0,
            "tensors": list(b.tensors)}


def _summary(r: dict[str, Any], top: int | None) -> str:
    files = r["files"]
    lines = [f"{r['path']}: {r['format']}, {r['size']:,} bytes ({_size(r['size'])})"
             + (f" in {len(files)} files" if len(files) > 1 else ""),
             f"  hash        {r['hash'] or '(skipped)'}",
             f"  tensors     {r['n_tensors']}, {r['nbytes']:,} bytes of data"
             + (f" from offset {r['data_offset']:,}" if len(files) == 1 else ""),
             f"  alignment   {r['alignment']}; {r['n_page_aligned']}/{r['n_tensors']} tensor offsets "
             f"page-aligned ({r['page_size']} B)"]
    by_dtype: Counter[str] = Counter()
    for t in r["tensors"]:
        by_dtype[t["dtype"]] += t["nbytes"]
    lines.append("  dtypes      " + ", ".join(f"{d} {_size(n)}" for d, n in by_dtype.most_common()))
    blobs = r["experts"]["blobs"]
    if blobs:
        lines.append(_blob_summary(blobs))
    lines += [f"  note        {n}" for n in r["notes"]]
    if len(files) > 1 or r["index_file"] or r.get("left_out"):
        lines += _files_table(files, r["index_file"])
    lines += [f"  left out    {x['name']}: {x['why']}" for x in r.get("left_out") or ()]
    lines += _tensor_table(r["tensors"], top, len(files) > 1)
    return terminal_lines(lines)  # file and tensor names are the file's text: shown, never obeyed


def _files_table(files: list[dict[str, Any]], index_file: str | None) -> list[str]:
    width = max(len(f["name"]) for f in files)
    out = [f"  files{'' if not index_file else f' (index {os.path.basename(index_file)})'}"]
    for f in files:
        out.append(f"    {f['name']:<{width}}  {_size(f['size']):>10}  {f['n_tensors']:>5} tensors  "
                   f"data [{f['data_start']:,}, {f['data_end']:,})")
    return out


def _tensor_table(tensors: list[dict[str, Any]], top: int | None, with_file: bool) -> list[str]:
    """Every tensor in file order (``top`` None), else the ``top`` largest, biggest first."""
    shown = tensors if top is None else sorted(tensors, key=lambda t: -t["nbytes"])[:top]
    if not shown:
        return []
    name_w = min(60, max(len(t["name"]) for t in shown))
    head = "tensors, in file order" if top is None else f"largest {len(shown)} of {len(tensors)} tensors"
    out = [f"  {head}" + ("" if top is None or len(shown) == len(tensors) else " (--all lists every one)")]
    for t in shown:
        where = f"{t['file']} @ " if with_file else "@ "
        name = t["name"] if len(t["name"]) <= name_w else t["name"][: name_w - 1] + "…"
        out.append(f"    {name:<{name_w}}  {t['dtype']:<6} {str(tuple(t['shape'])):<22} "
                   f"{_size(t['nbytes']):>10}  {where}{t['offset']:,}")
    return out


def _blob_summary(blobs: list[dict[str, Any]]) -> str:
    layers = {b["layer"] for b in blobs}
    experts = sorted({b["n_experts"] for b in blobs})
    strides = sorted({b["stride"] for b in blobs})
    in_page = sorted({b["offset_in_page"] for b in blobs})
    page_mult = sum(b["stride_page_multiple"] for b in blobs)
    return (f"  experts     {len(blobs)} blobs over {len(layers)} layers, "
            f"{'/'.join(map(str, experts))} experts each; contiguous {sum(b['contiguous'] for b in blobs)}"
            f"/{len(blobs)}; strides {', '.join(f'{s:,}' for s in strides[:4])}"
            f"{' ...' if len(strides) > 4 else ''} B (page multiple: {page_mult}/{len(blobs)}); "
            f"first-expert offset mod page: {', '.join(map(str, in_page[:4]))}{' ...' if len(in_page) > 4 else ''}")
