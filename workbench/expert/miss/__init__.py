"""Where a session's misses are served (``--miss fetch|host|auto``, issue 34 §4).

* :mod:`~.host` — experts computed on the host from the file's mapping: each blob's matrix–vector
  product at batch 1, the bytes widened to f32 (F16, BF16 by its bits) or dequantized by gguf-py;
* :mod:`~.rule` — ``auto``'s rule: whole tokens the way whose tokens, timed each way in the session,
  cost less, the other probed within a bounded share; :mod:`~.chooser` applies it token by token;
* :mod:`~.server` — the decode loop's two hooks (split a layer's routed experts, then compute its host
  misses and learn), the turn's counts (:data:`~.server.MISS_KEYS`) and the summary's sentence;
* :mod:`~.batch` — ``--batch-misses`` (issue 34 §5): a layer's misses read and uploaded together, runs
  of misses and of hits per lane, into alternating halves of the arena; :mod:`~.lane_stage` sends a
  lane's run through page-locked slots, one asynchronous copy a slot-full.
"""
from workbench.expert.miss.chooser import TokenChooser
from workbench.expert.miss.host import HostExperts, widen
from workbench.expert.miss.rule import ArmCost, AutoRule, next_way
from workbench.expert.miss.server import (
    MISS_KEYS,
    MISS_MODES,
    MissServer,
    MissTally,
    check_miss,
    miss_fields,
    miss_line,
    open_miss,
)

__all__ = ["MISS_KEYS", "MISS_MODES", "ArmCost", "AutoRule", "HostExperts", "MissServer", "MissTally", "TokenChooser",
           "check_miss", "miss_fields", "miss_line", "next_way", "open_miss", "widen"]
