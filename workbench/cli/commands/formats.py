"""``workbench synth`` (write a synthetic model) and ``workbench inspect`` (show a file's tensor index)."""
from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import click

from workbench.formats.index import PAGE_SIZE, TensorIndex


def _size(n: int) -> str:
    """A byte count in the largest binary unit it fills: ``512 B``, ``4.0 KiB``, ``1.5 MiB``, ``2.00 GiB``."""
    for unit, scale, digits in (("GiB", 1 << 30, 2), ("MiB", 1 << 20, 1), ("KiB", 1 << 10, 1)):
        if n >= scale:
            return f"{n / scale:,.{digits}f} {unit}"
    return f"{n} B"


@click.command()
@click.argument("out", type=click.Path(dir_okay=False, writable=True))
@click.option("--format", "fmt", type=click.Choice(["gguf", "safetensors"]), required=True)
@click.option("--layout", type=click.Choice(["dense", "moe"]), default="dense", show_default=True)
@click.option("--size", required=True, help="Target file size: 256MiB, 2GiB, 500MB, or bytes.")
@click.option("--experts", type=int, default=8, show_default=True, help="Experts per MoE layer.")
@click.option("--alignment", type=int, default=32, show_default=True,
              help="GGUF general.alignment (4096 puts every tensor on a page boundary).")
@click.option("--seed", type=int, default=0, show_default=True, help="Content seed (same seed, same bytes).")
@click.option("--expert-layout", type=click.Choice(["stacked", "split"]), default=None,
              help="MoE safetensors: one tensor per expert (split, the default) or gpt-oss style "
                   "experts.gate_up_proj/down_proj holding a layer's experts (stacked). GGUF is always stacked.")
@click.option("--dtype", type=click.Choice(["f16", "bf16"]), default="f16", show_default=True,
              help="safetensors: F16 matrices with F32 norms, or every tensor BF16 (as real checkpoints).")
@click.option("--shape", type=click.Choice(["llama3-8b"]), default=None,
              help="A real dense model's dimensions (the layer count fills --size: 8GiB gives 14 layers, "
                   "129 tensors); default: dimensions from a ladder of real sizes.")
def synth(out: str, fmt: str, layout: str, size: str, experts: int, alignment: int, seed: int,
          expert_layout: str | None, dtype: str, shape: str | None) -> None:
    """Write a synthetic dense or MoE model file with deterministic pseudo-random content."""
    from workbench.formats.synth import parse_size, write_synthetic

    t0 = time.perf_counter()
    index = write_synthetic(out, format=fmt, layout=layout, size=parse_size(size), experts=experts,
                            alignment=alignment, seed=seed, expert_layout=expert_layout, dtype=dtype,
                            shape=shape)
    dt = time.perf_counter() - t0
    blobs = f", {len(index.blobs)} expert blobs" if index.blobs else ""
    click.echo(f"wrote {index.path}: {fmt} {layout}, {index.size:,} bytes ({_size(index.size)}), "
               f"{len(index)} tensors{blobs} in {dt:.2f} s ({index.size / max(dt, 1e-9) / 1e6:,.0f} MB/s)")


@click.command()
@click.argument("file", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the whole index as JSON.")
@click.option("--no-hash", is_flag=True, help="Skip the whole-file hash (it reads every byte once).")
def inspect(file: str, as_json: bool, no_hash: bool) -> None:
    """Show a model file's tensor index: tensors, alignment facts and MoE expert blobs."""
    from workbench.formats import open_index

    index = open_index(file)
    digest = None
    if not no_hash:
        from workbench.io.identity import file_identity

        digest = file_identity(index.path).hash
    report = index_report(index, digest)
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        click.echo(_summary(report))


def index_report(index: TensorIndex, digest: str | None) -> dict[str, Any]:
    """The JSON form of an index: identity, alignment facts, tensors and expert blobs."""
    return {
        "path": index.path, "format": index.format, "size": index.size, "hash": digest,
        "data_offset": index.data_offset, "alignment": index.alignment, "n_tensors": len(index),
        "n_page_aligned": index.page_aligned, "page_size": PAGE_SIZE, "nbytes": index.nbytes,
        "tensors": [{"name": t.name, "offset": t.offset, "nbytes": t.nbytes, "dtype": t.dtype,
                     "shape": list(t.shape)} for t in index.tensors],
        "experts": {"n_blobs": len(index.blobs), "blobs": [_blob_report(b) for b in index.blobs]},
        "metadata": dict(index.metadata),
    }


def _blob_report(b) -> dict[str, Any]:  # noqa: ANN001 - ExpertBlob
    return {"layer": b.layer, "name": b.name, "n_experts": b.n_experts, "stride": b.stride,
            "contiguous": b.contiguous, "offset": b.offset, "nbytes": b.nbytes,
            "offset_in_page": b.offset % PAGE_SIZE, "stride_page_multiple": b.stride > 0 and b.stride % PAGE_SIZE == 0,
            "tensors": list(b.tensors)}


def _summary(r: dict[str, Any]) -> str:
    lines = [f"{r['path']}: {r['format']}, {r['size']:,} bytes ({_size(r['size'])})",
             f"  hash        {r['hash'] or '(skipped)'}",
             f"  tensors     {r['n_tensors']}, {r['nbytes']:,} bytes of data from offset {r['data_offset']:,}",
             f"  alignment   {r['alignment']}; {r['n_page_aligned']}/{r['n_tensors']} tensor offsets "
             f"page-aligned ({r['page_size']} B)"]
    by_dtype: Counter[str] = Counter()
    for t in r["tensors"]:
        by_dtype[t["dtype"]] += t["nbytes"]
    lines.append("  dtypes      " + ", ".join(f"{d} {_size(n)}" for d, n in by_dtype.most_common()))
    blobs = r["experts"]["blobs"]
    if blobs:
        lines.append(_blob_summary(blobs))
    return "\n".join(lines)


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
