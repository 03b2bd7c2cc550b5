"""``workbench env``: this machine, a directory's file system and the device backends."""
from __future__ import annotations

import json
from typing import Any

import click

from workbench.measure.run.environment import collect_environment
from workbench.output.untrusted import for_terminal


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def _yes_no(ok: bool, reason: str) -> str:
    return "yes" if ok else f"no ({reason})" if reason else "no"


def _memory_reporting(facts: dict[str, Any] | None) -> str:
    if not facts:
        return "unknown"
    return ("yes — " if facts.get("active") else "no — ") + str(facts.get("detail", ""))


def _rows(env: dict[str, Any]) -> list[tuple[str, str]]:
    commit = env.get("git_commit")
    rows = [
        ("workbench", env["workbench_version"] + (f" @ {commit[:12]}{' (dirty)' if env['git_dirty'] else ''}"
                                                  if commit else "")),
        ("python", f"{env['python']} ({env['implementation']})"),
        ("kernel", env["kernel"]),
        ("host", env["hostname"]),
        ("cpu", f"{env['cpu_model']} — {env['cores']} cores, {env['cores_usable']} usable"),
        ("ram", _gib(env["ram_bytes"])),
        ("directory", env["dir"]),
        ("file system", f"{env['fs_type']} on {env['mount_point']} ({env['fs_source']})"),
        ("O_DIRECT", _yes_no(env["o_direct"], env["o_direct_reason"])
         + (f", logical block {env['logical_block_size']} B" if env["o_direct"] else "")),
        ("page-cache eviction", _yes_no(env["page_cache_eviction"], env["page_cache_eviction_reason"])),
        *([("model", env["model"]["set"]), ("model files on", ", ".join(env["model"]["file_systems"]))]
          if "model" in env else []),
        # README "Measuring honestly" and every run's note send the reader here
        ("memory_reporting", _memory_reporting(env.get("memory_reporting"))),
    ]
    for name, avail in env["backends"].items():
        rows.append((f"backend {name}", "available" if avail["ok"] else f"unavailable: {avail['reason']}"))
    if "device" in env:
        d = env["device"]
        rows.append(("device", f"{d['name']} ({d['backend']}, {d['arch']}, {'UMA' if d['uma'] else 'discrete'}, "
                               f"{_gib(d['memory_bytes'])})"))
    return rows


@click.command("env")
@click.option("--dir", "directory", default=".", show_default=True,
              help="Directory (or file) whose file system to probe.")
@click.option("--device", default=None, help="Also open this device (e.g. cuda:0) and show its info.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def env(directory: str, device: str | None, as_json: bool) -> None:
    """Machine, file system and device backends."""
    from workbench.measure.run.model import model_facts

    facts = collect_environment(directory, device=device)
    model = model_facts(directory)  # a directory, index file or shard of a set: its files too
    if model is not None:
        facts["model"] = model
    if as_json:
        click.echo(json.dumps(facts, indent=2, sort_keys=True))
        return
    rows = _rows(facts)
    settings = [(k, _setting(k, v)) for k, v in (facts.get("settings") or {}).items()]
    width = max(len(k) for k, _ in rows + settings)
    for key, value in rows:  # a model's file names and mount points are text from the file system: escaped
        click.echo(for_terminal(f"{key:<{width}}  {value}"))
    if settings:
        click.echo("\nload-path settings (recorded with every attempt; reports show those that differ):")
    for key, value in settings:
        click.echo(for_terminal(f"{key:<{width}}  {value}"))


def _setting(key: str, value: Any) -> str:
    if key.endswith("_bytes") and isinstance(value, int):
        return f"{value} B ({value / 2**30:.1f} GiB)" if value >= 2**30 else f"{value} B"
    return str(value)
