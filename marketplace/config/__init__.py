from marketplace.config.settings import LegalAcceptanceMode, Settings, load_settings

__all__ = ["LegalAcceptanceMode", "Settings", "load_settings"]
