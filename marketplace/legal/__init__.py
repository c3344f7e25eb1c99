"""Legal document texts shipped with the service: ``documents/<documentType>/<version>.md``.

Loaded at start by :mod:`marketplace.identity.legal`; a new version is a new file.
"""
