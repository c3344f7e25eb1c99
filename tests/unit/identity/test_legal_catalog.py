"""Legal document loading, version order and the required-version configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from marketplace.identity import legal
from marketplace.identity.models import LegalDocumentType


def _write(root: Path, document_type: str, version: str, text: str) -> None:
    (root / document_type).mkdir(parents=True, exist_ok=True)
    (root / document_type / f"{version}.md").write_text(text)


def _full_tree(root: Path) -> None:
    for document_type in LegalDocumentType:
        _write(root, document_type.value, "1", f"# {document_type.value} one\n\ntext\n")


def test_version_order_is_natural() -> None:
    versions = ["v10", "v9", "2025-03-01", "2024-11-15", "1.10", "1.9", "1.9.1"]
    ordered = sorted(versions, key=legal.version_sort_key)
    assert ordered.index("v9") < ordered.index("v10")
    assert ordered.index("2024-11-15") < ordered.index("2025-03-01")
    assert ordered.index("1.9") < ordered.index("1.9.1") < ordered.index("1.10")


def test_shipped_documents_cover_every_type() -> None:
    documents = legal.shipped_documents()
    assert {d.document_type for d in documents} == set(LegalDocumentType)
    assert all(d.title and not d.title.startswith("#") for d in documents)
    catalog = legal.load_catalog({})
    assert len(catalog.required) == len(LegalDocumentType)
    assert dict(catalog.required)["terms"] == "2025-03-01"  # the newest terms file


def test_read_documents_title_and_order(tmp_path: Path) -> None:
    _full_tree(tmp_path)
    _write(tmp_path, "terms", "10", "Preamble\n# Terms ten\nbody")
    _write(tmp_path, "terms", "2", "# Terms two\n")
    documents = legal.read_documents(tmp_path)
    terms = [d for d in documents if d.document_type is LegalDocumentType.TERMS]
    assert [d.version for d in terms] == ["1", "2", "10"]
    assert terms[-1].title == "Terms ten"
    assert documents[0].document_type is LegalDocumentType.TERMS  # type order first
    catalog = legal.build_catalog(documents, {})
    assert dict(catalog.required)["terms"] == "10"
    catalog = legal.build_catalog(documents, {"terms": "2"})
    assert dict(catalog.required)["terms"] == "2"
    assert catalog.find("terms", "10") is not None and catalog.find("terms", "3") is None


def test_bad_trees_are_refused(tmp_path: Path) -> None:
    _full_tree(tmp_path)
    _write(tmp_path, "cookies", "1", "# Cookies\n")
    with pytest.raises(ValueError, match="unknown legal document type"):
        legal.read_documents(tmp_path)

    untitled = tmp_path / "untitled"
    _full_tree(untitled)
    _write(untitled, "privacy", "2", "no heading here\n")
    with pytest.raises(ValueError, match="title"):
        legal.read_documents(untitled)


def test_bad_configuration_is_refused(tmp_path: Path) -> None:
    _full_tree(tmp_path)
    documents = legal.read_documents(tmp_path)
    with pytest.raises(ValueError, match="unknown document types"):
        legal.build_catalog(documents, {"cookies": "1"})
    with pytest.raises(ValueError, match="has no file"):
        legal.build_catalog(documents, {"terms": "2"})
    incomplete = [d for d in documents if d.document_type is not LegalDocumentType.PRIVACY]
    with pytest.raises(ValueError, match="privacy"):
        legal.build_catalog(incomplete, {})
