"""What the workbench writes and shows, safely.

- :mod:`~workbench.output.files` — an output file: never onto the command's own input, never over a
  ledger or a model nobody asked to replace, never half-written (``refuse_overwrite``, ``write_text``,
  ``write_bytes``);
- :mod:`~workbench.output.outdir` — the directories written into, walked without following a link below
  the anchor, and files created, flushed and renamed through the directory's descriptor;
- :mod:`~workbench.output.origin` — whether a file was written by the workbench itself (what an implicit
  rewrite may replace);
- :mod:`~workbench.output.owned` — scratch files outside the data root, named after the process that made
  them and reaped once it is gone;
- :mod:`~workbench.output.untrusted` — text from a ledger or a file, cleaned for the terminal, HTML,
  plotly, Markdown or CSV before it is shown.

Like every room of the ground floor it imports no layer; importing this package imports nothing.
"""
