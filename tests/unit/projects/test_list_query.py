"""Query parsing of `GET /v1/projects`: the query model as the route adapter validates it (string
values, as a query string gives them), and the cursor parameter turned into a keyset position.
No server: the same validation function the adapter calls, on plain dicts."""

from __future__ import annotations

import pytest
from eth_utils import to_checksum_address

from marketplace.errors import InvalidRequest, ValidationDetail
from marketplace.http.routing import _validate
from marketplace.pagination import keyset_page
from marketplace.projects.models import PROJECT_STATUSES, ProjectListQuery
from marketplace.projects.read_models import PROJECT_LIST_CURSOR

OWNER = "0x" + "ab" * 20


def parse(**params: str) -> ProjectListQuery:
    query = _validate(ProjectListQuery, params, "query")
    assert isinstance(query, ProjectListQuery)
    return query


def refused(**params: str) -> list[ValidationDetail]:
    with pytest.raises(InvalidRequest) as caught:
        parse(**params)
    assert caught.value.status == 400 and caught.value.code == "invalid_request"
    details = caught.value.extra["details"]
    assert all(d["location"] == "query" for d in details)
    return details


def test_defaults() -> None:
    query = parse()
    assert query.limit == 20
    assert query.ownerAddress is None and query.status is None
    assert query.effectiveStatus is None and query.cursor is None


def test_unknown_parameters_are_ignored() -> None:
    assert parse(_="1700000000", utm_source="x", Limit="5").limit == 20


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("100", 100), ("020", 20)])
def test_limit_in_range(text: str, value: int) -> None:
    assert parse(limit=text).limit == value


@pytest.mark.parametrize("text", ["0", "101", "-1", "1.5", "ten", "", " ", "1e2", "99999999999999"])
def test_limit_out_of_range_or_not_an_integer(text: str) -> None:
    assert [d["field"] for d in refused(limit=text)] == ["limit"]


@pytest.mark.parametrize(
    "spelled", [OWNER, OWNER.upper().replace("0X", "0x"), to_checksum_address(OWNER)]
)
def test_owner_address_any_case_is_normalised(spelled: str) -> None:
    # Lower-cased at the edge (LowerAddress): what the route filters on as it is.
    assert parse(ownerAddress=spelled).ownerAddress == OWNER


@pytest.mark.parametrize(
    "bad", ["0x123", "0x" + "ab" * 21, "0x" + "zz" * 20, "ab" * 20 + "00", OWNER + " ", ""]
)
def test_bad_owner_address(bad: str) -> None:
    assert [d["field"] for d in refused(ownerAddress=bad)] == ["ownerAddress"]


@pytest.mark.parametrize("status", PROJECT_STATUSES)
def test_every_status_filter(status: str) -> None:
    query = parse(status=status, effectiveStatus=status)
    assert query.status == query.effectiveStatus == status


@pytest.mark.parametrize("bad", ["Draft", "open", "", "bidding ", "disputed"])
def test_unknown_status(bad: str) -> None:
    assert [d["field"] for d in refused(status=bad, effectiveStatus=bad)] == [
        "status",
        "effectiveStatus",
    ]


def test_every_invalid_parameter_is_reported_at_once() -> None:
    details = refused(limit="0", ownerAddress="nope", status="x", cursor="")
    assert sorted(d["field"] for d in details) == ["cursor", "limit", "ownerAddress", "status"]
    assert all(d["message"] and d["type"] for d in details)


def test_control_characters_are_refused_even_where_any_text_goes() -> None:
    assert [d["field"] for d in refused(cursor="abc\x00")] == ["cursor"]


def test_cursor_length_bounds() -> None:
    assert parse(cursor="x" * 200).cursor == "x" * 200
    assert [d["field"] for d in refused(cursor="x" * 201)] == ["cursor"]


def test_cursor_becomes_a_position() -> None:
    assert PROJECT_LIST_CURSOR.position(None) is None
    cursor = PROJECT_LIST_CURSOR.encode(1234, 5)
    assert PROJECT_LIST_CURSOR.position(parse(cursor=cursor).cursor) == (1234, 5)


@pytest.mark.parametrize("cursor", ["x" * 200, PROJECT_LIST_CURSOR.encode(5, 1) + "A", "cDE6NQ"])
def test_a_cursor_we_did_not_issue_is_400_naming_the_parameter(cursor: str) -> None:
    parsed = parse(cursor=cursor).cursor  # passes the model: only the codec knows
    with pytest.raises(InvalidRequest) as caught:
        PROJECT_LIST_CURSOR.position(parsed)
    [detail] = caught.value.extra["details"]
    assert (detail["location"], detail["field"]) == ("query", "cursor")


def test_keyset_page_cuts_the_extra_row_into_a_cursor() -> None:
    rows = [(10, 2), (10, 1), (9, 0)]

    def position(row: tuple[int, int]) -> tuple[int, int]:
        return row

    page, cursor = keyset_page(rows, 2, PROJECT_LIST_CURSOR, position)
    assert page == [(10, 2), (10, 1)]
    assert cursor is not None and PROJECT_LIST_CURSOR.decode(cursor) == (10, 1)
    assert keyset_page(rows[:2], 2, PROJECT_LIST_CURSOR, position) == (rows[:2], None)
    assert keyset_page([], 2, PROJECT_LIST_CURSOR, position) == ([], None)
