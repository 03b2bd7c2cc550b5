"""MoE experts: placement math for copy-free O_DIRECT reads and page accounting for an expert cache."""
from workbench.expert.placement import (
    BlobPlacement,
    PlacementReport,
    pages_fully_covered,
    pages_touched,
    plan_blob,
    plan_placements,
    releasable_pages,
)

__all__ = ["BlobPlacement", "PlacementReport", "pages_fully_covered", "pages_touched", "plan_blob",
           "plan_placements", "releasable_pages"]
