"""What tables, labels and exports call a model — one function, from the model's path alone (a ledger
read on another machine has only the path it recorded; the data model, so every layer shares it).

- A model in a Hugging Face cache snapshot (``…/models--org--name/snapshots/<rev>/[<sub>/]<file>``) is
  ``org/name@<rev>`` — the revision shortened to 7 characters when it is a commit hash — with the
  folder below the snapshot (``/transformer``) and, for a file that is not the repo's model, its name.
- Elsewhere a directory's model — its index, a shard of its set, ``model.safetensors`` — is the
  directory's name (``Llama-3-8B``); another generic file in it is ``Llama-3-8B/model.fp16``
  (``consolidated``, ``adapter_model``, a dtype variant); a file with a name of its own is that name
  without its extension (``Llama-3-8B-Q4_K_M``).
"""
from __future__ import annotations

import os
import re
from typing import Iterable

HUB_REPO_PREFIXES = ("models--", "datasets--", "spaces--")  # the hub cache's repo folders
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SUFFIX = re.compile(r"(?:-\d{5}-of-\d{5})?(?:\.safetensors\.index(?:\.(?P<variant>[^.]+))?\.json|\.safetensors"
                     r"|\.gguf|\.bin|\.pt|\.pth|\.ckpt|\.onnx)$")
# Names writers give whatever model they save: they say nothing about which model it is.
_GENERIC = frozenset({"model", "consolidated", "adapter_model", "pytorch_model", "diffusion_pytorch_model",
                      "ggml-model", "tf_model", "flax_model"})


def model_display_name(path: str | os.PathLike[str]) -> str:
    """The model's name for people: ``Llama-3-8B``, ``org/name@1a2b3c4``, ``Llama-3-8B/model.fp16``,
    ``Llama-3-8B-Q4_K_M`` (see the module docstring); ``path`` is never opened or resolved."""
    text = os.path.normpath(os.fspath(path)) if os.fspath(path) else ""
    folder, name = os.path.split(text)
    m = _SUFFIX.search(name)
    stem = name[:m.start()] + (f".{m.group('variant')}" if m.group("variant") else "") if m else name
    directory_model = stem != name and stem.partition(".")[0] in _GENERIC
    where = _snapshot(text if stem == name else folder)  # no model suffix: a directory (or a foreign file)
    if where is not None:
        repo, inner = where
        if stem != name and stem != "model":
            inner = [*inner, stem]
        return "/".join([repo, *inner])
    if stem == name:
        return name or text
    if not directory_model:
        return stem
    folder_name = os.path.basename(folder) or folder or stem
    return folder_name if stem == "model" else f"{folder_name}/{stem}"


def hub_snapshot_of(path: str) -> tuple[str, str, list[str]] | None:
    """(the repo folder ``…/models--org--name``, the revision, the names below the revision) when
    ``path`` — as written, links not resolved — lies in a hub cache snapshot; else None."""
    parts = path.split(os.sep)
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith(HUB_REPO_PREFIXES):
            return os.sep.join(parts[:i]), parts[i + 1], parts[i + 2:]
    return None


def _snapshot(path: str) -> tuple[str, list[str]] | None:
    """(``org/name@rev``, the folders below the snapshot) when ``path`` lies in a hub cache snapshot."""
    found = hub_snapshot_of(path)
    if found is None:
        return None
    repo, rev, inner = found
    repo_id = os.path.basename(repo).split("--", 1)[1].replace("--", "/")
    return f"{repo_id}@{rev[:7] if _COMMIT.match(rev) else rev}", inner


def distinct_model_names(models: Iterable[tuple[str, str | None, int | None]]) -> dict[tuple[str, str | None], str]:
    """``(path, hash, files)`` → the model's name in a ledger, where two identities (two hashes) never
    share one: a name that several would share gets what tells them apart, the kind of file, how many
    files and a short hash (``tiny-llama-f16 [gguf, 1 file, #e461f0f6]``)."""
    by_name: dict[str, dict[tuple[str, str | None], int | None]] = {}
    for path, digest, files in models:
        by_name.setdefault(model_display_name(path) if path else "", {})[(path, digest)] = files
    out: dict[tuple[str, str | None], str] = {}
    for name, members in by_name.items():
        several = len({digest for _, digest in members if digest}) > 1
        for (path, digest), files in members.items():
            out[(path, digest)] = f"{name} [{_told_apart(path, digest, files)}]" if several and digest else name
    return out


def _told_apart(path: str, digest: str, files: int | None) -> str:
    kind = "gguf" if path.endswith(".gguf") else "safetensors" if path.endswith((".safetensors", ".json")) \
        else os.path.splitext(path)[1].lstrip(".") or "file"
    count = f"{files} file{'s' if files != 1 else ''}, " if files else ""
    return f"{kind}, {count}#{digest.rpartition(':')[2][:8]}"
