"""Serves a layer's misses the way ``--miss`` asks, for the decode loop (:mod:`workbench.expert.decode`).

The loop calls two hooks per (token, layer), and a predictor's prefetch a third before them:

* :meth:`MissServer.plan_way` as a predictor stages ahead of the layer (with overlap, while the layer
  before it computes): the way the layer runs, fixed then, so nothing is staged for a layer the host
  computes (:class:`~workbench.expert.prefetch.PrefetchStage` skips it and counts it). Under ``auto`` a
  token's way is chosen when its first layer is planned, so the next token's way is known when its first
  layer is staged for: the moment ``--prefetch route``'s planning (which splits there) chooses it too.
* :meth:`MissServer.split` as the layer's routing becomes keys (when it is planned: ahead of its turn
  with overlap): an expert whose every blob is in the cache is a hit and lands on the device; any other
  is a miss, fetched (read, landed, computed on the device: today's path) or computed on the host from
  the file's mapping (:class:`~workbench.expert.miss.host.HostExperts`), by the mode — ``fetch``,
  ``host``, or under ``auto`` the way its token runs (:class:`~workbench.expert.miss.chooser.TokenChooser`:
  a ``host`` token computes its hits on the host too). A miss computed on the host is never admitted to
  the cache: the cache holds what fetched misses put there.
* :meth:`MissServer.step_done` once the layer's device compute has run: the host computes the layer's
  host experts (timed: ``host_compute``), and under ``auto`` the layer's whole wall goes to its token's
  cost (:mod:`workbench.expert.miss.rule`).

Counts are an expert (every blob of the layer) a miss, not a cache entry; they are the turn's
(:meth:`take_turn`) and go into the turn record's ``miss_*`` fields (:data:`MISS_KEYS`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Collection, Sequence

from workbench.errors import ParamError
from workbench.expert.miss.chooser import TokenChooser
from workbench.expert.miss.host import HostExperts
from workbench.expert.miss.rule import AutoRule
from workbench.expert.session_records import MISS_KEYS

__all__ = ["MISS_KEYS", "MISS_MODES", "MissServer", "MissTally", "check_miss", "miss_fields", "miss_line", "open_miss"]

MISS_MODES = ("fetch", "host", "auto")


def check_miss(mode: str) -> None:
    if mode not in MISS_MODES:
        raise ParamError("session", "miss", f"{mode!r} is not one of {', '.join(MISS_MODES)}")


@dataclass
class MissTally:
    """One turn's misses by how they were served (experts), and auto's costs as the turn ended."""

    miss_fetched: int = 0
    miss_host: int = 0
    miss_host_bytes: int = 0  # expert bytes the host products read from the file's mapping
    host_compute_s: float = 0.0
    miss_host_hits: int = 0  # hits auto's host tokens computed on the host (not in miss_host; in miss_host_bytes)
    miss_fetch_token_s: float = -1.0  # auto: a fetch token's seconds, the median as the turn ended (-1: not yet)
    miss_host_token_s: float = -1.0  # auto: a host token's
    miss_probe_tokens: int = 0  # auto: tokens begun as probes of the way not in use (-1: not auto)
    miss_probe_s: float = 0.0  # auto: their layers' seconds run the probed way
    host_entries: int = 0  # cache entries (expert x blob) of the host misses: the turn's misses count them
    host_hit_entries: int = 0  # and of those hits: the turn's hits count them

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["host_entries"], out["host_hit_entries"]
        return out


@dataclass
class _Step:
    host: list[int]
    fetched: int
    device: int  # experts landed on the device (hits and fetched misses)
    host_hits: int = 0  # of ``host``, hits an auto host token computed there too
    way: str = ""  # auto: the way the layer ran


class MissServer:
    """Splits each layer's routed experts between the device and the host (see the module docstring)."""

    def __init__(self, mode: str, cache: Any, by_layer: dict[int, list[int]], layers: Sequence[int],
                 host: HostExperts | None = None, rule: AutoRule = AutoRule()):
        check_miss(mode)
        if mode != "fetch" and host is None:
            raise ValueError(f"--miss {mode} needs the host's experts")
        self.mode, self.cache, self.by_layer, self.layers = mode, cache, by_layer, list(layers)
        self.host = host
        self.auto = TokenChooser(len(self.layers), rule) if mode == "auto" else None
        self.tally = MissTally()
        self._steps: dict[tuple[int, int], _Step] = {}
        self._ways: dict[tuple[int, int], str] = {}  # planned ahead by a prefetch, not yet split

    def plan_way(self, t: int, i: int) -> str:
        """``"fetch"`` or ``"host"``: the way token ``t``'s layer position ``i`` runs, fixed now (its
        :meth:`split` keeps it). Under ``host`` every layer's misses are the host's; hits still land."""
        if (t, i) not in self._ways:
            self._ways[(t, i)] = self.mode if self.auto is None else self.auto.way(t)
        return self._ways[(t, i)]

    def split(self, t: int, i: int, experts: Sequence[int], staged: Collection[int] = ()) -> list[int]:
        """The experts of token ``t``, layer position ``i`` to land on the device; the rest are kept
        for :meth:`step_done` to compute on the host. ``staged``: experts this layer's prefetch read
        ahead (a predictor's, split when the layer comes): cached by now, but fetched misses, as the
        cache counts them and as ``--prefetch route``'s planning (split before its reads) finds them."""
        blobs = self.by_layer[self.layers[i]]
        way = self._ways.pop((t, i), None) or (self.mode if self.auto is None else self.auto.way(t))
        device, host, fetched, host_hits = [], [], 0, 0
        for e in experts:
            if e not in staged and all((b, e) in self.cache for b in blobs):
                if self.auto is not None and way == "host":  # a host token: every expert where it lies
                    host.append(e)
                    host_hits += 1
                else:
                    device.append(e)
            elif way == "host":
                host.append(e)
            else:
                device.append(e)
                fetched += 1
        self._steps[(t, i)] = _Step(host, fetched, len(device), host_hits, way)
        return device

    def step_done(self, t: int, i: int, fetch_s: float, land_s: float, device_s: float) -> float:
        """After the layer's device compute: its host experts computed. ``fetch_s`` (read wait and
        bookkeeping since the layer began landing), ``land_s`` (the rest of the layer's wall before its
        compute: uploads, the loop's own steps) and ``device_s`` (its device compute), with the host's own
        time, are the layer's wall: auto's token cost. Returns the host compute's seconds."""
        step = self._steps.pop((t, i), None)
        if step is None:
            return 0.0
        host_s = 0.0
        if step.host:
            blobs = self.by_layer[self.layers[i]]
            assert self.host is not None
            t0 = time.perf_counter()
            touched = self.host.run([(b, e) for e in step.host for b in blobs])
            host_s = time.perf_counter() - t0
            self.tally.miss_host += len(step.host) - step.host_hits
            self.tally.miss_host_hits += step.host_hits
            self.tally.host_entries += (len(step.host) - step.host_hits) * len(blobs)
            self.tally.host_hit_entries += step.host_hits * len(blobs)
            self.tally.miss_host_bytes += touched
            self.tally.host_compute_s += host_s
        self.tally.miss_fetched += step.fetched
        if self.auto is not None:
            self.auto.layer_done(t, step.way, fetch_s + land_s + device_s + host_s, i == len(self.layers) - 1)
        return host_s

    def take_turn(self) -> MissTally:
        """This turn's tally (with the costs as they stand); the next turn starts from zero."""
        done, self.tally = self.tally, MissTally()
        if self.auto is None:
            done.miss_probe_tokens, done.miss_probe_s = -1, -1.0
            return done
        fetch, host = self.auto.costs["fetch"].seconds, self.auto.costs["host"].seconds
        done.miss_fetch_token_s = -1.0 if fetch is None else fetch
        done.miss_host_token_s = -1.0 if host is None else host
        done.miss_probe_tokens, done.miss_probe_s = self.auto.take_probes()
        return done

    def reset(self) -> None:
        """Drop the steps planned and not run (a turn that failed midway)."""
        self._steps.clear()
        self._ways.clear()
        if self.auto is not None:
            self.auto.reset()

    def describe(self) -> str:
        if self.mode == "fetch":
            return "fetch (every miss read, landed and computed on the device)"
        host = self.host.describe() if self.host is not None else ""
        if self.mode == "host" or self.auto is None:
            return f"host (every miss computed where it lies: {host})"
        return f"{self.auto.describe()}: {host})"


def open_miss(mode: str, cache: Any, path: str, blobs: Sequence[Any], tensors: Any, by_layer: dict[int, list[int]],
              layers: Sequence[int]) -> MissServer:
    """The server ``mode`` asks for; for host and auto, the host's experts mapped (a type neither numpy nor
    gguf-py can compute is refused in one line here, before any turn)."""
    check_miss(mode)
    host = HostExperts(path, blobs, tensors) if mode != "fetch" else None
    return MissServer(mode, cache, by_layer, layers, host)


def miss_fields(turns: Sequence[Any]) -> dict[str, Any]:
    """The summary's miss fields over ``turns``: totals, per-token times (ms) and the last learned costs."""
    ran = [t for t in turns if getattr(t, "miss_fetched", -1) >= 0]
    tokens = sum(t.tokens for t in turns) or 1
    if not ran:
        return {"miss_fetched": -1, "miss_host": -1, "miss_host_hits": -1, "miss_host_bytes": -1,
                "host_ms_per_token": None,
                "fetch_ms_per_token": None, "device_ms_per_token": None, "miss_fetch_token_ms": None,
                "miss_host_token_ms": None, "miss_probe_tokens": -1, "miss_probe_ms": None}
    last = ran[-1]
    cost = lambda s: None if s < 0 else s * 1e3  # noqa: E731
    probed = [t for t in ran if t.miss_probe_tokens >= 0]
    return {
        "miss_fetched": sum(t.miss_fetched for t in ran), "miss_host": sum(t.miss_host for t in ran),
        "miss_host_hits": sum(max(0, t.miss_host_hits) for t in ran),
        "miss_host_bytes": sum(t.miss_host_bytes for t in ran),
        "host_ms_per_token": sum(t.host_compute_s for t in ran) / tokens * 1e3,
        "fetch_ms_per_token": sum(t.stall_read_s + t.stall_upload_s for t in turns) / tokens * 1e3,
        "device_ms_per_token": sum(t.compute_s for t in turns) / tokens * 1e3,
        "miss_fetch_token_ms": cost(last.miss_fetch_token_s), "miss_host_token_ms": cost(last.miss_host_token_s),
        "miss_probe_tokens": sum(t.miss_probe_tokens for t in probed) if probed else -1,
        "miss_probe_ms": sum(t.miss_probe_s for t in probed) * 1e3 if probed else None,
    }


def _tokens(n: int | None) -> str:
    n = max(0, n or 0)
    return f"{n:,} token{'' if n == 1 else 's'}"


def _hits_too(n: int | None) -> str:
    return f"and {n:,} hits " if n else ""


def miss_line(fields: Any, mode: str) -> str:
    """The summary's miss sentence (empty for turns recorded before misses were counted)."""
    get = fields.get if isinstance(fields, dict) else lambda k: getattr(fields, k, None)
    if get("miss_fetched") is None or get("miss_fetched") < 0:
        return ""
    ms = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    learned = (f"; a token each way (median): fetch {ms(get('miss_fetch_token_ms'))} ms, host "
               f"{ms(get('miss_host_token_ms'))} ms; {_tokens(get('miss_probe_tokens'))} probed the other way "
               f"({ms(get('miss_probe_ms'))} ms run that way)" if mode == "auto" else "")
    return (f"misses ({mode}) {get('miss_fetched'):,} fetched, {get('miss_host'):,} computed on the host "
            f"{_hits_too(get('miss_host_hits'))}({get('miss_host_bytes') / 2**20:,.1f} MiB read there); per token: "
            f"fetch {ms(get('fetch_ms_per_token'))} ms (read + upload waits), host compute {ms(get('host_ms_per_token'))} ms, device compute "
            f"{ms(get('device_ms_per_token'))} ms{learned}")
