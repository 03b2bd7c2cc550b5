"""Run by tests/test_strategies_race.py in a fresh process: index a model file, change it the way a
writer racing the load would, then load and verify. A SIGBUS or a crash ends only this process, and
the test sees it as such.

    python tests/race_child.py FILE STRATEGY PARAMS_JSON HOW
    python tests/race_child.py '[[FILE, HOW], ...]' STRATEGY PARAMS_JSON     (one JSON line per case)

Prints one JSON object: {"outcome": "refused", "error": ...} when the load raised a WorkbenchError,
else {"outcome": "loaded", "verified": bool, "detail": ...}. Anything else is a traceback and exit 1.
"""
from __future__ import annotations

import json
import os
import sys

from workbench.errors import WorkbenchError
from workbench.formats import open_index
from workbench.formats.index import TensorIndex
from workbench.strategies import get_strategy
from workbench.upload import open_device
from workbench.measure.run.verify import verify_placements


def disturb(index: TensorIndex, how: str) -> None:
    """Change the indexed file in place (same inode) as a concurrent writer would."""
    if how == "truncate-data":  # half of the tensor data is gone
        os.truncate(index.path, index.data_offset + (index.size - index.data_offset) // 2)
    elif how == "truncate-header":  # only part of the header is left
        os.truncate(index.path, index.data_offset // 2)
    elif how == "rewrite":  # same size, one byte of every tensor changed
        with open(index.path, "r+b") as f:
            for t in index.tensors:
                if t.nbytes:
                    f.seek(t.offset + t.nbytes // 2)
                    byte = f.read(1)
                    f.seek(t.offset + t.nbytes // 2)
                    f.write(bytes([byte[0] ^ 0xFF]))
    elif how not in ("none", "truncate-during"):
        raise SystemExit(f"unknown change {how!r}")


def truncate_after_first_copy(device, index: TensorIndex) -> None:
    """The writer strikes mid-load: right after the first piece reached the device — copied there by
    the workbench, or left there by a peer library and adopted."""
    done: list[bool] = []

    def strike_after(real):
        def call_then_truncate(*args, **kw):
            out = real(*args, **kw)
            if not done:
                done.append(True)
                os.truncate(index.path, index.data_offset + (index.size - index.data_offset) // 4)
            return out
        return call_then_truncate

    device.copy_h2d = strike_after(device.copy_h2d)
    device.adopt = strike_after(device.adopt)
    device.host_view = strike_after(device.host_view)  # a read straight into host memory: its buffers


def main(path: str, strategy: str, params: str, how: str) -> dict:
    index = open_index(path)
    disturb(index, how)
    with open_device("host") as device:
        if how == "truncate-during":
            truncate_after_first_copy(device, index)
        try:
            result = get_strategy(strategy).from_strings(json.loads(params)).load(index, device)
        except WorkbenchError as exc:
            return {"outcome": "refused", "error": str(exc), "type": type(exc).__name__}
        try:
            report = verify_placements(index, device, result.placements)
        except WorkbenchError as exc:
            return {"outcome": "verify refused", "error": str(exc), "type": type(exc).__name__}
        return {"outcome": "loaded", "verified": report.ok, "detail": report.detail,
                "first_mismatch": report.first_mismatch}


if __name__ == "__main__":
    if sys.argv[1].startswith("["):  # several cases, one process: [[FILE, HOW], ...] STRATEGY PARAMS_JSON
        for case_path, case_how in json.loads(sys.argv[1]):
            print(json.dumps({"how": case_how, **main(case_path, sys.argv[2], sys.argv[3], case_how)}), flush=True)
    else:
        print(json.dumps(main(*sys.argv[1:5])))
