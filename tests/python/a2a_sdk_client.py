"""The official A2A Python SDK (PyPI `a2a-sdk`) as a client of the gateway's A2A v1.0 bindings.

    a2a_sdk_client.py AGENT_BASE_URL [TOKEN] [--binding JSONRPC|HTTP+JSON ...]

AGENT_BASE_URL is the agent's base URL, `{gateway}/a2a`: the SDK's card resolver reads
`{AGENT_BASE_URL}/.well-known/agent-card.json`. TOKEN is the bearer token (20 to 256
characters); without the argument it is read from the environment variable A2A_TOKEN. The agent
must run the TCK agent (`worker --a2a-tck-agent`, gateway `A2A_DEFAULT_SKILL=tck`) beside the
`sleep` built-in.

For each binding (by default JSONRPC and HTTP+JSON, each chosen through the SDK's ClientConfig
from the card's supportedInterfaces), the SDK's ClientFactory makes the clients, with the SDK's
AuthInterceptor and a CredentialService that answers the card's `bearer` scheme, and runs:

1. SendMessage, blocking (`tck-complete-task-*`): a completed task whose status message says
   "Hello from TCK"; and `tck-artifact-text-*`: a completed task with a text artifact;
2. SendStreamingMessage (`tck-stream-artifact-chunked-*`): the events belong to one task, the
   artifact `chunked` arrives as its two chunks ("chunk-1 ", then "chunk-2" appended and last),
   and the stream ends with a completed status;
3. GetTask of the tasks of 1 and 2: the same ids, completed, with the same content;
4. SendMessage with returnImmediately (skill `sleep`, `{"ms": 60000}`), then CancelTask:
   TASK_STATE_CANCELED, and GetTask agrees.

Every HTTP request of the A2A calls is recorded (an httpx event hook) to check that it went to
the binding's URL from the card and carried `A2A-Version: 1.0`, which the SDK itself sets (this
script never sets it), and the bearer token, which the AuthInterceptor adds.

A failed step does not stop the independent steps after it, nor the other binding. Once the
card is read, it prints one JSON line to stdout, the summary (`ok`, `failures`, and what each
binding answered); then each failure as `a2a_sdk_client: FAIL [binding] step: what` to stderr.
Exit status: 0 when everything matched, 1 on any mismatch (or no card, or a hung binding: then
only the failure line), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid

from importlib.metadata import version
from typing import Any

import httpx

from google.protobuf.json_format import MessageToDict

from a2a.client import (
    A2ACardResolver,
    AuthInterceptor,
    Client,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)


BINDINGS = ('JSONRPC', 'HTTP+JSON')
SECURITY_SCHEME = 'bearer'
EXPECTED_VERSION = '1.0'
HELLO = 'Hello from TCK'
ARTIFACT_TEXT = 'Generated text content'
CHUNKS = ['chunk-1 ', 'chunk-2']
# Bounds against a hung server, not expectations: every call here takes milliseconds.
HTTP_TIMEOUT = 30.0
BINDING_TIMEOUT = 120.0


class Mismatch(Exception):
    """What the agent answered is not what A2A v1.0 and the TCK agent promise."""


class Step:
    """The binding and step being checked, for failure messages."""

    binding = '-'
    name = 'setup'


STEP = Step()


def check(condition: bool, what: str, got: Any = None) -> None:
    if not condition:
        detail = '' if got is None else f'; got: {_short(got)}'
        raise Mismatch(f'{what}{detail}')


def _short(value: Any, limit: int = 1500) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + '...'


def state_name(state: int) -> str:
    return TaskState.Name(state)


def texts(parts: Any) -> list[str]:
    return [part.text for part in parts if part.WhichOneof('content') == 'text']


class BearerToken(CredentialService):
    """The caller's bearer token for the card's `bearer` scheme, through the SDK's own path."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        return self._token if security_scheme_name == SECURITY_SCHEME else None


class Recorder:
    """What each HTTP request carried (an httpx request event hook)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.requests.append(
            {
                'method': request.method,
                'url': str(request.url),
                'a2aVersion': request.headers.get('A2A-Version'),
                'authorization': request.headers.get('Authorization'),
            }
        )


def user_message(text: str, message_id: str, skill: str | None = None) -> Message:
    message = Message(
        role=Role.ROLE_USER, message_id=message_id, parts=[Part(text=text)]
    )
    if skill is not None:
        message.metadata.update({'skillId': skill})
    return message


async def one_response(client: Client, request: SendMessageRequest) -> StreamResponse:
    """The single response of a non-streaming client's send_message."""
    responses = [response async for response in client.send_message(request)]
    check(len(responses) == 1, 'one response to a non-streaming SendMessage', len(responses))
    return responses[0]


def check_task(task: Task, what: str) -> None:
    check(bool(task.id), f'{what}: the task has an id', MessageToDict(task))
    check(bool(task.context_id), f'{what}: the task has a contextId', MessageToDict(task))


async def send_blocking(client: Client) -> dict[str, Any]:
    STEP.name = 'send (blocking, tck-complete-task)'
    message_id = f'tck-complete-task-{uuid.uuid4()}'
    response = await one_response(
        client,
        SendMessageRequest(
            message=user_message('hello', message_id),
            configuration=SendMessageConfiguration(return_immediately=False),
        ),
    )
    check(response.HasField('task'), 'the answer is a Task', MessageToDict(response))
    task = response.task
    check_task(task, 'send')
    state = state_name(task.status.state)
    check(state == 'TASK_STATE_COMPLETED', 'a blocking send returns the completed task', state)
    check(task.status.HasField('message'), 'the status carries a message', MessageToDict(task))
    said = texts(task.status.message.parts)
    check(said == [HELLO], f'the status message says {HELLO!r}', said)
    check(
        any(m.message_id == message_id for m in task.history),
        'the history holds the message sent',
        MessageToDict(task),
    )

    STEP.name = 'send (blocking, tck-artifact-text)'
    response = await one_response(
        client,
        SendMessageRequest(
            message=user_message('hello', f'tck-artifact-text-{uuid.uuid4()}'),
        ),
    )
    check(response.HasField('task'), 'the answer is a Task', MessageToDict(response))
    artifact_task = response.task
    check_task(artifact_task, 'send')
    state = state_name(artifact_task.status.state)
    check(state == 'TASK_STATE_COMPLETED', 'a blocking send returns the completed task', state)
    artifact_texts = [texts(a.parts) for a in artifact_task.artifacts]
    check(
        artifact_texts == [[ARTIFACT_TEXT]],
        f'one artifact with the text {ARTIFACT_TEXT!r}',
        MessageToDict(artifact_task),
    )
    return {
        'taskId': task.id,
        'contextId': task.context_id,
        'state': state_name(task.status.state),
        'text': said[0],
        'artifactTaskId': artifact_task.id,
        'artifactText': artifact_texts[0][0],
    }


def event_kind(event: StreamResponse) -> str:
    return event.WhichOneof('payload') or 'empty'


def event_task_id(event: StreamResponse) -> str:
    kind = event_kind(event)
    if kind == 'task':
        return event.task.id
    if kind == 'status_update':
        return event.status_update.task_id
    if kind == 'artifact_update':
        return event.artifact_update.task_id
    if kind == 'message':
        return event.message.task_id
    return ''


async def stream(client: Client) -> dict[str, Any]:
    STEP.name = 'stream (tck-stream-artifact-chunked)'
    request = SendMessageRequest(
        message=user_message('hello', f'tck-stream-artifact-chunked-{uuid.uuid4()}')
    )
    events = [event async for event in client.send_message(request)]
    seen = [MessageToDict(event) for event in events]
    check(bool(events), 'the stream has events', seen)
    kinds = [event_kind(event) for event in events]
    check(kinds[0] == 'task', 'the stream starts with the Task', kinds)
    task_id = events[0].task.id
    check(bool(task_id), 'the first event names its task', seen[0])
    check(
        all(event_task_id(event) == task_id for event in events),
        'every event belongs to the task',
        seen,
    )
    check(
        all(kind in ('task', 'status_update', 'artifact_update') for kind in kinds),
        'a task stream has only Task, status and artifact updates',
        kinds,
    )
    last = events[-1]
    check(kinds[-1] == 'status_update', 'the stream ends with a status update', kinds)
    final = state_name(last.status_update.status.state)
    check(final == 'TASK_STATE_COMPLETED', 'the last status is completed', seen[-1])

    # Artifact updates as a client assembles them: append adds parts to the artifact of the
    # same id, anything else replaces it.
    updates = [event.artifact_update for event in events if event_kind(event) == 'artifact_update']
    assembled: dict[str, Artifact] = {}
    chunked_updates: list[dict[str, Any]] = []
    for update in updates:
        artifact_id = update.artifact.artifact_id
        if update.append and artifact_id in assembled:
            assembled[artifact_id].parts.extend(update.artifact.parts)
        else:
            copy = Artifact()
            copy.CopyFrom(update.artifact)
            assembled[artifact_id] = copy
        if update.artifact.name == 'chunked':
            chunked_updates.append(
                {
                    'texts': texts(update.artifact.parts),
                    'append': update.append,
                    'lastChunk': update.last_chunk,
                }
            )
    chunk_texts = [text for update in chunked_updates for text in update['texts']]
    check(
        chunk_texts == CHUNKS
        and [u['append'] for u in chunked_updates] == [False, True]
        and chunked_updates[-1]['lastChunk'],
        'the artifact "chunked" streams as two artifact updates: "chunk-1 " '
        '(append false), then "chunk-2" (append true, lastChunk true)',
        [MessageToDict(update) for update in updates],
    )
    whole = [''.join(texts(a.parts)) for a in assembled.values() if a.name == 'chunked']
    check(whole == ['chunk-1 chunk-2'], 'the assembled artifact says "chunk-1 chunk-2"', whole)
    return {
        'taskId': task_id,
        'events': kinds,
        'chunks': chunk_texts,
        'assembled': whole[0],
        'final': final,
    }


async def get_tasks(
    client: Client, sent: dict[str, Any], streamed: dict[str, Any] | None
) -> dict[str, Any]:
    STEP.name = 'get task'
    task = await client.get_task(GetTaskRequest(id=sent['taskId']))
    check(task.id == sent['taskId'], 'GetTask answers the task asked for', MessageToDict(task))
    check(task.context_id == sent['contextId'], 'the same contextId', MessageToDict(task))
    state = state_name(task.status.state)
    check(state == sent['state'], f'the state the send returned ({sent["state"]})', state)
    said = texts(task.status.message.parts)
    check(said == [HELLO], f'the status message still says {HELLO!r}', said)
    got = {'taskId': task.id, 'state': state}
    if streamed is None:
        return got

    STEP.name = 'get task (streamed)'
    streamed_task = await client.get_task(GetTaskRequest(id=streamed['taskId']))
    check(streamed_task.id == streamed['taskId'], 'GetTask answers the streamed task', MessageToDict(streamed_task))
    streamed_state = state_name(streamed_task.status.state)
    check(streamed_state == streamed['final'], 'the streamed task is completed', streamed_state)
    artifact_texts = [''.join(texts(a.parts)) for a in streamed_task.artifacts]
    check(
        'chunk-1 chunk-2' in artifact_texts,
        'the streamed task holds the whole artifact "chunk-1 chunk-2"',
        MessageToDict(streamed_task),
    )
    got.update({'streamedTaskId': streamed_task.id, 'streamedState': streamed_state})
    return got


async def cancel(client: Client) -> dict[str, Any]:
    STEP.name = 'send (returnImmediately, sleep)'
    response = await one_response(
        client,
        SendMessageRequest(
            message=user_message('{"ms": 60000}', str(uuid.uuid4()), skill='sleep'),
            configuration=SendMessageConfiguration(return_immediately=True),
        ),
    )
    check(response.HasField('task'), 'the answer is a Task', MessageToDict(response))
    task = response.task
    check_task(task, 'send')
    submitted = state_name(task.status.state)
    check(
        submitted in ('TASK_STATE_SUBMITTED', 'TASK_STATE_WORKING'),
        'returnImmediately answers before the 60 s sleep ends (submitted or working)',
        submitted,
    )

    STEP.name = 'cancel task'
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    check(canceled.id == task.id, 'CancelTask answers the task asked for', MessageToDict(canceled))
    state = state_name(canceled.status.state)
    check(state == 'TASK_STATE_CANCELED', 'the task is canceled', MessageToDict(canceled))

    STEP.name = 'get task (canceled)'
    after = await client.get_task(GetTaskRequest(id=task.id))
    after_state = state_name(after.status.state)
    check(after_state == 'TASK_STATE_CANCELED', 'GetTask agrees it is canceled', after_state)
    return {'taskId': task.id, 'submitted': submitted, 'state': state, 'after': after_state}


def interface_url(card: AgentCard, binding: str) -> str:
    urls = [i.url for i in card.supported_interfaces if i.protocol_binding == binding]
    check(bool(urls), f'the card lists a {binding} interface', MessageToDict(card))
    return urls[0]


async def attempt(failures: list[str], step: Any, *args: Any) -> Any:
    """Runs one step; a failure is recorded (binding, step, what) and gives None."""
    try:
        return await step(*args)
    except Exception as error:  # noqa: BLE001 - a mismatch, or any SDK or transport error
        what = str(error) if isinstance(error, Mismatch) else (
            f'{type(error).__module__}.{type(error).__name__}: {error}'
        )
        failures.append(f'[{STEP.binding}] {STEP.name}: {what}')
        return None


async def run_binding(card: AgentCard, binding: str, token: str) -> dict[str, Any]:
    """Every step on `binding`; a failed step does not stop the independent ones after it."""
    STEP.binding = binding
    STEP.name = 'client'
    failures: list[str] = []
    url = interface_url(card, binding)
    recorder = Recorder()
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, event_hooks={'request': [recorder]}
    ) as http:

        def client(streaming: bool) -> Client:
            # The SDK sets its A2A-Version default header on the httpx client it is given.
            config = ClientConfig(
                httpx_client=http,
                streaming=streaming,
                supported_protocol_bindings=[binding],
            )
            return ClientFactory(config).create(
                card, interceptors=[AuthInterceptor(BearerToken(token))]
            )

        plain = client(streaming=False)
        streaming = client(streaming=True)
        sent = await attempt(failures, send_blocking, plain)
        streamed = await attempt(failures, stream, streaming)
        got = None
        if sent is not None:
            got = await attempt(failures, get_tasks, plain, sent, streamed)
        canceled = await attempt(failures, cancel, plain)

    STEP.name = 'headers'
    versions = sorted({str(r['a2aVersion']) for r in recorder.requests})

    async def headers() -> None:
        requests = recorder.requests
        check(bool(requests), 'the calls went over HTTP', requests)
        wrong_url = [r['url'] for r in requests if not r['url'].startswith(url)]
        check(not wrong_url, f"every call went to the card's {binding} URL {url}", wrong_url)
        check(
            versions == [EXPECTED_VERSION],
            'every call carries A2A-Version: 1.0 (set by the SDK)',
            versions,
        )
        check(
            all(r['authorization'] == f'Bearer {token}' for r in requests),
            'every call carries the bearer token (added by the AuthInterceptor)',
            [bool(r['authorization']) for r in requests],
        )

    await attempt(failures, headers)
    return {
        'url': url,
        'requests': len(recorder.requests),
        'a2aVersion': versions[0] if len(versions) == 1 else versions,
        'send': sent,
        'stream': streamed,
        'get': got,
        'cancel': canceled,
        'failures': failures,
    }


async def run(base_url: str, token: str, bindings: list[str]) -> dict[str, Any]:
    STEP.name = 'agent card'
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
    listed = [i.protocol_binding for i in card.supported_interfaces]
    check(bool(card.capabilities.streaming), 'the card says it streams', MessageToDict(card.capabilities))
    check(
        SECURITY_SCHEME in card.security_schemes
        and card.security_schemes[SECURITY_SCHEME].http_auth_security_scheme.scheme.lower() == 'bearer',
        f'the card declares the HTTP bearer scheme {SECURITY_SCHEME!r}',
        MessageToDict(card),
    )
    results = {}
    for binding in bindings:
        results[binding] = await asyncio.wait_for(
            run_binding(card, binding, token), BINDING_TIMEOUT
        )
    failures = [f for result in results.values() for f in result['failures']]
    return {
        'ok': not failures,
        'failures': failures,
        'sdk': 'a2a-sdk',
        'sdkVersion': version('a2a-sdk'),
        'card': {'name': card.name, 'interfaces': listed},
        'bindings': results,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('base_url', help='the agent base URL, {gateway}/a2a')
    parser.add_argument('token', nargs='?', help='the bearer token (default: $A2A_TOKEN)')
    parser.add_argument(
        '--binding',
        action='append',
        choices=BINDINGS,
        help='a binding to test (repeatable; default: all of them)',
    )
    args = parser.parse_args()
    token = args.token or os.environ.get('A2A_TOKEN', '')
    if not 20 <= len(token) <= 256:
        print(
            'a2a_sdk_client: a bearer token of 20 to 256 characters is needed '
            '(second argument or A2A_TOKEN)',
            file=sys.stderr,
        )
        return 2
    bindings = args.binding or list(BINDINGS)
    try:
        summary = asyncio.run(run(args.base_url.rstrip('/'), token, bindings))
    except Exception as error:  # noqa: BLE001 - no card, a hung binding: nothing to summarize
        what = str(error) if isinstance(error, Mismatch) else (
            f'{type(error).__module__}.{type(error).__name__}: {error}'
        )
        print(f'a2a_sdk_client: FAIL [{STEP.binding}] {STEP.name}: {what}', file=sys.stderr)
        return 1
    print(json.dumps(summary, sort_keys=True))
    for failure in summary['failures']:
        print(f'a2a_sdk_client: FAIL {failure}', file=sys.stderr)
    return 0 if summary['ok'] else 1

if __name__ == '__main__':
    sys.exit(main())
