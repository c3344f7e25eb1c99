"""Legal documents and acceptances; ``setup`` registers the legal-assent guard hook."""

from __future__ import annotations

import uuid

from aiohttp import web

from marketplace.http import keys
from marketplace.http.routing import AuthMode, Call, Reply, RouteTable
from marketplace.identity import legal
from marketplace.identity.models import (
    LegalAcceptanceRecord,
    LegalAcceptancesResponse,
    LegalAcceptRequest,
    LegalAcceptResponse,
    LegalDocumentRef,
    LegalDocumentsResponse,
    LegalDocumentState,
    LegalDocumentType,
    PublicLegalDocument,
    PublicLegalDocumentsResponse,
)
from marketplace.storage.repositories import legal as repo
from marketplace.ttl_cache import TtlCache

routes = RouteTable(tag="legal")

LEGAL_CATALOG: web.AppKey[legal.LegalCatalog] = web.AppKey("legal_catalog", legal.LegalCatalog)
LEGAL_ASSENTED: web.AppKey[TtlCache[uuid.UUID, bool]] = web.AppKey("legal_assented", TtlCache)
PUBLIC_CACHE_CONTROL = "public, max-age=3600"


def _refs(pairs: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> list[LegalDocumentRef]:
    return [LegalDocumentRef(documentType=LegalDocumentType(t), version=v) for t, v in pairs]


@routes.get(
    "/v1/legal/documents",
    name="listLegalDocuments",
    summary="Legal document versions with the caller's acceptance state",
    auth=AuthMode.EITHER,
    response=LegalDocumentsResponse,
)
async def list_documents(call: Call[None, None, None]) -> LegalDocumentsResponse:
    """Every version of every document type, whether it is required and whether the caller has
    accepted it (explicitly, or implied by a guarded mutation), plus what is still missing."""
    principal = call.require_principal()
    catalog = call.app[LEGAL_CATALOG]
    rows = await repo.list_for_user(call.pool, principal.user_id)
    documents = [
        LegalDocumentState(
            documentType=state.document.document_type,
            version=state.document.version,
            title=state.document.title,
            required=state.required,
            accepted=state.accepted_at is not None,
            acceptedAt=state.accepted_at,
            acceptanceKind=state.kind,
            contentSha256=state.document.sha256,
        )
        for state in legal.document_states(catalog, rows)
    ]
    return LegalDocumentsResponse(
        acceptanceMode=call.settings.legal_acceptance_mode,
        documents=documents,
        requiredVersions=_refs(catalog.required),
        missing=_refs(legal.missing_of(catalog, rows)),
    )


@routes.get(
    "/v1/legal/public-documents",
    name="listPublicLegalDocuments",
    summary="Legal texts, required versions and acceptance mode (public)",
    auth=AuthMode.NONE,
    response=PublicLegalDocumentsResponse,
)
async def public_documents(call: Call[None, None, None]) -> Reply:
    """No authentication; cacheable for an hour (`Cache-Control: public, max-age=3600`)."""
    catalog = call.app[LEGAL_CATALOG]
    documents = [
        PublicLegalDocument(
            documentType=document.document_type,
            version=document.version,
            title=document.title,
            required=catalog.is_required(document),
            contentSha256=document.sha256,
            content=document.content,
        )
        for document in catalog.documents
    ]
    model = PublicLegalDocumentsResponse(
        acceptanceMode=call.settings.legal_acceptance_mode,
        documents=documents,
        requiredVersions=_refs(catalog.required),
    )
    return Reply(model, headers={"Cache-Control": PUBLIC_CACHE_CONTROL})


@routes.get(
    "/v1/legal/acceptances",
    name="listLegalAcceptances",
    summary="The caller's legal acceptance records",
    auth=AuthMode.EITHER,
    response=LegalAcceptancesResponse,
)
async def list_acceptances(call: Call[None, None, None]) -> LegalAcceptancesResponse:
    """Explicit and implied records, oldest first; implied ones name the triggering route."""
    principal = call.require_principal()
    catalog = call.app[LEGAL_CATALOG]
    rows = await repo.list_for_user(call.pool, principal.user_id)
    items = [LegalAcceptanceRecord.from_row(row) for row in rows]
    return LegalAcceptancesResponse(
        userId=principal.user_id,
        acceptanceMode=call.settings.legal_acceptance_mode,
        items=items,
        count=len(items),
        requiredVersions=_refs(catalog.required),
        missing=_refs(legal.missing_of(catalog, rows)),
    )


@routes.post(
    "/v1/legal/acceptances",
    name="acceptLegalDocument",
    summary="Accept a legal document version",
    auth=AuthMode.EITHER,
    response=LegalAcceptResponse,
    body=LegalAcceptRequest,
    errors=(legal.UnknownLegalDocument,),
)
async def accept_document(call: Call[LegalAcceptRequest, None, None]) -> LegalAcceptResponse:
    """`version` must come from the documents listing (400 otherwise). Idempotent: accepting
    again returns the first record. Not a guarded mutation, so a new user can always accept."""
    principal = call.require_principal()
    catalog = call.app[LEGAL_CATALOG]
    row = await legal.accept(
        call.pool, catalog, principal, call.body.documentType.value, call.body.version
    )
    rows = await repo.list_for_user(call.pool, principal.user_id)
    return LegalAcceptResponse(
        userId=principal.user_id,
        acceptanceMode=call.settings.legal_acceptance_mode,
        acceptance=LegalAcceptanceRecord.from_row(row),
        requiredVersions=_refs(catalog.required),
        missing=_refs(legal.missing_of(catalog, rows)),
    )


async def legal_assent_guard(call: Call[object, object, object]) -> None:
    """The ``legal_assent`` guard (see marketplace.http.capabilities): runs for every guarded
    mutation after the verified-email check and before validation, so implied assent is recorded
    even if the request then fails."""
    await legal.enforce(
        call.pool,
        call.app[LEGAL_CATALOG],
        call.settings.legal_acceptance_mode,
        call.require_principal(),
        f"{call.route.method} {call.route.path}",
        call.app[LEGAL_ASSENTED],
    )


def setup(app: web.Application) -> None:
    # Loaded and checked against the configuration now: a required version without a file
    # stops the app from being built.
    app[LEGAL_CATALOG] = legal.load_catalog(app[keys.SETTINGS].legal_required_versions)
    app[LEGAL_ASSENTED] = legal.assented_cache()
