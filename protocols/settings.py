"""The one settings object per process, from the environment (prefix CALLBOARD_, plus REDIS_URL)."""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from protocols.codec import DEFAULT_MAX_MESSAGE_BYTES
from protocols.keys import DEFAULT_PREFIX, Keys

DEADLETTER_RAW_BYTES = 4096  # of an entry's bytes a dead letter keeps (size and hash of all)
DEADLETTER_MAXLEN = 10_000  # dead letters kept, about (XADD MAXLEN ~)


class Settings(BaseSettings):
    """Read once at process start and passed in; nothing deeper reads os.environ."""

    model_config = SettingsConfigDict(env_prefix="CALLBOARD_", extra="ignore")

    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("REDIS_URL", "CALLBOARD_REDIS_URL"),
    )
    # the URL names a node of a Redis Cluster (as `redis+cluster://` says it too)
    redis_cluster: bool = False
    prefix: str = DEFAULT_PREFIX
    api_key: str | None = None
    api_url: str = "http://127.0.0.1:8080"  # where specialists read a run's shared context
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # at-least-once delivery
    block_ms: int = 1_000
    read_count: int = 100
    prefetch: int = 0  # entries a replica holds at most (running or queued); 0: 4 x concurrency
    min_idle_ms: int = 30_000  # an entry idle this long in a dead replica is reclaimed
    claim_interval_ms: int = 1_000
    max_deliveries: int = 5  # then the entry is dead-lettered as poison
    # a specialist's write Redis refuses whole (out of memory, read-only) is tried again for
    # this long before its handler fails: the input is not at fault, so it must not be
    # redelivered towards its poison limit meanwhile
    refused_write_retry_s: float = 60.0
    # an operator command whose serving ended the leader's term this many times is then
    # answered with an error, not served again by every next leader
    command_max_tries: int = Field(default=3, ge=1)
    # The engine's partitions (README, "Partitions"): runs are spread over this many, each
    # led by one hub under its own lease; every hub and API process of a prefix must agree.
    partitions: int = Field(default=1, ge=1, le=256)
    stream_maxlen: int = 100_000  # trimming target; never below the oldest pending entry
    audit_maxlen: int = 10_000
    deadletter_raw_bytes: int = Field(default=DEADLETTER_RAW_BYTES, ge=0)
    deadletter_maxlen: int = Field(default=DEADLETTER_MAXLEN, ge=1)
    # how long a specialist's done-markers live (None: its class's `done_ttl_s`, 7 days);
    # keep it at least the hub's run retention, or a late redelivery could run twice
    done_ttl_s: int | None = Field(default=None, ge=1)
    # a specialist's labels, registered with its contract (`target: {filter: labels.gpu}`):
    # CALLBOARD_LABELS=gpu=true,zone=eu (see protocols.targeting.parse_labels)
    labels: str = ""
    # Distributed traces (README, "Traces"): CALLBOARD_TRACING=1 turns them on (0: off,
    # whatever else is set); unset, they are on when the standard OTEL_TRACES_EXPORTER names
    # an exporter (not `none`) or an OTLP endpoint is set. Off, no span is made and no
    # message carries a traceparent.
    tracing: bool | None = None
    otel_traces_exporter: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_TRACES_EXPORTER")
    )
    otel_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"
        ),
    )
    otel_service_name: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_SERVICE_NAME")
    )
    otel_sdk_disabled: bool = Field(  # the standard switch: true turns tracing off
        default=False, validation_alias=AliasChoices("OTEL_SDK_DISABLED")
    )
    # head sampling of runs (protocols.telemetry.Sampler): the standard names and values
    otel_traces_sampler: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_TRACES_SAMPLER")
    )
    otel_traces_sampler_arg: str | None = Field(
        default=None, validation_alias=AliasChoices("OTEL_TRACES_SAMPLER_ARG")
    )
    # span export batches, under the SDK batch processor's standard names (protocols.telemetry)
    otel_bsp_schedule_delay_ms: int = Field(
        default=5_000, gt=0, validation_alias=AliasChoices("OTEL_BSP_SCHEDULE_DELAY")
    )
    otel_bsp_max_queue_size: int = Field(
        default=2_048, gt=0, validation_alias=AliasChoices("OTEL_BSP_MAX_QUEUE_SIZE")
    )
    otel_bsp_max_export_batch_size: int = Field(
        default=512, gt=0, validation_alias=AliasChoices("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
    )

    @property
    def tracing_on(self) -> bool:
        if self.otel_sdk_disabled:
            return False
        if self.tracing is not None:
            return self.tracing
        if self.otel_traces_exporter:
            return self.otel_traces_exporter.strip().lower() != "none"
        return bool(self.otel_endpoint)

    @model_validator(mode="after")
    def _cluster_url(self) -> Settings:
        """CALLBOARD_REDIS_CLUSTER=1 turns `redis://` into `redis+cluster://`: the URL
        alone tells the transport which client to make."""
        scheme, sep, rest = self.redis_url.partition("://")
        if self.redis_cluster and sep and scheme.lower() in ("redis", "rediss"):
            self.redis_url = f"{scheme}+cluster://{rest}"
        return self

    @property
    def keys(self) -> Keys:
        return Keys(self.prefix)
