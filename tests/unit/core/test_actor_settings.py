"""Settings handed to actors: one typed model, secrets kept as SecretStr, pickled as they are."""

from __future__ import annotations

import pytest
import ray.cloudpickle as cloudpickle
from pydantic import SecretStr

from marketplace.actors.settings import WITHHELD_FROM_ACTORS, ActorSettings
from marketplace.config import Settings

DEV_VERIFIER_PRIVATE_KEY = "0x" + "5e" * 32

SMTP_URL = "smtp://user:pa%40ss@mail.example:2525"


def full_settings() -> Settings:
    return Settings(
        jwt_secret=SecretStr("j" * 40),
        scheduler_secret=SecretStr("s" * 40),
        smtp_url=SecretStr(SMTP_URL),
        notification_unsubscribe_secret=SecretStr("u" * 40),
        verifier_private_key=SecretStr(DEV_VERIFIER_PRIVATE_KEY),
        database_url="postgresql://frontend/db",
        project_shards=3,
        dispute_admin_wallets=["0x" + "AB" * 20],
    )


def through_ray(settings: ActorSettings) -> ActorSettings:
    """What an actor's constructor receives (Ray pickles arguments with cloudpickle)."""
    received = cloudpickle.loads(cloudpickle.dumps(settings))
    assert isinstance(received, ActorSettings)
    return received


def test_every_secret_reaches_actors_as_a_secret_but_the_withheld_ones() -> None:
    """A secret setting added later needs no line of its own: it crosses as a SecretStr."""
    secrets = {
        name for name, info in Settings.model_fields.items() if "SecretStr" in str(info.annotation)
    }
    assert {"smtp_url", "notification_unsubscribe_secret", "verifier_private_key"} <= secrets
    assert set(WITHHELD_FROM_ACTORS) <= secrets
    settings = full_settings()
    received = through_ray(ActorSettings.of(settings))
    for name in secrets:
        value = getattr(received, name)
        if name in WITHHELD_FROM_ACTORS:
            assert value is None, name
        else:
            assert isinstance(value, SecretStr), name
            assert value.get_secret_value() == getattr(settings, name).get_secret_value(), name
    # Nothing reveals them on the way: the model's text masks every one.
    assert "j" * 40 not in repr(received) and "pa%40ss" not in repr(received)
    assert received.verifier_private_key is not None
    assert received.verifier_private_key.get_secret_value() == DEV_VERIFIER_PRIVATE_KEY
    assert received.smtp_target is not None and received.smtp_target.password == "pa@ss"


def test_every_other_setting_arrives_as_validated() -> None:
    settings = full_settings()
    received = through_ray(ActorSettings.of(settings, database_url="postgresql://resolved/db"))
    assert received.database_url == "postgresql://resolved/db"
    for name in Settings.model_fields:
        if name not in (*WITHHELD_FROM_ACTORS, "database_url"):
            assert getattr(received, name) == getattr(settings, name), name
    assert received.dispute_admin_wallets == ["0x" + "ab" * 20]  # normalised once, not again
    assert ActorSettings.of(Settings()).verifier_private_key is None


def test_an_actor_does_not_read_its_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unpickling runs no settings source: a variable on the actor's node changes nothing."""
    pickled = cloudpickle.dumps(ActorSettings.of(full_settings()))
    monkeypatch.setenv("MARKETPLACE_JWT_SECRET", "e" * 40)
    monkeypatch.setenv("MARKETPLACE_PROJECT_SHARDS", "7")
    received = cloudpickle.loads(pickled)
    assert received.jwt_secret is None
    assert received.project_shards == 3


def test_the_model_is_frozen() -> None:
    settings = ActorSettings.of(full_settings())
    with pytest.raises(ValueError, match="frozen"):
        settings.project_shards = 5  # type: ignore[misc]


def test_the_runtime_builds_them_once() -> None:
    from marketplace.actors.runtime import ActorRuntime

    runtime = ActorRuntime(full_settings(), database_url="postgresql://resolved/db")
    first = runtime.actor_settings()
    assert runtime.actor_settings() is first
    assert first.database_url == "postgresql://resolved/db"
    assert first.jwt_secret is None
