"""Unsubscribe tokens and their secret: the token binds user and event type, the secret comes
from the settings, `up` keeps a dev secret in the data dir, `serve` refuses to start without."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from marketplace.config import Settings
from marketplace.notifications.errors import InvalidUnsubscribeToken
from marketplace.notifications.models import NotificationEventType
from marketplace.notifications.unsubscribe import (
    TOKEN_LENGTH,
    MissingUnsubscribeSecret,
    make_token,
    read_token,
    unsubscribe_key,
)
from marketplace_devstack.embedded.stack import dev_notification_secret
from tests.support.serve_cli import serve_with

KEY = b"k" * 32


def test_round_trip_for_every_event_type() -> None:
    user_id = uuid.uuid4()
    for event_type in NotificationEventType:
        token = make_token(KEY, user_id, event_type)
        assert len(token) == TOKEN_LENGTH
        assert token.replace("-", "").replace("_", "").replace(".", "").isalnum()
        target = read_token(KEY, token)
        assert (target.user_id, target.event_type) == (user_id, event_type)
        with pytest.raises(InvalidUnsubscribeToken):
            read_token(b"other" * 8, token)
    # Deterministic per (user, type); different for another user or type.
    a = make_token(KEY, user_id, NotificationEventType.BID_DRAFT)
    assert a == make_token(KEY, user_id, NotificationEventType.BID_DRAFT)
    assert a != make_token(KEY, uuid.uuid4(), NotificationEventType.BID_DRAFT)
    assert a != make_token(KEY, user_id, NotificationEventType.DIRECT_MESSAGE)


def test_the_key_comes_from_the_settings_and_is_required() -> None:
    with pytest.raises(MissingUnsubscribeSecret, match="NOTIFICATION_UNSUBSCRIBE_SECRET"):
        unsubscribe_key(Settings())
    secret = "s" * 40
    assert unsubscribe_key(Settings(notification_unsubscribe_secret=SecretStr(secret))) == (
        secret.encode()
    )
    with pytest.raises(ValidationError, match="at least 32 characters"):
        Settings(notification_unsubscribe_secret=SecretStr("short"))
    # An empty variable is "not configured", as for the other optional settings.
    empty = Settings.model_validate({"notification_unsubscribe_secret": ""})
    assert empty.notification_unsubscribe_secret is None


def test_up_keeps_a_dev_secret_in_the_data_dir(tmp_path: Path) -> None:
    settings = dev_notification_secret(Settings(data_dir=tmp_path))
    assert settings.notification_unsubscribe_secret is not None
    path = tmp_path / "dev-notification-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = settings.notification_unsubscribe_secret.get_secret_value()
    assert path.read_text() == secret and len(secret) >= 32
    # Reused after a restart, so mailed links keep working.
    again = dev_notification_secret(Settings(data_dir=tmp_path))
    assert again.notification_unsubscribe_secret is not None
    assert again.notification_unsubscribe_secret.get_secret_value() == secret
    # A configured secret wins and no file is consulted.
    configured = SecretStr("c" * 32)
    kept = dev_notification_secret(
        Settings(data_dir=tmp_path / "other", notification_unsubscribe_secret=configured)
    )
    assert kept.notification_unsubscribe_secret == configured
    assert not (tmp_path / "other").exists()


def test_serve_refuses_to_start_without_the_secret() -> None:
    done = serve_with(
        MARKETPLACE_DATABASE_URL="postgresql://unused/db",
        MARKETPLACE_REDIS_URL="redis://unused",
        MARKETPLACE_JWT_SECRET="j" * 40,
    )
    assert done.returncode == 2, done.stderr
    assert "MARKETPLACE_NOTIFICATION_UNSUBSCRIBE_SECRET" in done.stderr


def test_actors_get_the_unsubscribe_secret_but_not_the_session_secrets() -> None:
    import ray.cloudpickle as cloudpickle

    from marketplace.actors.settings import ActorSettings

    secret = "a" * 40
    settings = Settings(
        jwt_secret=SecretStr("j" * 40), notification_unsubscribe_secret=SecretStr(secret)
    )
    received = cloudpickle.loads(cloudpickle.dumps(ActorSettings.of(settings)))
    assert received.jwt_secret is None
    assert unsubscribe_key(received) == secret.encode()
    assert ActorSettings.of(Settings()).notification_unsubscribe_secret is None


def test_the_composer_accepts_the_link_and_puts_it_in_list_unsubscribe() -> None:
    from marketplace.notifications.email import EmailContent, compose
    from marketplace.notifications.unsubscribe import unsubscribe_url

    user_id = uuid.uuid4()
    settings = Settings(
        public_base_url="https://market.example",
        notification_unsubscribe_secret=SecretStr("s" * 40),
    )
    url = unsubscribe_url(settings, user_id, NotificationEventType.DIRECT_MESSAGE)
    message = compose(
        EmailContent(
            to="bob@example.com",
            subject="New direct message",
            summary="alice sent you a direct message.",
            link_url="https://market.example/messages",
            unsubscribe_url=url,
        ),
        mail_from=settings.mail_from,
        preview_chars=settings.notification_preview_chars,
    )
    assert message["List-Unsubscribe"] == f"<{url}>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    token = url.split("token=", 1)[1]
    target = read_token(b"s" * 40, token)
    assert (target.user_id, target.event_type) == (user_id, NotificationEventType.DIRECT_MESSAGE)
