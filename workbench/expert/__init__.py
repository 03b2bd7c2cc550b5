"""MoE experts: placement math for copy-free O_DIRECT reads, an expert-slice cache with page accounting,
routing traces, and long decode sessions (route, look up, read on lanes, upload, compute) recorded per turn."""
from workbench.expert.cache import (
    BOUNDARY_RELEASE,
    CacheCounters,
    CacheFacts,
    CacheMemory,
    ExpertCache,
    SliceKey,
)
from workbench.expert.layout import PLACEMENTS, BlobLayout, layout_blob, layout_blobs
from workbench.expert.placement import (
    BlobPlacement,
    PlacementReport,
    pages_fully_covered,
    pages_touched,
    plan_blob,
    plan_placements,
    releasable_pages,
)
from workbench.expert.policy import POLICIES, EvictionPolicy
from workbench.expert.prefetch import PREFETCHERS, Predictor, PrefetchSpec, parse_prefetch
from workbench.expert.readers import READERS, ReadOutcome, SliceReader, open_reader
from workbench.expert.routing import RoutingTrace, load_trace, moe_shape, save_trace, synthetic_trace
from workbench.expert.compute import COMPUTE_MODES, parse_compute
from workbench.expert.decode import SliceUploader
from workbench.expert.session import ExpertSession, SessionConfig, run_session
from workbench.expert.session_records import SessionFacts, TurnRecord
from workbench.expert.session_summary import SessionReport, SessionSummary

__all__ = [
    "BOUNDARY_RELEASE", "COMPUTE_MODES", "PLACEMENTS", "POLICIES", "READERS", "BlobLayout", "BlobPlacement",
    "CacheCounters",
    "CacheFacts", "CacheMemory", "EvictionPolicy", "ExpertCache", "ExpertSession", "PlacementReport",
    "PREFETCHERS", "Predictor", "PrefetchSpec", "ReadOutcome", "RoutingTrace", "SessionConfig", "SessionFacts", "SessionReport", "SessionSummary",
    "SliceKey", "SliceReader", "SliceUploader", "TurnRecord", "layout_blob", "layout_blobs", "load_trace", "moe_shape",
    "open_reader", "pages_fully_covered", "parse_compute", "pages_touched", "parse_prefetch", "plan_blob", "plan_placements",
    "releasable_pages", "run_session", "save_trace", "synthetic_trace",
]
