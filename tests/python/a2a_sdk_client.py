"""The official A2A Python SDK (PyPI `a2a-sdk`) as a client of the gateway's A2A v1.0 bindings.

    a2a_sdk_client.py AGENT_BASE_URL [TOKEN] [--binding JSONRPC|HTTP+JSON|GRPC ...]

AGENT_BASE_URL is the agent's base URL, `{gateway}/a2a`: the SDK's card resolver reads
`{AGENT_BASE_URL}/.well-known/agent-card.json`. TOKEN is the bearer token (20 to 256
characters); without the argument it is read from the environment variable A2A_TOKEN. The agent
must run the TCK agent (`worker --a2a-tck-agent`, gateway `A2A_DEFAULT_SKILL=tck`) beside the
`sleep` built-in, serve gRPC (`GRPC_LISTEN`) when GRPC is tested, and have push notifications on
with 127.0.0.1 allowed as a webhook host on any port (`PUSH_ALLOWLIST=127.0.0.1:*`), list the
token as the member `sdk` (`MEMBER_TOKENS_FILE`) and host `echo` private (`WORKER_PRIVATE=echo`).

The script starts a webhook receiver of its own: a stdlib HTTP server on 127.0.0.1 (a free
port, in a thread) that answers every POST 200 and hands what it got to the checks.

For each binding (by default JSONRPC, HTTP+JSON and GRPC, each chosen through the SDK's
ClientConfig from the card's supportedInterfaces; gRPC over the SDK's GrpcTransport, its channel
an insecure grpc.aio channel to the card's URL), the SDK's ClientFactory makes the clients, with
the SDK's AuthInterceptor and a CredentialService that answers the card's `bearer` scheme, and
runs:

1. SendMessage, blocking (`tck-complete-task-*`): a completed task whose status message says
   "Hello from TCK"; and `tck-artifact-text-*`: a completed task with a text artifact;
2. SendStreamingMessage (`tck-stream-artifact-chunked-*`): the events belong to one task, the
   artifact `chunked` arrives as its two chunks ("chunk-1 ", then "chunk-2" appended and last),
   and the stream ends with a completed status;
3. GetTask of the tasks of 1 and 2: the same ids, completed, with the same content;
4. SendMessage with returnImmediately (skill `sleep`, `{"ms": 60000}`), then on that task the
   push notification configs: Create (an id, the receiver's URL, a token and Bearer
   authentication; the answer is the config), Get (the same), List (it is listed), Delete, and
   Get again (TaskNotFoundError); then CancelTask: TASK_STATE_CANCELED, and GetTask agrees;
5. a delivery: SendMessage, blocking (`tck-complete-task-*`), with an inline
   `taskPushNotificationConfig` (the receiver's URL for the binding, a token, Bearer
   authentication); then, bounded by PUSH_TIMEOUT, the receiver's POSTs for that task until
   one is the completed status update. Each POST must be a StreamResponse (parsed strictly by
   the SDK's protobuf) holding a status or artifact update of the task, with Content-Type
   application/a2a+json, `Authorization: Bearer <credentials>` and
   `X-A2A-Notification-Token: <token>`;
6. GetExtendedAgentCard as a member (the token is the gateway's member `sdk`): the card lists
   the private skill `echo`, which the public card does not, and carries the member extension
   (`https://taskcluster.dev/a2a/ext/member/v1`) naming `sdk` and `echo`.

Every A2A call is recorded (an httpx event hook; on gRPC a grpc.aio client interceptor) to
check that it went to the binding's URL from the card and carried A2A-Version 1.0 (the
`A2A-Version` header, the `a2a-version` metadata on gRPC), which the SDK itself sets (this
script never sets it), and the bearer token, which the AuthInterceptor adds.

A failed step does not stop the independent steps after it, nor the other bindings. Once the
card is read, it prints one JSON line to stdout, the summary (`ok`, `failures`, and what each
binding answered, with the push secrets it made under `push`); then each failure as
`a2a_sdk_client: FAIL [binding] step: what` to stderr. Exit status: 0 when everything matched,
1 on any mismatch (or no card, or a hung binding: then only the failure line), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import uuid

from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from importlib.metadata import version
from typing import Any

import grpc
import httpx

from google.protobuf.json_format import MessageToDict, Parse

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
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError


BINDINGS = ('JSONRPC', 'HTTP+JSON', 'GRPC')
SECURITY_SCHEME = 'bearer'
# The extended card (the caller is the gateway's member `sdk`, and `echo` is private).
MEMBER_EXTENSION = 'https://taskcluster.dev/a2a/ext/member/v1'
MEMBER_NAME = 'sdk'
PRIVATE_SKILL = 'echo'
EXPECTED_VERSION = '1.0'
HELLO = 'Hello from TCK'
ARTIFACT_TEXT = 'Generated text content'
CHUNKS = ['chunk-1 ', 'chunk-2']
# Bounds against a hung server, not expectations: every call here takes milliseconds.
HTTP_TIMEOUT = 30.0
BINDING_TIMEOUT = 120.0
# How long the receiver waits for a task's completed status update (it takes milliseconds).
PUSH_TIMEOUT = 30.0
PUSH_CONTENT_TYPE = 'application/a2a+json'


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


class GrpcRecorder:
    """What each gRPC call carried, shaped like `Recorder`'s records: `interceptors()` are the
    grpc.aio client interceptors of a channel to `target`, one per kind of call the SDK makes
    (grpc.aio files an interceptor under one kind only, so one object cannot serve both)."""

    def __init__(self, requests: list[dict[str, Any]], target: str) -> None:
        self._requests = requests
        self._target = target

    def _record(self, details: grpc.aio.ClientCallDetails) -> None:
        method = details.method
        method = method.decode() if isinstance(method, bytes) else str(method)
        metadata: dict[str, str] = {}
        for key, value in details.metadata or ():
            metadata.setdefault(key.lower(), value)
        self._requests.append(
            {
                'method': method,
                'url': self._target,
                'a2aVersion': metadata.get('a2a-version'),
                'authorization': metadata.get('authorization'),
            }
        )

    def interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        record = self._record

        class Unary(grpc.aio.UnaryUnaryClientInterceptor):
            async def intercept_unary_unary(self, continuation, client_call_details, request):  # noqa: ANN001, ANN201
                record(client_call_details)
                return await continuation(client_call_details, request)

        class Streaming(grpc.aio.UnaryStreamClientInterceptor):
            async def intercept_unary_stream(self, continuation, client_call_details, request):  # noqa: ANN001, ANN201
                record(client_call_details)
                return await continuation(client_call_details, request)

        return [Unary(), Streaming()]


class WebhookReceiver:
    """A push notification receiver on 127.0.0.1: a stdlib HTTP server in a thread that hands
    each POST, by path, to the event loop (`wait_until`), then answers it 200."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._received: dict[str, list[dict[str, Any]]] = {}
        self._arrived: dict[str, asyncio.Event] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get('Content-Length') or 0)
                body = self.rfile.read(length).decode('utf-8', 'replace')
                record = {
                    'path': self.path,
                    'contentType': self.headers.get('Content-Type'),
                    'authorization': self.headers.get('Authorization'),
                    'notificationToken': self.headers.get('X-A2A-Notification-Token'),
                    'body': body,
                }
                # Recorded before it is answered: the sender sends its next update only once
                # this one is answered, and each request has a thread of its own, so a record
                # made after the answer could land after the next one's (the order seen would
                # not be the order sent).
                receiver._loop.call_soon_threadsafe(receiver._arrive, record)
                self.send_response(200)
                self.send_header('Content-Length', '0')
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f'http://127.0.0.1:{self._server.server_address[1]}{path}'

    def _event(self, path: str) -> asyncio.Event:
        return self._arrived.setdefault(path, asyncio.Event())

    def _arrive(self, record: dict[str, Any]) -> None:
        self._received.setdefault(record['path'], []).append(record)
        self._event(record['path']).set()

    async def wait_until(
        self, path: str, done: Any, timeout: float
    ) -> list[dict[str, Any]]:
        """The POSTs to `path` once `done(them)` holds; Mismatch when it does not within
        `timeout` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            received = list(self._received.get(path, []))
            if done(received):
                return received
            event = self._event(path)
            event.clear()
            left = deadline - loop.time()
            try:
                await asyncio.wait_for(event.wait(), max(left, 0))
            except asyncio.TimeoutError:
                raise Mismatch(
                    f'no completed status update reached {path} within {timeout:.0f} s; '
                    f'received: {_short([r["body"] for r in received])}'
                ) from None

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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


async def send_sleeping(client: Client) -> dict[str, Any]:
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
    return {'taskId': task.id, 'submitted': submitted}


class PushSecrets:
    """The token and the Bearer credentials of one binding's push configs."""

    def __init__(self) -> None:
        self.token = f'notification-token-{uuid.uuid4().hex}'
        self.credentials = f'webhook-secret-{uuid.uuid4().hex}'

    def config(self, url: str, task_id: str = '', config_id: str = '') -> TaskPushNotificationConfig:
        return TaskPushNotificationConfig(
            id=config_id,
            task_id=task_id,
            url=url,
            token=self.token,
            authentication=AuthenticationInfo(scheme='Bearer', credentials=self.credentials),
        )


def config_view(config: TaskPushNotificationConfig) -> dict[str, Any]:
    return MessageToDict(config)


async def push_configs(
    client: Client, sleeping: dict[str, Any], receiver: WebhookReceiver, secrets: PushSecrets
) -> dict[str, Any]:
    task_id = sleeping['taskId']
    config_id = f'sdk-{STEP.binding.lower().replace("+", "-")}-{uuid.uuid4().hex[:8]}'
    wanted = secrets.config(
        receiver.url(f'/configs/{STEP.binding}'), task_id=task_id, config_id=config_id
    )

    STEP.name = 'create push config'
    created = await client.create_task_push_notification_config(wanted)
    check(
        config_view(created) == config_view(wanted),
        'CreateTaskPushNotificationConfig answers the config as created',
        {'sent': config_view(wanted), 'answered': config_view(created)},
    )

    STEP.name = 'get push config'
    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
    )
    check(
        config_view(got) == config_view(wanted),
        'GetTaskPushNotificationConfig answers the config created',
        {'created': config_view(wanted), 'got': config_view(got)},
    )

    STEP.name = 'list push configs'
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    listed_ids = [config.id for config in listed.configs]
    check(
        [config_view(c) for c in listed.configs if c.id == config_id] == [config_view(wanted)],
        'ListTaskPushNotificationConfigs lists the config created, once, as created',
        MessageToDict(listed),
    )

    STEP.name = 'delete push config'
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
    )

    STEP.name = 'get push config (deleted)'
    try:
        after = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)
        )
    except TaskNotFoundError as error:
        after_delete = type(error).__name__
    else:
        raise Mismatch(f'a deleted config is not found; got: {_short(config_view(after))}')

    STEP.name = 'list push configs (deleted)'
    relisted = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    relisted_ids = [config.id for config in relisted.configs]
    check(config_id not in relisted_ids, 'a deleted config is no longer listed', relisted_ids)
    return {
        'taskId': task_id,
        'configId': config_id,
        'created': config_view(created),
        'got': config_view(got),
        'listed': listed_ids,
        'afterDelete': after_delete,
        'listedAfterDelete': relisted_ids,
    }


def check_delivery(
    record: dict[str, Any], task_id: str, secrets: PushSecrets
) -> tuple[str, str]:
    """One POST of the receiver: its headers, and its body a StreamResponse holding a status or
    artifact update of `task_id`; (the update's kind, the state of a status update or '')."""
    content_type = (record['contentType'] or '').split(';')[0].strip().lower()
    check(content_type == PUSH_CONTENT_TYPE, f'Content-Type: {PUSH_CONTENT_TYPE}', record['contentType'])
    check(
        record['authorization'] == f'Bearer {secrets.credentials}',
        "Authorization: the config's scheme and credentials",
        record['authorization'],
    )
    check(
        record['notificationToken'] == secrets.token,
        "X-A2A-Notification-Token: the config's token",
        record['notificationToken'],
    )
    event = StreamResponse()
    try:
        Parse(record['body'], event)
    except Exception as error:  # noqa: BLE001 - the SDK's protobuf refusing the body
        raise Mismatch(f'the body is not a StreamResponse ({error}); got: {_short(record["body"])}') from None
    kind = event_kind(event)
    check(
        kind in ('status_update', 'artifact_update'),
        'the body is a status or an artifact update',
        record['body'],
    )
    check(event_task_id(event) == task_id, 'the update is of the task sent', record['body'])
    state = state_name(event.status_update.status.state) if kind == 'status_update' else ''
    return kind, state


def is_completed(record: dict[str, Any]) -> bool:
    try:
        body = json.loads(record['body'])
    except ValueError:
        return False
    status = body.get('statusUpdate') if isinstance(body, dict) else None
    return isinstance(status, dict) and status.get('status', {}).get('state') == 'TASK_STATE_COMPLETED'


def status_time(record: dict[str, Any]) -> datetime | None:
    """The time a delivered status update says, or None."""
    try:
        stamp = json.loads(record['body'])['statusUpdate']['status']['timestamp']
        return datetime.fromisoformat(stamp.replace('Z', '+00:00'))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


async def push_delivery(
    client: Client, receiver: WebhookReceiver, secrets: PushSecrets
) -> dict[str, Any]:
    STEP.name = 'send (blocking, inline push config)'
    path = f'/deliveries/{STEP.binding}'
    url = receiver.url(path)
    response = await one_response(
        client,
        SendMessageRequest(
            message=user_message('hello', f'tck-complete-task-{uuid.uuid4()}'),
            configuration=SendMessageConfiguration(
                return_immediately=False,
                task_push_notification_config=secrets.config(url),
            ),
        ),
    )
    check(response.HasField('task'), 'the answer is a Task', MessageToDict(response))
    task = response.task
    check_task(task, 'send')
    state = state_name(task.status.state)
    check(state == 'TASK_STATE_COMPLETED', 'a blocking send returns the completed task', state)

    STEP.name = 'push delivery'
    received = await receiver.wait_until(
        path, lambda records: any(is_completed(r) for r in records), PUSH_TIMEOUT
    )
    deliveries = [check_delivery(record, task.id, secrets) for record in received]
    kinds = [kind for kind, _ in deliveries]
    states = [state for kind, state in deliveries if kind == 'status_update']
    check(
        states[-1:] == ['TASK_STATE_COMPLETED'] and is_completed(received[-1]),
        'the completed status update is the last delivery',
        [record['body'] for record in received],
    )
    stamps = [stamp for stamp in map(status_time, received) if stamp is not None]
    check(
        stamps == sorted(stamps),
        'each status update is stamped with its event time, in the order delivered',
        [record['body'] for record in received],
    )
    return {
        'taskId': task.id,
        'url': url,
        'deliveries': kinds,
        'states': states,
        'final': states[-1],
        'contentType': received[-1]['contentType'],
        'authorization': received[-1]['authorization'],
        'notificationToken': received[-1]['notificationToken'],
    }


async def cancel(client: Client, sleeping: dict[str, Any]) -> dict[str, Any]:
    task_id = sleeping['taskId']
    STEP.name = 'cancel task'
    canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
    check(canceled.id == task_id, 'CancelTask answers the task asked for', MessageToDict(canceled))
    state = state_name(canceled.status.state)
    check(state == 'TASK_STATE_CANCELED', 'the task is canceled', MessageToDict(canceled))

    STEP.name = 'get task (canceled)'
    after = await client.get_task(GetTaskRequest(id=task_id))
    after_state = state_name(after.status.state)
    check(after_state == 'TASK_STATE_CANCELED', 'GetTask agrees it is canceled', after_state)
    return {
        'taskId': task_id,
        'submitted': sleeping['submitted'],
        'state': state,
        'after': after_state,
    }


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


async def extended_card(client: Client, public: AgentCard) -> dict[str, Any]:
    """GetExtendedAgentCard as the member: the private skill, which the public card hides, and
    the member extension naming the caller."""
    card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    skills = sorted(skill.id for skill in card.skills)
    check(PRIVATE_SKILL in skills, f'the extended card lists the private skill {PRIVATE_SKILL!r}', skills)
    check(
        PRIVATE_SKILL not in {skill.id for skill in public.skills},
        f'the public card does not list {PRIVATE_SKILL!r}',
        [skill.id for skill in public.skills],
    )
    extensions = {e.uri: MessageToDict(e.params) for e in card.capabilities.extensions}
    member = extensions.get(MEMBER_EXTENSION, {})
    check(member.get('member') == MEMBER_NAME, 'the member extension names the caller', extensions)
    check(
        PRIVATE_SKILL in member.get('privateSkills', []),
        'the member extension lists the private skill',
        extensions,
    )
    return {'skills': skills, 'member': member}


async def run_binding(
    card: AgentCard, binding: str, token: str, receiver: WebhookReceiver
) -> dict[str, Any]:
    """Every step on `binding`; a failed step does not stop the independent ones after it."""
    STEP.binding = binding
    STEP.name = 'client'
    failures: list[str] = []
    url = interface_url(card, binding)
    recorder = Recorder()
    secrets = PushSecrets()
    clients: list[Client] = []
    async with httpx.AsyncClient(
        timeout=HTTP_TIMEOUT, event_hooks={'request': [recorder]}
    ) as http:

        def channel(target: str) -> grpc.aio.Channel:
            # The SDK's GrpcTransport calls this with the card's GRPC URL (host:port).
            return grpc.aio.insecure_channel(
                target, interceptors=GrpcRecorder(recorder.requests, target).interceptors()
            )

        def client(streaming: bool) -> Client:
            # The SDK sets its A2A-Version default header on the httpx client it is given, and
            # the a2a-version metadata on every gRPC call.
            config = ClientConfig(
                httpx_client=http,
                grpc_channel_factory=channel,
                streaming=streaming,
                supported_protocol_bindings=[binding],
            )
            made = ClientFactory(config).create(
                card, interceptors=[AuthInterceptor(BearerToken(token))]
            )
            clients.append(made)
            return made

        try:
            plain = client(streaming=False)
            streaming = client(streaming=True)
            sent = await attempt(failures, send_blocking, plain)
            streamed = await attempt(failures, stream, streaming)
            got = None
            if sent is not None:
                got = await attempt(failures, get_tasks, plain, sent, streamed)
            sleeping = await attempt(failures, send_sleeping, plain)
            configs = canceled = None
            if sleeping is not None:
                configs = await attempt(failures, push_configs, plain, sleeping, receiver, secrets)
                canceled = await attempt(failures, cancel, plain, sleeping)
            delivered = await attempt(failures, push_delivery, plain, receiver, secrets)
            extended = await attempt(failures, extended_card, plain, card)
        finally:
            # Closes the gRPC channels; the shared httpx client closes with this block.
            for made in clients:
                await made.close()

    STEP.name = 'headers'
    versions = sorted({str(r['a2aVersion']) for r in recorder.requests})

    async def headers() -> None:
        requests = recorder.requests
        check(bool(requests), f'the calls went over {binding}', requests)
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
    result = {
        'url': url,
        'requests': len(recorder.requests),
        'a2aVersion': versions[0] if len(versions) == 1 else versions,
        'send': sent,
        'stream': streamed,
        'get': got,
        'cancel': canceled,
        'pushConfigs': configs,
        'pushDelivery': delivered,
        'extendedCard': extended,
        'push': {'token': secrets.token, 'credentials': secrets.credentials},
        'failures': failures,
    }
    if binding == 'GRPC':
        result['grpcMethods'] = sorted({r['method'] for r in recorder.requests})
    return result


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
    check(
        bool(card.capabilities.extended_agent_card),
        'the card offers an extended card',
        MessageToDict(card.capabilities),
    )
    check(
        bool(card.capabilities.push_notifications),
        'the card says it sends push notifications',
        MessageToDict(card.capabilities),
    )
    receiver = WebhookReceiver(asyncio.get_running_loop())
    results = {}
    try:
        for binding in bindings:
            results[binding] = await asyncio.wait_for(
                run_binding(card, binding, token, receiver), BINDING_TIMEOUT
            )
    finally:
        receiver.close()
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
