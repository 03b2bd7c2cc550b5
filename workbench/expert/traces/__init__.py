"""Routing traces from engines and researchers: reading them, what they are like, and a generator fitted to one.

Reading (every reader bounded — sizes checked before anything is allocated — and every bad file one
:class:`~workbench.errors.TraceError` line naming the file and the problem, exit 2 in the CLI):

- :func:`read_trace(path) <read_trace>` → :class:`Trace`, by suffix: ``.csv`` rows ``token,layer,expert``
  (header optional); ``.jsonl``/``.ndjson`` records ``{layer, token|token_pos|token_idx,
  experts|topk_ids, gating_probs|topk_weights}`` (gate weights kept); ``.npy`` ``(N, 3)`` rows (or a
  structured array with those fields) or a ``[tokens, layers, k]`` array (vLLM's routed-experts shape;
  layer ``i`` is the ``i``-th MoE layer, a (token, layer) of all ``-1`` a gap).
- :class:`Trace`: per layer (``trace.layers[i]``) the token positions it covers (``positions[i]``, int64,
  increasing), their experts (``experts[i]``, ``(n_i, k)`` int32) and gate weights (``gates[i]``,
  ``(n_i, k)`` float32, or ``gates is None``); ``n_experts``, ``k``, ``source``; ``runs(i)`` splits a
  layer at its gaps. Layers are independent: a layer may cover other tokens than another.
- :func:`dense_routing(trace, layers=, n_experts=) <dense_routing>` → :class:`RoutingTrace` (``experts``
  ``(tokens, layers, k)``, ``gates`` or None, ``note``): what a session replays. Gaps: a missing MoE layer
  is refused; a token missing from any layer is dropped from all (the note counts them).

Statistics: :func:`trace_stats(trace) <trace_stats>` → :class:`TraceStats`, pandas frames ``summary``,
``popularity``, ``reuse``, ``working_set`` (what each means: :mod:`workbench.expert.traces.stats`).
Generator: :class:`StickyModel` (per-layer popularity, sticky experts, a recent history; seeded
``synthesize(tokens, seed=)`` → :class:`RoutingTrace`), fitted by :func:`fit_trace(trace) <fit_trace>` →
:class:`FitResult` (model, both traces' statistics, the gaps against :data:`TOLERANCES`); its parameter
file (``save_model``/``load_model``, ``.json``) is what ``workbench session --trace`` synthesizes from.

Gaps in the statistics: each layer is analysed on the tokens it has; popularity counts every recorded
token, and the temporal statistics (overlap with the previous token, reuse distance, working set) look
only inside runs of consecutive positions, never across a gap.
"""
from workbench.expert.traces.dense import RoutingTrace, dense_routing
from workbench.expert.traces.fit import TOLERANCES, FitResult, fit_trace
from workbench.expert.traces.limits import MAX_EXPERTS, MAX_IDS, MAX_K, MAX_LAYER
from workbench.expert.traces.read import FORMATS, read_trace
from workbench.expert.traces.stats import TraceStats, trace_stats
from workbench.expert.traces.sticky import StickyModel, as_trace, is_model_file, load_model, save_model
from workbench.expert.traces.trace import Trace
from workbench.expert.traces.write import trace_bytes

__all__ = ["FORMATS", "MAX_EXPERTS", "MAX_IDS", "MAX_K", "MAX_LAYER", "TOLERANCES", "FitResult", "RoutingTrace",
           "StickyModel", "Trace", "TraceStats", "as_trace", "dense_routing", "fit_trace", "is_model_file",
           "load_model", "read_trace", "save_model", "trace_bytes", "trace_stats"]
