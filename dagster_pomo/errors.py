"""The root of dagster-pomo's exception tree.

Every error a user can cause derives from :class:`PomoError`: corpus errors
(:mod:`dagster_pomo.lang.errors`), input and engine errors, usage errors. A
caller can catch one class and still tell the cases apart by subclass.
"""

from __future__ import annotations


class PomoError(Exception):
    """Base of every error dagster-pomo raises on purpose."""


class UsageError(PomoError):
    """A command or API was called with arguments that cannot work."""


class SettingsError(UsageError):
    """A setting names something that is not there: a Spark master or Spark Connect server
    that cannot be reached, a session that will not start with the configuration given."""
