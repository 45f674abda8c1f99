"""Handing mail to an entity: what it is called, whether it reads now, and waking it up.

Shared by `CollaborationSystem` (direct messages) and `MessageBusSystem` (topics), so both
follow one rule: mail becomes user messages in the recipient's conversation, never in the
middle of a tool round, and lifts `TerminalComponent("reasoning_complete")` — the entity
answered and waits for something new — so that it answers the mail. Any other end stands.
"""

from __future__ import annotations

from collections.abc import Sequence

from ecs_core import EntityId, TerminalComponent, World
from pes_agent.ecs.components import ConversationComponent, PendingToolCallsComponent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.services import identity_of

__all__ = ["WAKE_REASON", "deliver", "entity_name", "ready_for_mail", "wake"]

WAKE_REASON = "reasoning_complete"
"""The one end mail lifts: the entity answered and waits for something new to answer."""


def entity_name(world: World, entity: EntityId) -> str:
    """How an entity is named in the messages others receive from it.

    Its `AgentIdentityComponent.thread_id`, else ``"entity-<id>"`` (also for a deleted entity),
    the names its observations are filed under.
    """
    return identity_of(world, entity)[0]


def wake(world: World, entity: EntityId) -> None:
    """Lift the entity's `TerminalComponent("reasoning_complete")`, if it has a conversation.

    Done as soon as mail is sent, not only when it is handed over, so a `Runner` watching the
    recipient never stops between the two.
    """
    terminal = world.get_component(entity, TerminalComponent)
    if (
        terminal is not None
        and terminal.reason == WAKE_REASON
        and world.has_component(entity, ConversationComponent)
    ):
        world.remove_component(entity, TerminalComponent)


def ready_for_mail(world: World, entity: EntityId) -> bool:
    """Whether mail may become user messages in the entity's conversation now.

    Not without a conversation (code reads the mail), not while a tool round is open (a user
    message between an assistant's tool calls and their results breaks the model APIs'
    pairing), nor once the entity ended for a reason mail does not lift (failed, timed out,
    ...): its mail then waits where it is.
    """
    if not world.has_component(entity, ConversationComponent):
        return False
    if world.has_component(entity, PendingToolCallsComponent):
        return False
    terminal = world.get_component(entity, TerminalComponent)
    return terminal is None or terminal.reason == WAKE_REASON


def deliver(world: World, entity: EntityId, texts: Sequence[str]) -> None:
    """Append `texts` as user messages and wake the entity; only when `ready_for_mail` holds."""
    conversation = world.require_component(entity, ConversationComponent)
    conversation.messages.extend(ChatMessage("user", text) for text in texts)
    wake(world, entity)
