"""What a long session records: one :class:`TurnRecord` per turn and a :class:`SessionReport`.

``SessionReport.to_json()`` is the document ``workbench session --json`` prints:
``{"turns": [...], "summary": {...}}``. Each turn has the first session issue's keys first
(:data:`ISSUE_TURN_KEYS`: ``turn, tokens, bytes_read, hits, misses, evictions, minflt, majflt,
accounted_bytes, actual_anon_bytes, unreleased_pages, seconds, tokens_per_s``), then the decode
loop's (:data:`DECODE_TURN_KEYS`: where the time went, bytes by source, the lanes' queue depth and
GB/s) and the memory a turn ended with (:data:`MEMORY_TURN_KEYS`), then ``shift_copy_bytes``,
``resident_bytes`` and ``gated_reads``, then what a memory limit's pressure hit (:data:`PRESSURE_KEYS`),
then the misses' staged GB/s against the machine's wall (:data:`WALL_KEYS`), then every token's seconds
and stall (:data:`TOKEN_KEYS`: the per-token percentiles are taken over these raw times) and what a
predictor did (:data:`PREFETCH_KEYS`), then how misses were served (:data:`MISS_KEYS`, ``--miss``).
A turn stays a few hundred bytes plus two numbers a token.

Where a turn's time went (``seconds``, the turn's wall)::

    seconds = compute_s + host_compute_s + stall_read_s + stall_upload_s + stall_route_s + bookkeeping_s + other_s

``stall_read_s`` is the decode thread waiting for a miss's read (its own read, or a lane's),
``stall_upload_s`` waiting for copies to the device, ``stall_route_s`` obtaining the routing,
``bookkeeping_s`` the cache's work on the decode thread (lookups, admissions with the mincore gate,
evictions and their madvise, completions, unpins), ``other_s`` the rest (the loop itself);
``residual_s_per_token`` is what is left once the stalls and the bookkeeping are taken out, per
token: ``(seconds - stalls - bookkeeping_s) / tokens`` = ``(compute_s + host_compute_s + other_s) / tokens`` (the
second write-up's "compute residual"), so a change to the gate or the eviction policy shows in
``bookkeeping_s`` and not as a change in compute. ``shift_copy_s`` is the time the bounce reader
spent copying ``shift_copy_bytes`` (on the lane that read, so it overlaps the decode thread).
A turn recorded before ``bookkeeping_s`` existed reads back ``-1`` (its residual includes it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

ISSUE_TURN_KEYS = ("turn", "tokens", "bytes_read", "hits", "misses", "evictions", "minflt", "majflt",
                   "accounted_bytes", "actual_anon_bytes", "unreleased_pages", "seconds", "tokens_per_s")
DECODE_TURN_KEYS = ("hit_rate", "compute_s", "stall_read_s", "stall_upload_s", "stall_route_s", "bookkeeping_s",
                    "other_s", "residual_s_per_token", "hit_bytes_per_token", "page_cache_bytes_per_token",
                    "disk_bytes_per_token", "io_bytes", "landed_bytes", "read_busy_s", "read_queue_depth",
                    "staged_gbps")
MEMORY_TURN_KEYS = ("rss_bytes", "swap_bytes", "cg_usage_bytes", "cg_pgmajfault", "cg_refaults", "cg_reclaimed",
                    "cg_limit_hits", "cg_swap_bytes", "swap_in", "swap_out", "cg_lazyfreed")
TURN_EXTRAS = ("shift_copy_bytes", "shift_copy_s", "resident_bytes", "gated_reads", "lazyfree_bytes", "cpu_user_s",
               "cpu_sys_s", "recycled_pages")
# the process's mapped file pages (every turn), then, under --memory-limit, what the turn's pressure hit:
# the model against everything else (workbench.expert.pressure_turn; -1 without a limit)
PRESSURE_KEYS = ("file_rss_bytes", "model_lost_bytes", "model_fetched_bytes", "model_reread_bytes",
                 "other_fetched_bytes", "vm_majflt", "vm_swapin", "vm_refault_file", "vm_refault_anon",
                 "swap_used_bytes")
WALL_KEYS = ("wall_name", "wall_gbps", "staged_of_wall", "wall_note")  # the misses against their wall
# then every token's seconds and stall (workbench.records.token_tail), and what a predictor did
# (workbench.expert.prefetch.tally; -1 where no predictor ran: --prefetch route, or no overlap)
TOKEN_KEYS = ("token_s", "token_stall_s")
PREFETCH_KEYS = ("prefetch_named", "prefetch_right", "prefetch_routed", "prefetch_bytes", "prefetch_unused_bytes",
                 "prefetch_never_used_bytes", "prefetch_late_bytes", "prefetch_idle_bytes", "prefetch_dropped",
                 "prefetch_layers", "prefetch_skipped_layers", "prefetch_skipped_named", "prefetch_skipped_bytes")
MISS_KEYS = ("miss_fetched", "miss_host", "miss_host_bytes", "host_compute_s", "miss_host_hits", "miss_fetch_token_s",
             "miss_host_token_s", "miss_probe_tokens", "miss_probe_s")


@dataclass(frozen=True)
class TurnRecord:
    """One turn of ``tokens`` decode tokens. Counts are this turn's; memory is as the turn ended.

    ``hits``/``misses``/``evictions`` count cache entries (one expert of one blob); ``bytes_read`` is
    payload staged from the file (``io_bytes`` what the readers moved: whole windows for O_DIRECT);
    ``minflt``/``majflt`` are getrusage deltas over the turn; ``accounted_bytes`` the pages live
    entries touch; ``actual_anon_bytes`` the process's anonymous memory (smaps_rollup, -1 where
    unreadable); ``unreleased_pages`` pages the cache committed and no live entry touches;
    ``resident_bytes`` what mincore finds resident in the cache's reservations, ``lazyfree_bytes`` what
    of it the cache handed back with ``MADV_FREE`` (``release_advice="free"``) and the kernel has not
    reclaimed yet (smaps ``LazyFree``; counted by mincore, ``Rss`` and ``Anonymous`` alike, and taken out
    where they are held against the accounting: :attr:`held_anon_bytes`; 0 under ``dontneed``, -1 unknown). Bytes per token by
    source: served by the cache (``hit``), by the page cache (``rchar − read_bytes`` of
    ``/proc/self/io``) and from the disk (``read_bytes``). ``landed_bytes``: expert bytes copied to
    the device. ``read_busy_s``: time at least one read was in flight; ``read_queue_depth`` the mean
    number in flight then; ``staged_gbps`` = ``bytes_read / read_busy_s``, held against the machine's
read wall for the turn's reads (``wall_name``, ``wall_gbps``, ``staged_of_wall``; ``wall_note`` says why not: no misses, no
ceilings recorded — filled in by the runner, :mod:`workbench.measure.session.wall`). ``cg_*``: the memory
    cgroup's usage and counter deltas under ``--memory-limit`` (-1 without one, or not kept).
    :data:`PRESSURE_KEYS`: the process's mapped file pages (``file_rss_bytes``, ``RssFile``: libraries,
    Python, a device's libraries; never the model, which a session reads and does not map), then under
    ``--memory-limit`` the model's pages lost, fetched and read again, storage reads of anything else,
    and the machine's faults, swap-ins, refaults and swap in use (:mod:`workbench.expert.pressure_turn`;
    -1 without a limit).
    """

    turn: int
    tokens: int
    bytes_read: int
    hits: int
    misses: int
    evictions: int
    minflt: int
    majflt: int
    accounted_bytes: int
    actual_anon_bytes: int
    unreleased_pages: int
    seconds: float
    tokens_per_s: float
    hit_rate: float = 0.0
    compute_s: float = 0.0
    stall_read_s: float = 0.0
    stall_upload_s: float = 0.0
    stall_route_s: float = 0.0
    bookkeeping_s: float = -1.0  # -1: recorded before it was timed (then in other_s and the residual)
    other_s: float = 0.0
    residual_s_per_token: float = 0.0
    hit_bytes_per_token: float = 0.0
    page_cache_bytes_per_token: float = 0.0
    disk_bytes_per_token: float = 0.0
    io_bytes: int = 0
    landed_bytes: int = 0
    read_busy_s: float = 0.0
    read_queue_depth: float = 0.0
    staged_gbps: float = 0.0
    rss_bytes: int = -1
    swap_bytes: int = -1
    cg_usage_bytes: int = -1
    cg_pgmajfault: int = -1
    cg_refaults: int = -1
    cg_reclaimed: int = -1
    cg_limit_hits: int = -1
    cg_swap_bytes: int = -1
    swap_in: int = -1
    swap_out: int = -1
    cg_lazyfreed: int = -1  # lazily-freed pages (MADV_FREE) the cgroup's reclaim took (v2 only)
    shift_copy_bytes: int = 0
    shift_copy_s: float = 0.0
    resident_bytes: int = 0
    gated_reads: int = 0
    lazyfree_bytes: int = 0  # of resident_bytes (and so of actual_anon/rss), handed back with MADV_FREE, not yet reclaimed
    # the worker's CPU over the turn, every thread (getrusage): over ``seconds``, how many cores it kept busy
    # (about one while the threads take turns on one lock, more while they run side by side); -1: not recorded
    cpu_user_s: float = -1.0
    cpu_sys_s: float = -1.0
    # release_advice="recycle": pages of misses' slots that were evicted pages taken over (moved in or
    # shared in place) instead of faulted in fresh; 0 under the other advices
    recycled_pages: int = 0
    file_rss_bytes: int = -1
    model_lost_bytes: int = -1
    model_fetched_bytes: int = -1
    model_reread_bytes: int = -1
    other_fetched_bytes: int = -1
    vm_majflt: int = -1
    vm_swapin: int = -1
    vm_refault_file: int = -1
    vm_refault_anon: int = -1
    swap_used_bytes: int = -1
    wall_name: str = ""  # the wall this turn's misses are held against (measure/session/wall.py)
    wall_gbps: float | None = None
    staged_of_wall: float | None = None  # staged_gbps over wall_gbps (None: see wall_note)
    wall_note: str = ""  # why there is no fraction: "no misses", "no wall: run `workbench ceilings`"
    token_s: tuple[float, ...] = ()  # each token's seconds on the decode thread (empty: recorded before)
    token_stall_s: tuple[float, ...] = ()  # of each, waiting for reads, uploads and routing
    prefetch_named: int = -1  # experts the predictor named, over the (token, layer)s it was asked about
    prefetch_right: int = -1  # of them, routed there
    prefetch_routed: int = -1  # experts routed there
    prefetch_bytes: int = -1  # entries' bytes read ahead
    prefetch_unused_bytes: int = -1  # of them, not routed by the layer they were read for
    prefetch_never_used_bytes: int = -1  # evicted before any token used them
    prefetch_late_bytes: int = -1  # of the unused, routed by a later token while still cached (a hit)
    prefetch_idle_bytes: int = -1  # read ahead, live and unused as the turn ended
    prefetch_dropped: int = -1  # entries the cache had no room for (its budget held by entries in use)
    prefetch_layers: int = -1  # (token, layer)s staged for: the ones named/right/routed count (-1: before counted)
    prefetch_skipped_layers: int = -1  # (token, layer)s planned to run on the host: nothing staged, not scored
    prefetch_skipped_named: int = -1  # experts the predictor named for them
    prefetch_skipped_bytes: int = -1  # bytes those would have read (not live then): what the skip saved
    # how misses were served (--miss; workbench.expert.miss): experts, not entries; -1 recorded before
    miss_fetched: int = -1  # misses read, landed and computed on the device
    miss_host: int = -1  # misses computed on the host from the file's mapping (never admitted to the cache)
    miss_host_bytes: int = -1  # expert bytes those products read from the mapping
    host_compute_s: float = 0.0  # their seconds on the decode thread (in the residual, not in compute_s)
    miss_host_hits: int = -1  # hits auto's host tokens computed on the host too
    miss_fetch_token_s: float = -1.0  # auto: a fetch token's seconds, the median as the turn ended (-1: none yet)
    miss_host_token_s: float = -1.0  # and a host token's (every routed expert computed on the host)
    miss_probe_tokens: int = -1  # auto: tokens begun as probes of the way not in use (-1: not auto)
    miss_probe_s: float = -1.0  # their layers' seconds run the probed way

    @property
    def held_anon_bytes(self) -> int:
        """The process's anonymous bytes less the cache's lazily-freed ones (-1 where unreadable)."""
        return self.actual_anon_bytes - max(0, self.lazyfree_bytes) if self.actual_anon_bytes >= 0 else -1

    @property
    def held_resident_bytes(self) -> int:
        """The reservations' resident bytes less the lazily-freed ones."""
        return self.resident_bytes - max(0, self.lazyfree_bytes)

    @property
    def stall_s(self) -> float:
        return self.stall_read_s + self.stall_upload_s + self.stall_route_s

    def to_json(self) -> dict[str, Any]:
        """Every field, the first issue's keys first: one element of ``session --json``'s ``turns``,
        and what the ledger's turns rows and the worker carry."""
        return asdict(self)

    def issue_json(self) -> dict[str, Any]:
        """Exactly the first issue's keys, in its order."""
        return {key: getattr(self, key) for key in ISSUE_TURN_KEYS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TurnRecord":
        """Back from :meth:`to_json`; a turn recorded before a field existed gets its default."""
        required = {f.name for f in fields(cls) if f.name in ISSUE_TURN_KEYS}
        values = {f.name: data[f.name] for f in fields(cls) if f.name in required or f.name in data}
        for key in TOKEN_KEYS:
            if key in values:
                values[key] = tuple(values[key] or ())
        return cls(**values)


@dataclass(frozen=True)
class SessionFacts:
    """How the session ran: what was asked, what engaged, and from where the routing came."""

    placement: str
    placement_report: str  # "odirect-zero-copy ON — n/m layer buffers placed" (reason when not all)
    placement_state: str  # ON | PARTIAL | INERT
    reader: str
    reader_note: str  # why the reader is not the one asked for ("" when it is)
    boundary_release: str
    policy: str
    cache_bytes: int
    reserved_bytes: int
    experts_per_token: int
    trace: str  # the trace's source
    trace_note: str  # e.g. a file trace replayed because the session is longer
    device: str
    verify: bool
    compute: str = "none"  # what --compute ran ("device (torch 2.5): 48 blobs Q4_0 as a same-bytes f16 proxy …")
    lanes: int = 1
    overlap: bool = False
    gate: str = "off"  # "off", or "0.9 per blob" / "0.9 per file (resident 12% at the start: below)"
    leak_bound_pages: int = 0  # the most pages release=off can leave committed
    working_set_bytes: int = 0  # one token's routed expert bytes, every MoE layer
    expert_bytes: int = 0  # every expert slice of the model
    files: int = 1
    warnings: tuple[str, ...] = ()
    memory_limit: str = ""  # how --memory-limit was enforced ("cgroup v1 …", "balloon …"), "" without
    # under a balloon, the worker's own resident file pages it locked after turn 0 (workbench.io.own_pages;
    # -1: nothing pinned — no limit, or a cgroup, which never reclaims the runner's library pages)
    pinned_file_bytes: int = -1
    pinned_resident_bytes: int = -1  # resident in the mappings it considered, locked or not
    pinned_s: float = -1.0  # how long finding and locking them took (between turn 0 and turn 1)
    pinned_vmlck_bytes: int = -1  # the worker's VmLck right after
    pinned_note: str = ""  # why some were not locked (mlock refused, the balloon's room), "" when all were
    release_advice: str = "dontneed"  # how the cache handed pages back: dontneed | free (MADV_FREE, lazily)
    uploader: str = "pageable"  # how landed slices reach the device: pageable copies | pinned (a staging ring)
    upload_threads: int = 1  # threads copying them out of the cache
    prefetch: str = "route"  # what was staged ahead, in words (workbench.expert.prefetch)
    miss: str = "fetch"  # how misses were served, in words (workbench.expert.miss)
    lane_options: str = ""  # how the lanes ran beyond their count, in words ("schedule eager, handoff lock"); "" at the defaults

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SessionFacts":
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        values["warnings"] = tuple(values.get("warnings", ()))
        return cls(**values)
