"""Reference strategies (``kind: peer``): how stock libraries load the same file, measured by the same
runner, in the same window, with the same verification.

A peer is a baseline to beat, not a technique to tune: each runs its library's public API the way the
library's README loads a model onto a GPU, with the library's own defaults unless a parameter says
otherwise. Whatever the library leaves on the target device is taken over as the placements that
verification reads back (``Device.adopt``), so nothing of ours moves a byte — except where the library
has no way onto the device (safetensors' numpy framework) or its CPU result is still a lazy view of
the file mapping (safetensors' ``pt`` framework on the host backend): then the workbench copies it,
inside the window, and the engaged note says so.

- ``peer-safetensors``: safetensors' ``safe_open`` (``framework=pt`` with torch, ``numpy`` without;
  BF16 through ml_dtypes on the numpy path).
- ``peer-fastsafetensors``: fastsafetensors' ``SafeTensorsFileLoader`` without GDS.
- ``peer-runai``: Run:ai Model Streamer's ``SafetensorsStreamer``, then ``tensor.to(device)``.
- ``peer-instanttensor``: InstantTensor's ``safe_open`` (CUDA devices only).

Present when installed: ``pip install 'workbench[peers]'`` (safetensors, ml_dtypes) and, with torch
installed first, ``'workbench[peers-torch]'`` for the other three; unavailable with a one-line reason
otherwise.
"""
