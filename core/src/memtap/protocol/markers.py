"""The pluggy markers of memtap's hooks: the one thing every plugin, core's own defaults
among them, needs to implement a hook.

They live with the contracts, below every room, so that a room's default plugin (the
``memory://`` store in :mod:`memtap.storage`, the history injector in
:mod:`memtap.history`...) marks its hooks without importing the hook specifications
(:mod:`memtap.hookspecs`, which name the types of every room they speak of).
"""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "memtap"

#: Decorator marking a function as the specification of a memtap hook (:mod:`memtap.hookspecs`).
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Decorator marking a function as the implementation of a memtap hook.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
