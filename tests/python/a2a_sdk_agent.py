"""An A2A v1.0 agent built on the official Python SDK's server (a2a-sdk[http-server]), for
tests/tests/worker/a2a_remote_agent.rs: the cluster hosts its skills (`worker --agent
a2a+URL`).

    python a2a_sdk_agent.py PORT [PREFIX] [--no-streaming]

serves on 127.0.0.1:PORT its card at /.well-known/agent-card.json (a JSON-RPC interface at
/rpc, `capabilities.streaming` unless --no-streaming) and these skills, their ids prefixed
with PREFIX; the skill of a message is its `metadata.skillId`:

- `upper`: answers with one message, the text of the message's text parts uppercased, and the
  values of its data parts as a data part `{"got": [...]}` when there are any.
- `chunks`: a task that streams three text chunks of one artifact, then completes.
- `fail`: a task that fails, its status message saying "the agent failed on purpose".
- `reject`: a task the agent rejects.
- `ask`: a task that asks for more input (input-required).
- `slow`: a task that works until it is cancelled (its cancel records the task id in
  /cancelled, which the test reads).

It prints "listening" once it serves.
"""

import asyncio
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.helpers.proto_helpers import (
    get_data_parts,
    new_data_part,
    new_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)

CANCELLED: list[str] = []


class Executor(AgentExecutor):
    def __init__(self, prefix: str):
        self.prefix = prefix

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        skill = str(context.metadata.get("skillId", ""))
        message = context.message
        if message is not None and message.metadata and "skillId" in message.metadata:
            skill = str(message.metadata["skillId"])
        skill = skill.removeprefix(self.prefix)
        if skill == "upper":
            parts = [new_text_part(context.get_user_input("").upper())]
            data = get_data_parts(list(message.parts)) if message is not None else []
            if data:
                parts.append(new_data_part({"got": data}))
            await event_queue.enqueue_event(
                new_message(parts, context_id=context.context_id)
            )
            return
        await event_queue.enqueue_event(
            Task(
                id=context.task_id,
                context_id=context.context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                history=[message] if message is not None else [],
            )
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        if skill == "chunks":
            for i, chunk in enumerate(["one ", "two ", "three"]):
                await updater.add_artifact(
                    [new_text_part(chunk)],
                    artifact_id="counted",
                    name="count",
                    append=i > 0,
                    last_chunk=i == 2,
                )
            await updater.complete()
        elif skill == "fail":
            await updater.failed(
                new_text_message(
                    "the agent failed on purpose",
                    context_id=context.context_id,
                    task_id=context.task_id,
                )
            )
        elif skill == "reject":
            await updater.reject(
                new_text_message(
                    "not my kind of work",
                    context_id=context.context_id,
                    task_id=context.task_id,
                )
            )
        elif skill == "ask":
            await updater.requires_input(
                new_text_message(
                    "which colour?",
                    context_id=context.context_id,
                    task_id=context.task_id,
                )
            )
        elif skill == "slow":
            await asyncio.Event().wait()
        else:
            await updater.failed(
                new_text_message(
                    f"unknown skill {skill!r}",
                    context_id=context.context_id,
                    task_id=context.task_id,
                )
            )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        CANCELLED.append(context.task_id or "")
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


def card(port: int, prefix: str, streaming: bool) -> AgentCard:
    def skill(id: str, description: str) -> AgentSkill:
        return AgentSkill(
            id=prefix + id, name=id, description=description, tags=["test"]
        )

    return AgentCard(
        name="SDK test agent",
        description="An agent built on the official A2A Python SDK",
        version="1.0.0",
        # `localhost`, not the address the worker is given: the worker takes the path only.
        supported_interfaces=[
            AgentInterface(
                url=f"http://localhost:{port}/rpc",
                protocol_binding="JSONRPC",
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            skill("upper", "Uppercases its text"),
            skill("chunks", "Streams three chunks"),
            skill("fail", "Always fails"),
            skill("reject", "Always rejects"),
            skill("ask", "Asks for more input"),
            skill("slow", "Works until cancelled"),
        ],
    )


async def cancelled(_request):
    return JSONResponse(CANCELLED)


def main() -> None:
    port = int(sys.argv[1])
    rest = sys.argv[2:]
    streaming = "--no-streaming" not in rest
    names = [arg for arg in rest if not arg.startswith("--")]
    prefix = names[0] if names else ""
    agent_card = card(port, prefix, streaming)
    handler = DefaultRequestHandler(
        agent_executor=Executor(prefix),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    routes = [
        *create_agent_card_routes(agent_card),
        *create_jsonrpc_routes(handler, "/rpc"),
        Route("/cancelled", cancelled, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("listening", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
