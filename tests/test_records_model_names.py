"""One function names a model for tables, labels and exports (issue 23 §1): a directory's model by the
directory, a Hugging Face cache snapshot as ``org/name@rev`` — never ``model``, a revision hash or
``model.safetensors.index.json`` for every sharded model."""
from __future__ import annotations

import pytest

from workbench.records import model_display_name

REV = "0123456789abcdef0123456789abcdef01234567"
HUB = f"/cache/hub/models--meta-llama--Llama-3-8B/snapshots/{REV}"


@pytest.mark.parametrize("path, name", [
    ("/m/Llama-3-8B/model.safetensors", "Llama-3-8B"),
    ("/m/Llama-3-8B/model.safetensors.index.json", "Llama-3-8B"),
    ("/m/Llama-3-8B/model-00002-of-00004.safetensors", "Llama-3-8B"),
    ("/m/Llama-3-8B", "Llama-3-8B"),
    ("/m/Qwen2.5-7B", "Qwen2.5-7B"),  # a dot in a directory's name is not an extension
    ("/m/Llama-3-8B/model.fp16.safetensors", "Llama-3-8B/model.fp16"),
    ("/m/Llama-3-8B/model.fp16-00001-of-00002.safetensors", "Llama-3-8B/model.fp16"),
    ("/m/Llama-3-8B/model.safetensors.index.fp16.json", "Llama-3-8B/model.fp16"),
    ("/m/Llama-3-8B/adapter_model.safetensors", "Llama-3-8B/adapter_model"),
    ("/m/Mistral-7B/consolidated.safetensors", "Mistral-7B/consolidated"),
    ("/m/gguf/Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-Q4_K_M"),
    ("/m/gguf/Llama-3-70B-Q4_K_M-00001-of-00002.gguf", "Llama-3-70B-Q4_K_M"),
    ("data/models/demo-dense-1MiB.gguf", "demo-dense-1MiB"),
    (f"{HUB}/model.safetensors.index.json", "meta-llama/Llama-3-8B@0123456"),
    (f"{HUB}/model.safetensors", "meta-llama/Llama-3-8B@0123456"),
    (f"{HUB}/model-00001-of-00004.safetensors", "meta-llama/Llama-3-8B@0123456"),
    (HUB, "meta-llama/Llama-3-8B@0123456"),
    (f"{HUB}/transformer/model-00001-of-00002.safetensors", "meta-llama/Llama-3-8B@0123456/transformer"),
    (f"{HUB}/model.fp16.safetensors", "meta-llama/Llama-3-8B@0123456/model.fp16"),
    ("/c/models--TheBloke--X-GGUF/snapshots/main/x.Q4_K_M.gguf", "TheBloke/X-GGUF@main/x.Q4_K_M"),
    ("/c/models--gpt2/snapshots/" + REV + "/model.safetensors", "gpt2@0123456"),
])
def test_display_names(path, name):
    assert model_display_name(path) == name
