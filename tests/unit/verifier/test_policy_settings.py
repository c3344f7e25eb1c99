"""What crosses into the process that runs policies: only PolicySettings, which holds no secret
and no way into the service's stores (issue 25: the signing key never sits next to the worker's
code)."""

from __future__ import annotations

import dataclasses

from pydantic import SecretStr

from marketplace.config import Settings
from marketplace.verifier.policy import PolicySettings


def test_policy_settings_carry_no_secret_and_no_store() -> None:
    names = {f.name for f in dataclasses.fields(PolicySettings)}
    secret_settings = {
        name
        for name, field in Settings.model_fields.items()
        if "SecretStr" in str(field.annotation) or field.annotation is SecretStr
    }
    assert "verifier_private_key" in secret_settings and "jwt_secret" in secret_settings
    assert names.isdisjoint(secret_settings)
    for store in ("database_url", "redis_url"):
        assert store in Settings.model_fields and store not in names
    # Every field is one a policy reads: built from Settings by the same names.
    built = PolicySettings.from_settings(Settings())
    assert {f.name for f in dataclasses.fields(built)} == names
    assert all(name in Settings.model_fields for name in names)
