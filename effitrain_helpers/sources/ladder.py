"""Where is the course's own model, processor or data set? One order for all of them.

When the learner names nothing, ``models.resolve_checkpoint`` (models and processors) and ``pairs.load_pairs``
(GLUE MRPC) climb the same ladder, and :func:`course_rung` is that ladder:

1. ``kit``: the classroom's offline kit (``effitrain prefetch``; see ``kit``) holds it;
2. ``cache``: the Hugging Face cache holds it (a probe the caller gives says so);
3. ``hub``: the Hub answers within a few seconds (never with ``HF_HUB_OFFLINE=1``);
4. ``own``: none of these; the caller builds the workbook's own stand-in.

Each caller turns the rung into its own choice (``ModelChoice``, ``DataChoice``) with its own words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from effitrain_helpers.core.hub import hub_problem
from effitrain_helpers.sources.kit import kit_item


@dataclass(frozen=True)
class Rung:
    """The first rung of the ladder that holds the item: ``source`` is ``kit``, ``cache``, ``hub`` or ``own``;
    ``found`` is the ``KitHit`` (kit) or what the cache probe returned (cache), else None; ``why_own`` says why
    the workbook's own is used (``own`` only)."""

    source: str
    found: Any = None
    why_own: str = ""


def course_rung(kit_key: str | None, in_cache: Callable[[], Any]) -> Rung:
    """Climb the ladder for the kit's item ``kit_key`` (None: not a kit item): ``in_cache()`` returns where the
    Hugging Face cache holds it, or None. Never downloads; asks the Hub only when the kit and cache lack it."""
    kit = kit_item(kit_key) if kit_key is not None else None
    if kit is not None:
        return Rung("kit", kit)
    found = in_cache()
    if found is not None:
        return Rung("cache", found)
    problem = hub_problem()
    if problem is None:
        return Rung("hub")
    return Rung("own", why_own=problem)
