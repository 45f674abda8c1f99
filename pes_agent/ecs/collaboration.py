"""CollaborationSystem [5]: direct messages between entities, read as user messages.

```python
world.register_system(CollaborationSystem(), priority=5)
writer = world.create_entity(LLMComponent(...), ConversationComponent(),
                             CollaborationComponent(), AgentIdentityComponent("writer"))
send_message(world, researcher, writer, "JWST launched on 25 December 2021.")
# next tick the writer's conversation ends with: user "From researcher: JWST launched on ..."
```

A message waits in the recipient's `CollaborationComponent.inbox` as `(sender, text)` until
`CollaborationSystem` hands it over. A sender is named by its `AgentIdentityComponent.thread_id`,
else ``"entity-<id>"``. A model can message its peers itself with `message_peer_tool(world,
entity)`, a tool built for that entity.

Who is woken, and who is not:

- an entity that answered and stopped (`TerminalComponent("reasoning_complete")`) has that
  terminal lifted the moment mail is sent to it, so `ReasoningSystem` answers the mail and a
  `Runner` watching it keeps going while mail keeps it busy (with `TerminalCleanupSystem`
  registered that terminal is gone anyway). To keep an entity from waking, end it with another
  reason;
- an entity that ended for any other reason (`reasoning_failed`, `provider_exhausted`, ...) or
  is in the middle of a tool round keeps its mail in the inbox: nothing is lost, and it is
  handed over once the entity can read it;
- an entity without a `ConversationComponent` keeps its mail in the inbox for code to read.

Sending to an entity that is not alive or has no `CollaborationComponent` raises `UsageError`
at `send_message` (from the tool, an error result the model reads); the system itself never
fails a tick over mail.
"""

from __future__ import annotations

from ecs_core import EntityId, World
from pes_agent.ecs._delivery import deliver, entity_name, ready_for_mail, wake
from pes_agent.ecs.components import CollaborationComponent
from pes_agent.ecs.events import MessageDeliveredEvent
from pes_agent.errors import ToolExecutionError, UsageError
from pes_agent.tools.base import Tool
from pes_agent.tools.decorator import tool

__all__ = ["CollaborationSystem", "message_peer_tool", "send_message"]


class CollaborationSystem:
    """Turns each entity's inbox into user messages ``"From {sender}: {content}"``.

    For every entity whose inbox holds mail and that can read it now (see the module
    docstring), in the order received: one user message per item, the inbox emptied, then one
    `MessageDeliveredEvent(from_entity, to_entity, message)` per item (`message` is the text as
    sent, without the ``"From ...:"`` prefix). A `"reasoning_complete"` terminal is lifted.
    """

    __slots__ = ()

    async def process(self, world: World) -> None:
        """Hand every readable inbox over to its entity's conversation."""
        delivered: list[MessageDeliveredEvent] = []
        for entity, (collaboration,) in world.query(CollaborationComponent):
            if not collaboration.inbox or not ready_for_mail(world, entity):
                continue
            mail = list(collaboration.inbox)
            collaboration.inbox.clear()
            texts = [f"From {entity_name(world, sender)}: {text}" for sender, text in mail]
            deliver(world, entity, texts)
            delivered.extend(MessageDeliveredEvent(sender, entity, text) for sender, text in mail)
        # Published after every inbox is handed over: a handler that replies puts new mail in
        # an inbox, read next tick, instead of racing this loop.
        for event in delivered:
            await world.events.publish(event)


def send_message(world: World, from_entity: EntityId, to_entity: EntityId, text: str) -> None:
    """Put `text` from `from_entity` in `to_entity`'s inbox; `CollaborationSystem` hands it over.

    The recipient must be alive and carry a `CollaborationComponent` (else `UsageError`, and
    nothing is sent); a recipient that had answered and stopped (`"reasoning_complete"`) is
    woken at once. The sender needs neither: it only names the message. `peers` does not
    restrict who may be messaged; it is the address book of `message_peer_tool`.
    """
    if not isinstance(text, str):
        raise UsageError(f"send_message needs the message as a str, got {type(text).__name__}")
    if not world.entity_exists(to_entity):
        raise UsageError(
            f"cannot send to entity {to_entity}: it is not alive (deleted, or never created "
            "in this world); send to an id world.create_entity() returned"
        )
    collaboration = world.get_component(to_entity, CollaborationComponent)
    if collaboration is None:
        raise UsageError(
            f"entity {to_entity} has no CollaborationComponent, so it has no inbox; "
            f"world.add_component({to_entity}, CollaborationComponent()) first"
        )
    collaboration.inbox.append((from_entity, text))
    wake(world, to_entity)


def message_peer_tool(world: World, entity: EntityId) -> Tool:
    """A ``message_peer(to, message)`` tool for `entity`'s model, addressed to its peers.

    `to` is a peer's name (see the module docstring) or id, among the entity's current
    `CollaborationComponent.peers`; anyone else, or a peer gone since, is an error result
    naming the peers it can reach. Put it in the entity's `ToolRegistryComponent`.
    """
    listed = ", ".join(_names(world, entity)) or "none yet"

    @tool(
        name="message_peer",
        description=(
            "Send a message to one of your peers; their reply arrives later as a user "
            f"message starting with 'From <peer>:'. Your peers: {listed}."
        ),
    )
    async def message_peer(to: str, message: str) -> str:
        """Send a message to a peer."""
        # async, so it runs on the event loop: the world is not safe to touch from a thread.
        names = _peer_names(world, entity)
        recipient = names.get(to.strip())
        if recipient is None:
            raise ToolExecutionError(
                f"{to!r} is not one of your peers; you can message: "
                f"{', '.join(_names(world, entity)) or 'nobody'}"
            )
        try:
            send_message(world, entity, recipient, message)
        except UsageError as error:
            raise ToolExecutionError(f"could not message {to}: {error}") from error
        return f"Message sent to {to}."

    return message_peer


def _names(world: World, entity: EntityId) -> list[str]:
    collaboration = world.get_component(entity, CollaborationComponent)
    if collaboration is None:
        return []
    return [entity_name(world, peer) for peer in collaboration.peers]


def _peer_names(world: World, entity: EntityId) -> dict[str, EntityId]:
    """Each peer by name and by id, so the model may use either."""
    collaboration = world.get_component(entity, CollaborationComponent)
    if collaboration is None:
        return {}
    names: dict[str, EntityId] = {}
    for peer in collaboration.peers:
        names[entity_name(world, peer)] = peer
        names.setdefault(str(peer), peer)
    return names
