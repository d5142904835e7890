"""The RabbitMQ adapter of the broker port, through aio-pika (``AmqpBroker``).

Channels, and why there are several:
- one robust channel declares the exchanges and the dead-letter queue, so that aio-pika
  declares them again after a reconnect (a broker that lost its data gets them back)
  (``broker``);
- one robust channel per subscription, so its QoS is its own prefetch, aio-pika restores its
  queue, bindings and consumer after a reconnect, and closing it hands every unsettled
  delivery back to RabbitMQ (``consuming``);
- one plain channel with publisher confirms for publishing, replaced when it closes: a
  channel error (an undeclared exchange) or a lost connection must not end the adapter, and
  a plain channel is never reopened behind our back by aio-pika (``publishing``);
- short-lived plain channels for one-off checks, whose 404s may close them harmlessly
  (``link``, ``exchanges``);
- a plain channel per ``holding`` block, which holds the messages it took unacknowledged
  until it closes and RabbitMQ hands them back (``holding``).

Beyond the port, for RabbitMQ alone: what a tool does to a deployment's queues from outside
it. ``dlscope dlq`` reads the dead-letter queue (``holding``) and replays letters
(``republish``); the test harness checks for queues and removes a namespace's exchanges.
Nothing else in dlscope imports aio-pika (an import contract in pyproject.toml says so).
"""

from shared.messaging.amqp.broker import AmqpBroker
from shared.messaging.amqp.holding import HeldMessage

__all__ = ["AmqpBroker", "HeldMessage"]
