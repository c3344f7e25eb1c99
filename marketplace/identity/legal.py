"""Legal documents, acceptance state and the legal-assent guard (spec section 5 rules 7-8).

Texts ship as ``marketplace/legal/documents/<documentType>/<version>.md``; the title is the first
``# `` heading. They are read once per process at start. Versions order naturally (digit runs
compare as numbers), so ``2025-03-01`` > ``2024-11-15`` and ``v10`` > ``v9``. The required version
of each type is configured (``legal_required_versions``) or, when not configured, the newest file.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from importlib.abc import Traversable

import asyncpg

from marketplace.auth import Principal
from marketplace.config.settings import LegalAcceptanceMode
from marketplace.errors import LegalAcceptanceRequired, MarketplaceError
from marketplace.identity.models import AcceptanceKind, LegalDocumentType
from marketplace.storage.repositories import legal as repo
from marketplace.ttl_cache import TtlCache

VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DOCUMENT_TYPES: tuple[LegalDocumentType, ...] = tuple(LegalDocumentType)


class UnknownLegalDocument(MarketplaceError):
    code = "unknown_legal_document"
    status = 400
    default_message = "no such legal document version in the documents listing"


@dataclass(frozen=True)
class LegalDocument:
    document_type: LegalDocumentType
    version: str
    title: str
    content: str

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()

    @property
    def key(self) -> tuple[str, str]:
        return (self.document_type.value, self.version)


def version_sort_key(version: str) -> tuple[tuple[int, int | str], ...]:
    parts = re.split(r"(\d+)", version)
    return tuple((1, int(p)) if i % 2 else (0, p) for i, p in enumerate(parts))


def _title(content: str, where: str) -> str:
    for line in content.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"legal document {where} has no '# ' title heading")


def read_documents(root: Traversable) -> tuple[LegalDocument, ...]:
    """Every ``<type>/<version>.md`` under ``root``, by type order then version order."""
    found: list[LegalDocument] = []
    known = {t.value for t in DOCUMENT_TYPES}
    for directory in root.iterdir():
        if not directory.is_dir() or directory.name.startswith(("_", ".")):
            continue
        if directory.name not in known:
            raise ValueError(f"unknown legal document type directory: {directory.name}")
        for entry in directory.iterdir():
            if not entry.name.endswith(".md"):
                continue
            version = entry.name[: -len(".md")]
            if not VERSION_RE.match(version):
                raise ValueError(f"bad legal document version file name: {entry.name}")
            content = entry.read_text(encoding="utf-8")
            where = f"{directory.name}/{entry.name}"
            document_type = LegalDocumentType(directory.name)
            found.append(LegalDocument(document_type, version, _title(content, where), content))
    order = {t: i for i, t in enumerate(DOCUMENT_TYPES)}
    found.sort(key=lambda d: (order[d.document_type], version_sort_key(d.version)))
    return tuple(found)


@functools.cache
def shipped_documents() -> tuple[LegalDocument, ...]:
    return read_documents(resources.files("marketplace.legal").joinpath("documents"))


@dataclass(frozen=True)
class LegalCatalog:
    documents: tuple[LegalDocument, ...]
    required: tuple[tuple[str, str], ...]  # (documentType, version), in type order

    def find(self, document_type: str, version: str) -> LegalDocument | None:
        for document in self.documents:
            if document.key == (document_type, version):
                return document
        return None

    def is_required(self, document: LegalDocument) -> bool:
        return document.key in self.required


def build_catalog(
    documents: Sequence[LegalDocument], required_versions: Mapping[str, str]
) -> LegalCatalog:
    """Check the configuration against the files; every type needs at least one version."""
    known = {t.value for t in DOCUMENT_TYPES}
    unknown = sorted(set(required_versions) - known)
    if unknown:
        raise ValueError(f"legal_required_versions names unknown document types: {unknown}")
    required: list[tuple[str, str]] = []
    for document_type in DOCUMENT_TYPES:
        versions = [d.version for d in documents if d.document_type is document_type]
        if not versions:
            raise ValueError(f"no legal document file for {document_type.value}")
        wanted = required_versions.get(document_type.value, versions[-1])
        if wanted not in versions:
            raise ValueError(
                f"legal_required_versions: {document_type.value} version {wanted!r} has no "
                f"file; shipped versions: {versions}"
            )
        required.append((document_type.value, wanted))
    return LegalCatalog(tuple(documents), tuple(required))


def load_catalog(required_versions: Mapping[str, str]) -> LegalCatalog:
    return build_catalog(shipped_documents(), required_versions)


def refs(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"documentType": t, "version": v} for t, v in pairs]


# --- acceptance state -----------------------------------------------------------------------


@dataclass(frozen=True)
class DocumentState:
    document: LegalDocument
    required: bool
    accepted_at: datetime | None
    kind: AcceptanceKind | None


def document_states(
    catalog: LegalCatalog, acceptances: Sequence[repo.AcceptanceRow]
) -> list[DocumentState]:
    earliest: dict[tuple[str, str], datetime] = {}
    explicit: set[tuple[str, str]] = set()
    for row in acceptances:
        key = (row.document_type, row.version)
        if key not in earliest or row.accepted_at < earliest[key]:
            earliest[key] = row.accepted_at
        if row.kind == AcceptanceKind.EXPLICIT:
            explicit.add(key)
    states = []
    for document in catalog.documents:
        accepted_at = earliest.get(document.key)
        kind = None
        if accepted_at is not None:
            kind = AcceptanceKind.EXPLICIT if document.key in explicit else AcceptanceKind.IMPLIED
        states.append(DocumentState(document, catalog.is_required(document), accepted_at, kind))
    return states


def missing_of(
    catalog: LegalCatalog, acceptances: Sequence[repo.AcceptanceRow]
) -> list[tuple[str, str]]:
    accepted = {(row.document_type, row.version) for row in acceptances}
    return [pair for pair in catalog.required if pair not in accepted]


async def accept(
    pool: asyncpg.Pool,
    catalog: LegalCatalog,
    principal: Principal,
    document_type: str,
    version: str,
) -> repo.AcceptanceRow:
    """Record explicit assent; idempotent (a repeat returns the first record)."""
    if catalog.find(document_type, version) is None:
        raise UnknownLegalDocument(
            f"{document_type} version {version!r} is not in the documents listing"
        )
    await repo.record(
        pool,
        principal.user_id,
        [(document_type, version)],
        kind=AcceptanceKind.EXPLICIT.value,
        accepted_via=principal.kind.value,
        api_key_id=principal.api_key_id,
        trigger_route=None,
    )
    row = await repo.get_one(
        pool, principal.user_id, document_type, version, AcceptanceKind.EXPLICIT.value
    )
    assert row is not None
    return row


# Users seen with every required version accepted, per frontend. Acceptances are never withdrawn,
# so a "yes" stays true; it is still forgotten after a while, for a user deleted and made again.
# Saves the check's query on nearly every guarded mutation (bench/messaging.py).
ASSENTED_TTL_SECONDS = 300.0
ASSENTED_CACHE_SIZE = 100_000


def assented_cache() -> TtlCache[uuid.UUID, bool]:
    return TtlCache(ASSENTED_CACHE_SIZE)


async def enforce(
    pool: asyncpg.Pool,
    catalog: LegalCatalog,
    mode: LegalAcceptanceMode,
    principal: Principal,
    trigger_route: str,
    assented: TtlCache[uuid.UUID, bool] | None = None,
) -> list[tuple[str, str]]:
    """The legal-assent check of a guarded mutation; returns what was recorded as implied.

    ``strict``: missing required versions raise 403 ``legal_acceptance_required``.
    ``implicit``: they are recorded as implied assent in their own autocommitted statement (given
    the pool, not a request transaction), so the record stays whatever the request does next.
    ``off``: nothing is checked. ``assented``: users known to have accepted this ``catalog``'s
    required versions (:func:`assented_cache`, one per catalog), skipped and kept up to date.
    """
    if mode is LegalAcceptanceMode.OFF:
        return []
    if assented is not None and assented.get(principal.user_id):
        return []
    missing = await repo.missing(pool, principal.user_id, catalog.required)
    if not missing:
        if assented is not None:
            assented.put(principal.user_id, True, ASSENTED_TTL_SECONDS)
        return []
    if mode is LegalAcceptanceMode.STRICT:
        names = ", ".join(f"{t} {v}" for t, v in missing)
        raise LegalAcceptanceRequired(
            refs(missing), f"accept the required legal documents first: {names}"
        )
    await repo.record(
        pool,
        principal.user_id,
        missing,
        kind=AcceptanceKind.IMPLIED.value,
        accepted_via=principal.kind.value,
        api_key_id=principal.api_key_id,
        trigger_route=trigger_route,
    )
    if assented is not None:
        assented.put(principal.user_id, True, ASSENTED_TTL_SECONDS)
    return missing
