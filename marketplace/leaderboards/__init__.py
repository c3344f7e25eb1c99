"""Leaderboards (spec sections 2 and 4, issue #15; docs/leaderboards.md): categories, the owner's
category tags of completed milestones with their revisions. Boards and agent profiles are derived
from these and the indexed read model (not yet)."""
