"""The visibility rule is one SQL predicate, and every statement that decides who sees a project
embeds it rather than a copy (the behaviour itself is checked against Postgres by
tests/api/records/test_visibility.py)."""

from __future__ import annotations

import itertools
import re

from marketplace.storage.repositories import projects as repo

STRAY = r"selected_builder_address = any|allowlist &&|owner_address = any"


def test_insiders_are_owner_selected_worker_and_allowlist() -> None:
    clauses = [c.strip() for c in repo.INSIDER.strip("()").split(" OR ")]
    assert clauses == [
        "p.owner_address = any(v.wallets)",
        "p.selected_builder_address = any(v.wallets)",
        "p.allowlist && v.wallets",
    ]
    visible, invited = repo.VISIBLE_TO_VIEWER, repo.INVITED_VIEWER
    assert visible == f"(p.bidding_access = 'open' OR {repo.INSIDER})"
    assert invited == f"p.bidding_access = 'invite_only' AND {repo.INSIDER}"


def test_signed_in_reads_and_the_records_check_embed_the_same_predicate() -> None:
    assert repo.VISIBLE_TO_VIEWER in repo.SELECT_PROJECT_FOR_VIEWER
    assert repo.VISIBLE_TO_VIEWER in repo.SELECT_VISIBLE_PROJECT_PARTIES
    for owner, status, effective, after in itertools.product((False, True), repeat=4):
        sql = repo.list_statement(
            viewer=True, owner=owner, status=status, effective=effective, after=after
        )
        assert repo.VISIBLE_TO_VIEWER in sql  # the page
        assert repo.INVITED_VIEWER in sql  # the invite-only part of the count


def test_anonymous_statements_see_open_projects_only() -> None:
    for owner, status, effective, after in itertools.product((False, True), repeat=4):
        sql = repo.list_statement(
            viewer=False, owner=owner, status=status, effective=effective, after=after
        )
        assert "v.wallets" not in sql and "viewer" not in sql
        assert repo.VISIBLE_TO_ANONYMOUS in sql
    assert "v.wallets" not in repo.SELECT_PROJECT_FOR_ANONYMOUS


def test_no_statement_has_a_stray_copy_of_a_visibility_clause() -> None:
    """A clause of the rule appears only as part of the shared predicate (the viewer_is_owner
    column of the detail read is the one other use of the owner clause)."""
    owner_clause = "p.owner_address = any(v.wallets)"
    statements = [repo.SELECT_PROJECT_FOR_VIEWER, repo.SELECT_VISIBLE_PROJECT_PARTIES] + [
        repo.list_statement(viewer=True, owner=o, status=s, effective=e, after=a)
        for o, s, e, a in itertools.product((False, True), repeat=4)
    ]
    for sql in statements:
        rest = sql.replace(repo.INSIDER, "")
        rest = rest.replace(f"{owner_clause} AS viewer_is_owner", "")
        assert not re.search(STRAY, rest)
