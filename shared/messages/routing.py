"""Exchange, queue and routing-key names: built here and nowhere else.

Exchanges (topic, durable), prefixed by the deployment's namespace (default ``dlscope``):

    <ns>.events  facts; routing key = the event type, ``<stream-kind>.<event>``
    <ns>.jobs    work; ``job.<framework>.<hardware>[.<agent>]`` and ``rpc.<service>.<call>``
    <ns>.dlx     dead letters, same routing key as the original message

With partitioned recording (``recorder_partitions`` > 1), ``<ns>.events`` is also bound with
``#`` to ``<ns>.recorder.partitions``, a consistent-hash exchange on the stream id, whose
queues ``<ns>.recorder.p<i>`` each carry the events of some streams.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Topology", "job_key", "rpc_key"]


@dataclass(frozen=True)
class Topology:
    namespace: str = "dlscope"

    @property
    def events(self) -> str:
        return f"{self.namespace}.events"

    @property
    def jobs(self) -> str:
        return f"{self.namespace}.jobs"

    @property
    def dlx(self) -> str:
        return f"{self.namespace}.dlx"

    @property
    def dead_letters(self) -> str:
        """The queue that keeps every dead-lettered message for inspection."""
        return f"{self.namespace}.dead-letters"

    @property
    def recorder_partitions(self) -> str:
        """The consistent-hash exchange that spreads events over the recorders' queues."""
        return f"{self.namespace}.recorder.partitions"

    def recorder_queue(self, partition: int, partitions: int) -> str:
        """Partition ``partition`` of ``partitions``; one partition is the plain queue."""
        return (
            self.queue("recorder") if partitions == 1 else self.queue("recorder", f"p{partition}")
        )

    def queue(self, service: str, *parts: str) -> str:
        return ".".join((self.namespace, service, *parts))


def job_key(framework: str, hardware: str, agent_id: str | None = None) -> str:
    """``job.<framework>.<hardware>`` for any matching agent, ``….<agent>`` for one agent."""
    key = f"job.{framework}.{hardware}"
    return f"{key}.{agent_id}" if agent_id else key


def rpc_key(service: str, call: str) -> str:
    return f"rpc.{service}.{call}"
