"""The evidence corpus: loading patterns an engine really uses, and fakes that only look like loading.

``python corpus_engine.py PATTERN MODEL [COPY]`` does what PATTERN says to MODEL (a safetensors file, a
GGUF file, or a set's directory for the ``*_set`` patterns) and prints ``loaded``, then idles until it is
killed (a real engine serves after loading). :data:`REAL` must be credited (``bytes-read`` or
``mapping-touched``, a GB/s), :data:`FAKE` never; ``tests/test_evidence_corpus.py`` runs each warm and
cold, and ``benchmarks/figures/evidence_corpus.py`` prints the table docs/engines.md shows."""
import ctypes
import mmap
import os
import struct
import sys
import time

CHUNK = 1 << 20


def _size(path):
    return os.stat(path).st_size


def read(path, _):
    with open(path, "rb") as fh:
        while fh.read(CHUNK):
            pass


def pread_threads(path, _):
    from concurrent.futures import ThreadPoolExecutor

    fd = os.open(path, os.O_RDONLY)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda at: os.pread(fd, CHUNK, at), range(0, _size(path), CHUNK)))
    os.close(fd)


def safe_open_numpy(path, _):
    from safetensors import safe_open

    with safe_open(path, framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    assert tensors


def load_file_numpy(path, _):
    from safetensors.numpy import load_file

    assert load_file(path)


def load_file_torch(path, _):
    from safetensors.torch import load_file

    tensors = load_file(path)
    assert sum(int(t.reshape(-1).view(-1).numel()) for t in tensors.values())
    for t in tensors.values():  # used once, as a CPU engine's warm-up would: the lazy mapping is touched
        t.float().sum()


def numpy_memmap_copy(path, _):
    import numpy as np

    copy = np.array(np.memmap(path, mode="r"))
    assert copy.size


def gguf_reader(path, _):
    import numpy as np
    from gguf import GGUFReader

    copies = [np.array(t.data) for t in GGUFReader(path).tensors]
    assert copies


def child_loader(path, _):
    import subprocess

    subprocess.run([sys.executable, __file__, "read", path], check=True, env={**os.environ, "CORPUS_CHILD": "1"})


def forked_workers_touch_a_shared_mapping(path, _):
    """The parent maps the file; two forked workers copy a half each (a fork-based worker pool)."""
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    half, pids = len(m) // 2, []
    for lo, hi in ((0, half), (half, len(m))):
        pid = os.fork()
        if pid == 0:
            bytes(m[lo:hi])
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        assert os.waitpid(pid, 0)[1] == 0


def closed_before_marker(path, _):
    read(path, None)
    time.sleep(0.3)


def odirect(path, _):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, CHUNK)
    for at in range(0, _size(path), CHUNK):
        os.preadv(fd, [buf], at)
    os.close(fd)


def io_uring(path, _):
    """IORING_OP_READ through raw system calls (no liburing binding needed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    ring = libc.syscall(425, 8, params)  # io_uring_setup
    if ring < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    sq_entries, cq_entries = struct.unpack_from("<II", params, 0)
    sq_head, sq_tail, sq_mask, _, _, _, sq_array = struct.unpack_from("<7I", params, 40)
    cq_head, cq_tail, cq_mask, _, _, cqes = struct.unpack_from("<6I", params, 80)
    flags, prot = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), mmap.PROT_READ | mmap.PROT_WRITE
    sq = mmap.mmap(ring, sq_array + 4 * sq_entries, flags, prot, offset=0)
    cq = mmap.mmap(ring, cqes + 16 * cq_entries, flags, prot, offset=0x8000000)
    sqes = mmap.mmap(ring, 64 * sq_entries, flags, prot, offset=0x10000000)
    fd = os.open(path, os.O_RDONLY)
    buf = (ctypes.c_char * CHUNK)()
    for at in range(0, _size(path), CHUNK):
        tail = struct.unpack_from("<I", sq, sq_tail)[0]
        slot = tail & struct.unpack_from("<I", sq, sq_mask)[0]
        sqes[64 * slot:64 * slot + 64] = struct.pack("<BBHiQQIIQ24x", 22, 0, 0, fd, at, ctypes.addressof(buf),
                                                       CHUNK, 0, at)
        struct.pack_into("<I", sq, sq_array + 4 * slot, slot)
        struct.pack_into("<I", sq, sq_tail, tail + 1)
        if libc.syscall(426, ring, 1, 1, 1, None, 0) < 0:  # io_uring_enter(submit 1, wait 1, GETEVENTS)
            raise OSError(ctypes.get_errno(), "io_uring_enter")
        head = struct.unpack_from("<I", cq, cq_head)[0]
        _, res, _ = struct.unpack_from("<QiI", cq, cqes + 16 * (head & struct.unpack_from("<I", cq, cq_mask)[0]))
        if res < 0:
            raise OSError(-res, "io_uring read")
        struct.pack_into("<I", cq, cq_head, head + 1)
    os.close(fd)


def mmap_shards_in_turn(directory, _):
    """Each shard of a set mapped, copied out and unmapped before the next (a streaming loader)."""
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            with open(os.path.join(directory, name), "rb") as fh, \
                    mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ) as m:
                assert len(bytes(m))


def transformers_cpu(directory, _):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(directory, device_map="cpu")
    sum(float(p.float().sum()) for p in model.parameters())  # used once: lazy weights are touched


# --- fakes -------------------------------------------------------------------------------------------

def dev_zero(path, _):
    with open("/dev/zero", "rb") as fh:
        fh.read(_size(path))


def a_copy(path, copy):
    read(copy, None)


def populate_only(path, _):
    fd = os.open(path, os.O_RDONLY)
    mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
    _idle()


def madv_populate_only(path, _):
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    m.madvise(22)  # MADV_POPULATE_READ (Linux 5.14)
    _idle()


def mapped_untouched(path, _):
    fd = os.open(path, os.O_RDONLY)
    mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    _idle()


def sendfile_devnull(path, _):
    fd, null = os.open(path, os.O_RDONLY), os.open("/dev/null", os.O_WRONLY)
    at, size = 0, _size(path)
    while at < size:
        at += os.sendfile(null, fd, at, size - at)


def seek_end_then_dev_zero(path, _):
    fd = os.open(path, os.O_RDONLY)
    os.lseek(fd, 0, os.SEEK_END)
    with open("/dev/zero", "rb") as fh:
        fh.read(_size(path))
    time.sleep(0.3)  # the descriptor, at the model's end, still open at the marker


def header_only(path, _):
    with open(path, "rb") as fh:
        fh.read(4096)


def readahead_only(path, _):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    time.sleep(0.3)


def marker_before_reading(path, _):
    print("loaded", flush=True)
    read(path, None)


def nothing(path, _):
    pass


MODEL_FOR = {"gguf_reader": "gguf", "mmap_shards_in_turn": "set", "transformers_cpu": "hf"}  # else "st"


def run_pattern(name, models, cache):
    """``workbench external``'s timing of this engine running ``name`` against its model (``models``:
    :func:`write_models`'), the cache ``cold`` or ``warm`` first (CacheStateError where it cannot be)."""
    import shlex

    from workbench.io.modelcache import prepare_model
    from workbench.measure.engine.external import time_external
    from workbench.measure.engine.target import ReadTarget

    model = models[MODEL_FOR.get(name, "st")]
    target = ReadTarget.of(str(model))
    prepare_model(str(model), cache)
    cmd = " ".join(shlex.quote(str(w)) for w in (sys.executable, __file__, name, model, models["copy"]))
    return time_external(cmd, "loaded", timeout_s=120, nbytes=target.nbytes, model=target)


def write_models(tmp):
    """4 MiB models by foreign writers under ``tmp`` (a Path): a safetensors file (and a copy of it), a
    GGUF file, a 3-shard set; a transformers checkpoint where transformers is installed."""
    import importlib.util
    import shutil

    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(33)
    arrays = {f"layer.{i}.weight": rng.standard_normal((256, 1024), dtype=np.float32) for i in range(4)}
    save_file(arrays, str(tmp / "model.safetensors"))
    shutil.copyfile(tmp / "model.safetensors", tmp / "copy.safetensors")
    out = {"st": tmp / "model.safetensors", "copy": tmp / "copy.safetensors", "gguf": tmp / "model.gguf",
           "set": tmp / "set"}
    _write_gguf(out["gguf"], arrays)
    _write_set(out["set"], arrays)
    if importlib.util.find_spec("transformers") is not None:
        out["hf"] = _write_transformers(tmp / "hf")
    return out


def _write_gguf(path, arrays):
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "llama")
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _write_set(directory, arrays):
    import torch
    from huggingface_hub import save_torch_state_dict

    directory.mkdir()
    state = {name: torch.from_numpy(a.copy()) for name, a in arrays.items()}
    save_torch_state_dict(state, str(directory), max_shard_size="2MB")
    assert len(list(directory.glob("*.safetensors"))) > 1


def _write_transformers(directory):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=2048)
    LlamaForCausalLM(config).save_pretrained(directory)
    return directory


REAL = [read, pread_threads, safe_open_numpy, load_file_numpy, load_file_torch, numpy_memmap_copy, gguf_reader,
        child_loader, forked_workers_touch_a_shared_mapping, closed_before_marker, odirect, io_uring, mmap_shards_in_turn, transformers_cpu]
FAKE = [dev_zero, a_copy, populate_only, madv_populate_only, mapped_untouched, sendfile_devnull,
        seek_end_then_dev_zero, header_only, readahead_only, marker_before_reading, nothing]


def _idle():
    print("loaded", flush=True)
    time.sleep(60)


def main():
    pattern = {f.__name__: f for f in REAL + FAKE}[sys.argv[1]]
    pattern(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    if os.environ.get("CORPUS_CHILD"):
        return
    print("loaded", flush=True)
    time.sleep(60)


if __name__ == "__main__":
    main()
