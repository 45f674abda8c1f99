"""One streamed model call on behalf of one entity: the helper every ECS agent system shares.

```python
from pes_agent.ecs._model import call_model, system_prompt_of

response = await call_model(
    world, entity, conversation.messages,
    phase="compaction",                       # an LLMPhase: labels observations and requests
    system_prompt="Summarise the conversation so far in a few sentences.",
)
summary = response.text                       # also .thoughts, .tool_calls, .usage
```

`call_model` does what PES phases do for a model call, for an ECS entity:

- the provider is the entity's `LLMComponent.provider` (or the `llm` passed in): a provider
  object is used as it is; a ``"NAME:MODEL"`` string or a `ProviderConfig` is resolved through
  the world's one `ProviderPool` (`pes_agent.ecs.services`), so clients are shared and closed;
- `system_prompt`, when given, is sent first and is not part of `messages` (callers never store
  it); `system_prompt_of(world, entity)` is the entity's own (`SystemPromptComponent` wins over
  `LLMComponent.system_prompt`);
- the call streams through `RunModelCaller`, the helper PES planning and synthesis use, so it
  records LLM_STREAM_START / METADATA / END (or LLM_STREAM_ERROR) and one THOUGHTS observation
  per thinking block under the entity's thread and trace (`identity_of`), when the world's
  services have an observation recorder;
- with `stream_events=True` it publishes the entity's stream events on `world.events`:
  `StreamStartEvent`, `StreamReasoningDeltaEvent`… `StreamEndEvent` (always, also when the call
  fails, with `error` set; a provider retry after tokens were sent ends the stream with an error
  and starts a new one, so a UI can reset).

- with a `UsageLimitsComponent` on the entity, the call is held to its limits through the PES
  `RunBudget` checks: a call the entity has no room for is not made, and an answer whose
  tokens cross a limit is not returned. Either way the entity ends with
  `TerminalComponent("usage_limit")` and `UsageLimitExceeded` is raised, for the calling
  system to report as an `ErrorComponent` like any failure. Every call made, answered or not,
  is added to the entity's `UsageSpentComponent` with its tokens (retried attempts included).

It returns the `LLMResponse` (text, thinking blocks, native `ToolCallEvent`s, usage) and raises
`ProviderError` when the call fails (`ScriptExhaustedError` when a scripted model ran out),
`UsageLimitExceeded` as above, or `UsageError` when the entity has no `LLMComponent` and none
is passed. Apart from the entity's spend and its end over budget it changes no component:
what to do with the answer is the calling system's business.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ecs_core import EntityId, EventBus, World
from pes_agent.config import LLMParams
from pes_agent.ecs import events
from pes_agent.ecs._budget import add_model_spend, end_over_budget, model_budget
from pes_agent.ecs.components import LLMComponent, SystemPromptComponent
from pes_agent.ecs.messages import ChatMessage
from pes_agent.ecs.services import identity_of, services_of
from pes_agent.errors import UsageError, UsageLimitExceeded
from pes_agent.observing.streams import StreamEvent, StreamSocket
from pes_agent.observing.types import Observation, ObservationType
from pes_agent.pes.llm_call import RunModelCaller
from pes_agent.pes.recorder import RunRecorder
from pes_agent.protocols import LLMResponse
from pes_agent.providers.base import LLMPhase, LLMProvider, PromptMessage, ToolChoice
from pes_agent.tools.base import ToolSchema

__all__ = ["call_model", "prompt_messages", "recorder_for", "system_prompt_of"]


async def call_model(
    world: World,
    entity: EntityId,
    messages: Sequence[ChatMessage],
    *,
    phase: LLMPhase,
    system_prompt: str | None = None,
    llm: LLMComponent | None = None,
    tools: Sequence[ToolSchema] = (),
    tool_choice: ToolChoice | None = None,
    response_format: dict[str, Any] | None = None,
    stream_events: bool = False,
) -> LLMResponse:
    """Stream one model call for `entity` and return its response (see the module docstring)."""
    if llm is None:
        llm = world.get_component(entity, LLMComponent)
        if llm is None:
            raise UsageError(
                f"entity {entity} has no LLMComponent; add one, e.g. "
                "world.add_component(entity, LLMComponent('openai:gpt-4o-mini'))"
            )
    provider = services_of(world).providers.get(llm.provider)
    relay = _StreamRelay(world.events, entity, provider) if stream_events else None
    socket = StreamSocket()
    if relay is not None:
        socket.subscribe(relay)
        await relay.start()
    caller = RunModelCaller(
        provider=provider,
        recorder=recorder_for(world, entity),
        stream=socket,
        params=LLMParams(temperature=llm.temperature, max_tokens=llm.max_tokens),
        budget=model_budget(world, entity),
    )
    try:
        response = await caller(
            prompt_messages(messages, system_prompt),
            phase=phase,
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
        )
    except BaseException as error:
        # Cancellation included: whoever watches the stream must see it end.
        if relay is not None:
            await relay.end(error=str(error) or type(error).__name__)
        if isinstance(error, UsageLimitExceeded):
            end_over_budget(world, entity)
        raise
    finally:
        # A call that failed or crossed a limit was still made, and its tokens were spent.
        add_model_spend(world, entity, caller.usage, caller.calls)
    if relay is not None:
        await relay.end()
    return response


def system_prompt_of(world: World, entity: EntityId) -> str | None:
    """The entity's system prompt; `SystemPromptComponent` wins over `LLMComponent`'s."""
    component = world.get_component(entity, SystemPromptComponent)
    if component is not None:
        return component.content
    llm = world.get_component(entity, LLMComponent)
    return llm.system_prompt if llm is not None else None


def prompt_messages(
    messages: Iterable[ChatMessage], system_prompt: str | None = None
) -> list[PromptMessage]:
    """The provider-neutral prompt: `system_prompt` first (when given), then `messages`, with
    their tool calls and tool-call ids kept so providers send native tool messages."""
    prompt = [PromptMessage("system", system_prompt)] if system_prompt else []
    prompt.extend(
        PromptMessage(
            message.role,
            message.content,
            name=message.name,
            tool_calls=tuple(message.tool_calls or ()),
            tool_call_id=message.tool_call_id,
        )
        for message in messages
    )
    return prompt


def recorder_for(world: World, entity: EntityId) -> RunRecorder:
    """A recorder of the entity's observations (its thread and trace filled in); it records
    nothing when the world's services have no observation recorder."""
    thread_id, trace_id = identity_of(world, entity)
    observations = services_of(world).observations
    return RunRecorder(observations or _NO_OBSERVATIONS, thread_id, trace_id)


class _NoObservations:
    """An `ObservationRecorder` that keeps nothing: for worlds without observations."""

    async def record(self, observation: Observation | None = None, /, **fields: Any) -> Observation:
        return observation if observation is not None else Observation(**fields)

    def subscribe(
        self,
        callback: Callable[[Observation], Awaitable[None] | None],
        *,
        types: Iterable[ObservationType | str] | None = None,
        thread_id: str | None = None,
    ) -> Callable[[], None]:
        return lambda: None

    async def get_observations(
        self,
        thread_id: str,
        *,
        types: Sequence[ObservationType | str] | None = None,
        trace_id: str | None = None,
    ) -> list[Observation]:
        return []


_NO_OBSERVATIONS = _NoObservations()


class _StreamRelay:
    """Turns one call's token stream into the entity's stream events on the world's bus."""

    __slots__ = ("_bus", "_content", "_content_started", "_entity", "_provider", "_reasoning")

    def __init__(self, bus: EventBus, entity: EntityId, provider: LLMProvider) -> None:
        self._bus = bus
        self._entity = entity
        self._provider = provider
        self._content: list[str] = []
        self._reasoning: list[str] | None = None  # None: no thinking, or its end was published
        self._content_started = False

    async def start(self) -> None:
        self._content.clear()
        self._reasoning = None
        self._content_started = False
        started = events.StreamStartEvent(self._entity, self._provider.name, self._provider.model)
        await self._bus.publish(started)

    async def end(self, *, error: str | None = None) -> None:
        await self._bus.publish(events.StreamEndEvent(self._entity, "".join(self._content), error))

    async def __call__(self, event: StreamEvent) -> None:
        kind = event.kind
        if kind == "thinking":
            if self._reasoning is None:
                self._reasoning = []
            self._reasoning.append(event.text)
            await self._bus.publish(events.StreamReasoningDeltaEvent(self._entity, event.text))
        elif kind == "token":
            await self._end_reasoning()
            if not self._content_started:
                self._content_started = True
                await self._bus.publish(events.StreamContentStartEvent(self._entity))
            self._content.append(event.text)
            await self._bus.publish(events.StreamContentDeltaEvent(self._entity, event.text))
        elif kind == "restart":
            # The provider retries after streaming: what was shown is void.
            await self.end(error=f"stream interrupted; retrying: {event.text}")
            await self.start()
        elif kind == "end":
            await self._end_reasoning()
        # "error": call_model publishes the end with the error once the call has raised.

    async def _end_reasoning(self) -> None:
        if self._reasoning is not None:
            text = "".join(self._reasoning)
            self._reasoning = None
            await self._bus.publish(events.StreamReasoningEndEvent(self._entity, text))
