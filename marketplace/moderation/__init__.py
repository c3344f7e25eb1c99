"""Messaging moderation rules: the offensive-term filter (``terms``) and the offense/suspension
rule (``offenses``). Pure code, no I/O besides reading term lists at startup; see
docs/messaging.md.
"""
