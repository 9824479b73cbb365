"""Finding and loading plugins: entry points in group ``memtap``, plus the built-ins the
composition root hands over (core's defaults: :func:`memtap.memory.default_plugins`).

``MEMTAP_DISABLE_PLUGINS=a,b`` blocks plugins by name (built-ins too);
``MEMTAP_TRACE_PLUGINS=1`` logs every hook call (logger ``memtap.plugins.trace``). A plugin
that fails to import is reported with a :class:`PluginLoadWarning` naming it, and the rest
load as usual.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs
import pluggy

from memtap import hookspecs
from memtap._version import __version__

if TYPE_CHECKING:
    from memtap.protocol.anchors import AgentProfile
    from memtap.protocol.wire import WireProtocol

ENTRY_POINT_GROUP = "memtap"
DISABLE_ENV = "MEMTAP_DISABLE_PLUGINS"
TRACE_ENV = "MEMTAP_TRACE_PLUGINS"

log = logging.getLogger("memtap.plugins")


class PluginLoadWarning(UserWarning):
    """A plugin could not be loaded (it is skipped; the others still work)."""


@attrs.frozen
class PluginInfo:
    """What ``memtap plugins`` shows about one loaded plugin."""

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    builtin: bool = False


def disabled_plugins() -> frozenset[str]:
    """Names listed in ``MEMTAP_DISABLE_PLUGINS``."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(n.strip() for n in raw.split(",") if n.strip())


def memtap_entry_points() -> list[importlib.metadata.EntryPoint]:
    """Installed entry points in the ``memtap`` group."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, remembering which distribution each plugin came from."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.distributions: dict[str, tuple[str | None, str | None]] = {}
        self.builtin_names: set[str] = set()

    def register_builtins(self, plugins: Mapping[str, object], blocked: Iterable[str] = ()) -> None:
        """Register core's built-in plugins (except blocked names)."""
        for name, plugin in plugins.items():
            if name in blocked:
                continue
            self.register(plugin, name=name)
            self.builtin_names.add(name)

    def load_entry_points(self, blocked: Iterable[str] = ()) -> None:
        """Load every ``memtap`` entry point not blocked; warn and go on when one fails."""
        blocked = set(blocked)
        for ep in memtap_entry_points():
            if ep.name in blocked or self.has_plugin(ep.name) or self.is_blocked(ep.name):
                continue
            dist = ep.dist.name if ep.dist is not None else None
            version = ep.dist.version if ep.dist is not None else None
            try:
                plugin = ep.load()
                self.register(plugin, name=ep.name)
            except Exception as exc:
                warnings.warn(
                    f"memtap plugin {ep.name!r} ({ep.value}, from {dist or 'unknown distribution'}) "
                    f"failed to load and is skipped: {type(exc).__name__}: {exc}. Reinstall or "
                    f"upgrade it, or set {DISABLE_ENV}={ep.name} to silence this.",
                    PluginLoadWarning,
                    stacklevel=2,
                )
                continue
            self.distributions[ep.name] = (dist, version)

    def describe(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution, version and implemented hooks."""
        out = []
        for name, plugin in self.list_name_plugin():
            if plugin is None:
                continue
            callers = self.get_hookcallers(plugin) or []
            dist, version = self.distributions.get(name, (None, None))
            if name in self.builtin_names:
                dist, version = "memtap-core", __version__
            out.append(
                PluginInfo(
                    name=name,
                    distribution=dist,
                    version=version,
                    hooks=tuple(sorted(c.name for c in callers)),
                    builtin=name in self.builtin_names,
                )
            )
        return sorted(out, key=lambda p: (not p.builtin, p.name))


def wire_protocols(hook: pluggy.HookRelay) -> dict[str, WireProtocol]:
    """Every plugin's wire protocols (``memtap_wire_protocols``) by name; of two with the
    same name, the first answer's (the plugin registered last, as for firstresult hooks)."""
    protocols: dict[str, WireProtocol] = {}
    for group in hook.memtap_wire_protocols():
        for protocol in group or ():
            protocols.setdefault(protocol.name, protocol)
    return protocols


def agent_profiles(hook: pluggy.HookRelay) -> list[AgentProfile]:
    """Every plugin's agent profiles (``memtap_agent_profiles``), in hook order (the order
    :func:`memtap.protocol.anchors.detect_profile` tries them in)."""
    return [p for group in hook.memtap_agent_profiles() for p in group or ()]


def make_plugin_manager(
    *, defaults: Mapping[str, object], entry_points: bool = True, extra: Iterable[object] = ()
) -> PluginManager:
    """A plugin manager with the built-ins ``defaults`` (by name, registered first, in
    order), the installed plugins (unless ``entry_points`` is false, as in tests) and
    ``extra`` plugin objects. :func:`memtap.memory.plugin_manager` hands it core's
    defaults."""
    pm = PluginManager()
    blocked = disabled_plugins()
    for name in blocked:
        pm.set_blocked(name)
    pm.register_builtins(defaults, blocked)
    if entry_points:
        pm.load_entry_points(blocked)
    for plugin in extra:
        pm.register(plugin)
    if os.environ.get(TRACE_ENV, "").strip() not in ("", "0", "false"):
        trace_log = logging.getLogger("memtap.plugins.trace")
        pm.trace.root.setwriter(lambda msg: trace_log.info(msg.rstrip()))
        pm.enable_tracing()
    return pm
