"""MARKETPLACE_SMTP_URL: parsing into a target, and refusing what cannot work."""

from __future__ import annotations

import pytest

from marketplace.config import Settings
from marketplace.config.mail import SmtpTarget, parse_smtp_url
from marketplace.config.settings import SecretSettingError


def test_smtp_defaults_to_port_25_without_credentials() -> None:
    assert parse_smtp_url("smtp://mail.example.com") == SmtpTarget("smtp", "mail.example.com", 25)


def test_smtps_defaults_to_port_465_and_means_implicit_tls() -> None:
    target = parse_smtp_url("SMTPS://Mail.Example.com/")
    assert (target.scheme, target.host, target.port) == ("smtps", "mail.example.com", 465)
    assert target.implicit_tls
    assert not parse_smtp_url("smtp://h").implicit_tls


def test_port_and_percent_encoded_credentials_are_decoded() -> None:
    target = parse_smtp_url("smtp://bob%40example.com:p%40ss%3Aw%2Fd%20x@10.0.0.5:2525")
    assert (target.host, target.port) == ("10.0.0.5", 2525)
    assert target.username == "bob@example.com"
    assert target.password == "p@ss:w/d x"


def test_ipv6_hosts_are_accepted_and_described_in_brackets() -> None:
    target = parse_smtp_url("smtp://[::1]:2525")
    assert (target.host, target.port) == ("::1", 2525)
    assert target.describe() == "smtp://[::1]:2525"


def test_the_password_never_shows_in_repr_or_description() -> None:
    target = parse_smtp_url("smtps://alice:hunter2secret@smtp.example.com:587")
    assert "hunter2secret" not in repr(target)
    assert target.describe() == "smtps://alice@smtp.example.com:587"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://mail.example.com", "must start with smtp:// or smtps://"),
        ("mail.example.com:25", "must start with smtp:// or smtps://"),
        ("", "must start with smtp:// or smtps://"),
        ("smtp://", "names no host"),
        ("smtp://:pw@:25", "names no host"),
        ("smtp://h:notaport", "bad host or port"),
        ("smtp://h:70000", "bad host or port"),
        ("smtp://h:0", "between 1 and 65535"),
        ("smtp://h/inbox", "no path, query or fragment"),
        ("smtp://h?tls=1", "no path, query or fragment"),
        ("smtp://:secretpw@h", "password but no user"),
    ],
)
def test_bad_urls_are_refused_with_a_clear_message(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_smtp_url(url)
    assert "secretpw" not in str(caught.value)


def test_settings_refuse_a_bad_url_without_echoing_it() -> None:
    with pytest.raises(SecretSettingError) as caught:
        Settings(smtp_url="imap://user:topsecret@mail.example.com")  # type: ignore[arg-type]
    assert "MARKETPLACE_SMTP_URL" in str(caught.value)
    assert "topsecret" not in str(caught.value)


def test_settings_keep_the_url_secret_and_expose_the_target() -> None:
    settings = Settings(smtp_url="smtp://u:topsecret@mail.example.com:2525")  # type: ignore[arg-type]
    assert "topsecret" not in repr(settings) and "topsecret" not in str(settings.model_dump())
    assert settings.smtp_target == SmtpTarget("smtp", "mail.example.com", 2525, "u", "topsecret")


def test_an_empty_smtp_url_means_none_configured() -> None:
    settings = Settings(smtp_url="")  # type: ignore[arg-type]
    assert settings.smtp_url is None and settings.smtp_target is None


def test_notification_settings_defaults_and_bounds() -> None:
    settings = Settings()
    assert settings.mail_from == "Marketplace <marketplace@localhost>"
    assert settings.notification_preview_chars == 140
    assert settings.notification_max_attempts == 5
    assert Settings(notification_preview_chars=0).notification_preview_chars == 0
    for bad in ({"notification_preview_chars": -1}, {"notification_preview_chars": 2001}):
        with pytest.raises(ValueError, match="notification_preview_chars"):
            Settings(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="notification_max_attempts"):
        Settings(notification_max_attempts=0)


@pytest.mark.parametrize(
    "value",
    ["not an address", "a@b.example, c@d.example", "Evil <x@y.example>\r\nBcc: z@z.example"],
)
def test_mail_from_must_be_one_clean_address(value: str) -> None:
    with pytest.raises(ValueError, match="MARKETPLACE_MAIL_FROM"):
        Settings(mail_from=value)


def test_mail_from_accepts_a_display_name() -> None:
    assert Settings(mail_from="Shop <noreply@shop.example>").mail_from == (
        "Shop <noreply@shop.example>"
    )


def test_mail_errors_survive_pickling_with_their_fields() -> None:
    import pickle

    from marketplace.notifications.mailer import PermanentMailError, TransientMailError

    for error in (PermanentMailError("550 no such user", 550), TransientMailError("timed out")):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert (copy.description, copy.code, str(copy)) == (
            error.description,
            error.code,
            error.description,
        )
    assert TransientMailError("x").transient and not PermanentMailError("x").transient


def test_actors_get_the_real_smtp_url_as_a_secret() -> None:
    import ray.cloudpickle as cloudpickle

    from marketplace.actors.settings import ActorSettings

    url = "smtp://u:topsecret@mail.example.com:2525"
    sent = ActorSettings.of(Settings(smtp_url=url))  # type: ignore[arg-type]
    received = cloudpickle.loads(cloudpickle.dumps(sent))
    assert received.smtp_url is not None and received.smtp_url.get_secret_value() == url
    assert "topsecret" not in repr(received)
    assert received.smtp_target == SmtpTarget("smtp", "mail.example.com", 2525, "u", "topsecret")
    assert ActorSettings.of(Settings()).smtp_url is None
