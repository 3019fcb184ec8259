"""All configuration, read from the environment (Azure app settings, or local.settings.json under func)."""

from functools import lru_cache

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every setting the app reads. Names are the upper-cased field names."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    mongodb_connection_string: str = Field(
        default="", description="MongoDB or Cosmos DB for MongoDB connection string (required outside tests)."
    )
    mongodb_database: str = Field(default="pillbottle", min_length=1, description="Database name.")

    max_event_age_days: int = Field(
        default=30, ge=1, le=365, description="Oldest device event accepted (offline buffering), in days."
    )
    registry_cache_seconds: float = Field(
        default=60.0,
        ge=0,
        le=3600,
        description="How long a worker caches a bottle's registry entry (and so how long a rotated key lingers).",
    )
    heartbeat_retention_days: int = Field(
        default=35,
        ge=2,
        le=3650,
        description="Days a heartbeat bucket is kept after its last write (TTL); must exceed MAX_EVENT_AGE_DAYS.",
    )
    store_max_retries: int = Field(
        default=3, ge=0, le=10, description="Retries of a throttled or failed database call before a 503."
    )
    store_retry_base_ms: int = Field(
        default=100, ge=1, le=10_000, description="First back-off delay; doubles per retry (capped at 2 s)."
    )

    @model_validator(mode="after")
    def _heartbeats_outlive_late_events(self) -> "Settings":
        # A late heartbeat must find its bucket still there, or a report recompute would undercount it.
        if self.heartbeat_retention_days <= self.max_event_age_days:
            raise ValueError(
                f"HEARTBEAT_RETENTION_DAYS ({self.heartbeat_retention_days}) must be greater than "
                f"MAX_EVENT_AGE_DAYS ({self.max_event_age_days})"
            )
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
