//! `GET /openapi.json`: an OpenAPI 3.1 description of every route of the gateway.
//!
//! Written by hand with `json!`, on purpose: the routes are few and stable (the Lucid profile
//! fixes them), and this document is what client authors read, so it is worth writing for
//! them: the access-token rules, the SSE event names, the error codes. A derive crate
//! (utoipa, aide) would need annotations on every handler and wire type, in modules other
//! people own, to produce a less specific document. The tests check every mounted route is
//! described.

use protocol::ErrorCode;
use serde_json::{Value, json};

use store::registry::EntrypointInfo;

use crate::core::config::GatewayConfig;

/// Error codes of `{"error":{"code"}}`, in the document's order.
pub const ERROR_CODES: &[ErrorCode] = &[
    ErrorCode::InvalidRequest,
    ErrorCode::InvalidInput,
    ErrorCode::InvalidOutput,
    ErrorCode::NotFound,
    ErrorCode::InternalError,
    ErrorCode::NotImplemented,
    ErrorCode::MethodNotAllowed,
    ErrorCode::EntrypointNotFound,
    ErrorCode::StreamNotSupported,
    ErrorCode::InvalidIdempotencyKey,
    ErrorCode::IdempotencyInProgress,
    ErrorCode::IdempotencyKeyConflict,
    ErrorCode::IdempotencyResponseTooLarge,
    ErrorCode::IdempotencyQuotaExceeded,
    ErrorCode::TaskAccessRequired,
    ErrorCode::TaskNotFound,
    ErrorCode::SkillNotFound,
    ErrorCode::InvalidState,
    ErrorCode::TaskCapacityExhausted,
    ErrorCode::OwnerCapacityExhausted,
    ErrorCode::AddressCapacityExhausted,
    ErrorCode::TaskTimeout,
    ErrorCode::TaskExecutionFailed,
    ErrorCode::TaskTerminalizationFailed,
    ErrorCode::DurableTaskStoreRequired,
    ErrorCode::AuthorizationFailed,
    ErrorCode::AuthRequired,
    ErrorCode::PaymentCapabilityUnsupported,
    ErrorCode::PaymentVerificationFailed,
    ErrorCode::PaymentInProgress,
    ErrorCode::SettlementFailed,
    ErrorCode::PolicyViolation,
    ErrorCode::ServiceUnavailable,
    ErrorCode::TaskAttemptsExhausted,
    ErrorCode::RateLimited,
];

fn schema(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn parameter(name: &str) -> Value {
    json!({"$ref": format!("#/components/parameters/{name}")})
}

fn response(name: &str) -> Value {
    json!({"$ref": format!("#/components/responses/{name}")})
}

fn json_body(schema: Value, description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": schema}}
    })
}

/// OpenAPI 3.1 reads the `schema` of `text/event-stream` as the schema of one event, an object
/// of its fields (`event`, `data`, `id`, `retry`); `data` is JSON, described by `contentSchema`.
fn sse_body(description: &str, event: Value) -> Value {
    json!({
        "description": description,
        "content": {"text/event-stream": {"schema": event}}
    })
}

/// The document, with `base_url` (origin plus base path) as its server. Each entrypoint the
/// live workers host gets its own `invoke` (and, when it streams, `stream`) path with its own
/// input schema: a generic `{key}` path could only promise "any input", which every entrypoint
/// with a schema refuses.
pub fn document(config: &GatewayConfig, base_url: &str, entrypoints: &[EntrypointInfo]) -> Value {
    let mut paths = paths();
    if let Some(all) = paths.as_object_mut() {
        for entrypoint in entrypoints {
            all.extend(entrypoint_paths(entrypoint));
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": config.agent_name,
            "description": format!(
                "{}\n\nLucid A2A HTTP profile: Agent Card discovery, direct invocation and \
                 streaming of entrypoints, and owned asynchronous tasks. This is not an \
                 official A2A v1 binding.",
                config.agent_description
            ),
            "version": config.agent_version,
        },
        "servers": [{"url": base_url}],
        "tags": [
            {"name": "discovery", "description": "What this agent offers"},
            {"name": "entrypoints", "description": "Direct invocation and streaming"},
            {"name": "tasks", "description": "Owned asynchronous tasks (Task-Access-Token)"},
            {"name": "operations", "description": "Liveness and readiness"}
        ],
        "paths": paths,
        "components": components(),
    })
}

/// Every path of the profile, in the document's order: operations, discovery, tasks, pages.
fn paths() -> Value {
    let mut paths = serde_json::Map::new();
    for group in [
        operation_paths(),
        discovery_paths(),
        task_paths(),
        page_paths(),
    ] {
        if let Value::Object(group) = group {
            paths.extend(group);
        }
    }
    Value::Object(paths)
}

/// Liveness and readiness.
fn operation_paths() -> Value {
    json!({
        "/health": {"get": {
            "tags": ["operations"],
            "operationId": "health",
            "summary": "Liveness: the process answers",
            "responses": {"200": json_body(schema("Health"), "Up")}
        }},
        "/ready": {"get": {
            "tags": ["operations"],
            "operationId": "ready",
            "summary": "Readiness: the task store answers",
            "responses": {
                "200": json_body(schema("Ready"), "Ready"),
                "503": response("Unavailable")
            }
        }}
    })
}

/// The Agent Card (and its legacy path) and the entrypoint list.
fn discovery_paths() -> Value {
    let card = json!({
        "tags": ["discovery"],
        "summary": "Agent Card",
        "description": "A2A-shaped Agent Card plus Lucid entrypoint metadata, built from the \
            live workers. URLs follow X-Forwarded-Proto (http or https) and X-Forwarded-Host. \
            Carries an ETag; If-None-Match answers 304.",
        "responses": {
            "200": json_body(schema("AgentCard"), "The card"),
            "304": {"description": "Unchanged since the ETag in If-None-Match"},
            "503": response("Unavailable")
        }
    });
    let mut legacy_card = card.clone();
    legacy_card["summary"] = json!("Agent Card (legacy path)");
    legacy_card["operationId"] = json!("getAgentCardLegacy");
    let mut card = card;
    card["operationId"] = json!("getAgentCard");

    json!({
        "/.well-known/agent-card.json": {"get": card},
        "/.well-known/agent.json": {"get": legacy_card},
        "/.well-known/jwks.json": {"get": {
            "tags": ["discovery"],
            "operationId": "getCardSigningKeys",
            "summary": "Public keys of the card's signatures (JWK Set)",
            "description": "With CARD_SIGNING_KEY_FILE: the ES256 keys whose kid the card's \
                signatures name (A2A v1.0 section 8.4). Carries an ETag.",
            "responses": {
                "200": {"description": "The JWK Set", "content": {"application/json": {"schema": {"type": "object"}}}},
                "304": {"description": "Unchanged since the ETag in If-None-Match"},
                "404": {"description": "Cards are not signed"}
            }
        }},
        "/entrypoints": {"get": {
            "tags": ["discovery"],
            "operationId": "listEntrypoints",
            "summary": "Entrypoints the live workers host",
            "responses": {
                "200": json_body(schema("EntrypointList"), "The entrypoints"),
                "304": {"description": "Unchanged since the ETag in If-None-Match"},
                "503": response("Unavailable")
            }
        }}
    })
}

/// Owned tasks: create, list, read, cancel, follow.
fn task_paths() -> Value {
    json!({
        "/tasks": {
            "post": {
                "tags": ["tasks"],
                "operationId": "createTask",
                "summary": "Create a task",
                "description": "The returned accessToken is the only way to read, list, \
                    cancel or follow the task. Send your own in Task-Access-Token (required \
                    for paid skills); free skills generate one when it is absent.",
                "parameters": [
                    parameter("TaskAccessTokenOptional"),
                    parameter("IdempotencyKeyIgnored"),
                    parameter("PaymentSignature"),
                    parameter("XPayment")
                ],
                "requestBody": {
                    "required": true,
                    "content": {"application/json": {"schema": schema("SendMessageRequest")}}
                },
                "responses": {
                    "200": {
                        "description": "Task created",
                        "content": {"application/json": {"schema": schema("SendMessageResponse")}},
                        "links": task_links()
                    },
                    "400": response("BadRequest"),
                    "401": response("Unauthorized"),
                    "402": response("PaymentRequired"),
                    "403": error_response("The payment breaks a policy (policy_violation)"),
                    "404": response("NotFound"),
                    "413": response("PayloadTooLarge"),
                    "429": response("TooManyRequests"),
                    "501": response("NotImplemented"),
                    "503": response("Unavailable")
                }
            },
            "get": {
                "tags": ["tasks"],
                "operationId": "listTasks",
                "summary": "List the tasks owned by this token, newest first",
                "parameters": [
                    parameter("TaskAccessToken"),
                    {"name": "contextId", "in": "query", "schema": {"type": "string"}},
                    {"name": "status", "in": "query",
                     "description": "One status or a comma-separated list of them (running, \
                        completed, failed, cancelled); empty: any. Another value: 400 \
                        invalid_request.",
                     "schema": {"type": "string", "pattern": status_filter_pattern()},
                     "example": "running,completed"},
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 50}},
                    {"name": "offset", "in": "query",
                     "description": "Tasks to skip; past the last one the page is empty",
                     "schema": {"type": "integer", "minimum": 0, "default": 0}}
                ],
                "responses": {
                    "200": json_body(schema("TaskList"), "The owner's tasks (empty for an unknown token)"),
                    "400": response("BadRequest"),
                    "401": response("Unauthorized"),
                    "503": response("Unavailable")
                }
            }
        },
        "/tasks/{taskId}": {"get": {
            "tags": ["tasks"],
            "operationId": "getTask",
            "summary": "Read a task",
            "parameters": [parameter("TaskId"), parameter("TaskAccessToken")],
            "responses": {
                "200": json_body(schema("Task"), "The task"),
                "400": response("BadRequest"),
                "401": response("Unauthorized"),
                "404": response("NotFound"),
                "503": response("Unavailable")
            }
        }},
        "/tasks/{taskId}/cancel": {"post": {
            "tags": ["tasks"],
            "operationId": "cancelTask",
            "summary": "Cancel a running task",
            "parameters": [parameter("TaskId"), parameter("TaskAccessToken")],
            "responses": {
                "200": json_body(schema("Task"), "The cancelled task"),
                "400": error_response("The task is no longer running (invalid_state), or the \
                    token's length is wrong (task_access_required)"),
                "401": response("Unauthorized"),
                "404": response("NotFound"),
                "409": response("Conflict"),
                "503": response("Unavailable")
            }
        }},
        "/tasks/{taskId}/subscribe": {"get": {
            "tags": ["tasks"],
            "operationId": "subscribeTask",
            "summary": "Follow a task's events",
            "description": "Server-sent events without `id:` lines: `event:` statusUpdate, \
                resultUpdate or error, `data:` a TaskEvent. Starts with the current status \
                (and the result or error of a finished task); ends when the task is terminal.",
            "parameters": [parameter("TaskId"), parameter("TaskAccessToken")],
            "responses": {
                "200": sse_body(
                    "Task events (data: TaskEvent)",
                    json!({
                        "type": "object",
                        "required": ["event", "data"],
                        "properties": {
                            "event": {"type": "string", "enum": ["statusUpdate", "resultUpdate", "error"]},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": schema("TaskEvent")
                            }
                        }
                    }),
                ),
                "400": response("BadRequest"),
                "401": response("Unauthorized"),
                "404": response("NotFound"),
                "503": response("Unavailable")
            }
        }}
    })
}

/// This document, the landing page and its icon.
fn page_paths() -> Value {
    json!({
        "/openapi.json": {"get": {
            "tags": ["discovery"],
            "operationId": "openapi",
            "summary": "This document",
            "responses": {"200": {
                "description": "OpenAPI 3.1",
                "content": {"application/json": {"schema": {"type": "object"}}}
            }}
        }},
        "/": {"get": {
            "tags": ["discovery"],
            "operationId": "landingPage",
            "summary": "A page for people: the entrypoints and how to call them",
            "responses": {
                "200": {"description": "HTML", "content": {"text/html": {"schema": {"type": "string"}}}},
                "503": response("Unavailable")
            }
        }},
        "/favicon.svg": {"get": {
            "tags": ["discovery"],
            "operationId": "favicon",
            "summary": "Icon",
            "responses": {"200": {
                "description": "SVG",
                "content": {"image/svg+xml": {"schema": {"type": "string"}}}
            }}
        }}
    })
}

/// The body `/entrypoints/{key}/invoke` and `/stream` read: `{"input": ...}`, or (as upstream
/// reads a body without an `input` member) the whole body as the input. A body with an `input`
/// member is read as the first form only, so the second excludes it: otherwise the document
/// would allow `{"code": "x", "input": {}}` (valid as a whole) that the server reads as the
/// input `{}` and refuses.
fn invoke_body(input_schema: &Value) -> Value {
    json!({"anyOf": [
        {
            "type": "object",
            "required": ["input"],
            "properties": {"input": input_schema}
        },
        {"allOf": [
            input_schema,
            {"not": {"type": "object", "required": ["input"]}}
        ]}
    ]})
}

/// `POST /entrypoints/<key>/invoke`, and `/stream` for a streaming entrypoint.
fn entrypoint_paths(entrypoint: &EntrypointInfo) -> serde_json::Map<String, Value> {
    let key = &entrypoint.key;
    let priced = entrypoint.price.is_some();
    let auth_only = entrypoint.siwx.is_some_and(|policy| policy.auth_only);
    let mut parameters = vec![parameter("IdempotencyKey")];
    if priced {
        parameters.extend([parameter("PaymentSignature"), parameter("XPayment")]);
    }
    let body = json!({
        "required": true,
        "content": {"application/json": {
            "schema": invoke_body(&entrypoint.input_schema),
            "example": {"input": {}}
        }}
    });
    // Every route of an entrypoint answers these; a priced one adds 402, an auth-only one 401.
    let mut errors = serde_json::Map::new();
    errors.insert("400".into(), response("BadRequest"));
    if auth_only {
        errors.insert(
            "401".into(),
            error_response("Sign in with SIGN-IN-WITH-X (auth_required)"),
        );
    }
    if priced {
        errors.insert("402".into(), response("PaymentRequired"));
        errors.insert(
            "403".into(),
            error_response("The payment breaks a policy (policy_violation)"),
        );
    }
    errors.insert("404".into(), response("NotFound"));
    errors.insert("413".into(), response("PayloadTooLarge"));
    errors.insert("429".into(), response("TooManyRequests"));
    errors.insert("501".into(), response("NotImplemented"));
    errors.insert("503".into(), response("Unavailable"));

    let mut invoke_responses = errors.clone();
    invoke_responses.insert(
        "200".into(),
        json!({
            "description": "The run succeeded. A replay of an Idempotency-Key \
                carries Idempotency-Replayed: true.",
            "headers": {"Idempotency-Replayed": {
                "description": "true when this is the stored response of an earlier request with the same Idempotency-Key",
                "schema": {"type": "string", "enum": ["true"]}
            }},
            "content": {"application/json": {"schema": {
                "allOf": [schema("InvokeResponse")],
                "properties": {"output": entrypoint.output_schema}
            }}}
        }),
    );
    invoke_responses.insert("409".into(), response("Conflict"));
    invoke_responses.insert("500".into(), response("InternalError"));
    invoke_responses.insert(
        "502".into(),
        error_response("The worker running it was lost (task_attempts_exhausted)"),
    );
    invoke_responses.insert(
        "504".into(),
        error_response("The run took too long (task_timeout)"),
    );

    let mut paths = serde_json::Map::new();
    paths.insert(
        format!("/entrypoints/{key}/invoke"),
        json!({"post": {
            "tags": ["entrypoints"],
            "operationId": format!("invoke:{key}"),
            "summary": format!("Run {key} and wait for its result"),
            "description": entrypoint.description,
            "parameters": parameters,
            "requestBody": body,
            "responses": invoke_responses
        }}),
    );
    if entrypoint.streaming {
        let mut parameters = parameters.clone();
        parameters.retain(|p| *p != parameter("IdempotencyKey"));
        let mut stream_responses = errors;
        stream_responses.insert(
            "200".into(),
            sse_body(
                "Run events: `id:` (the sequence), `event:` (the kind), `data:` (a RunEvent). \
                 A failed run ends with an error event and run-end; the stream ends after run-end.",
                json!({
                    "type": "object",
                    "required": ["event", "data"],
                    "properties": {
                        "id": {"type": "string", "pattern": "^[0-9]+$"},
                        "event": {"type": "string", "enum": RUN_EVENT_KINDS},
                        "data": {
                            "type": "string",
                            "contentMediaType": "application/json",
                            "contentSchema": schema("RunEvent")
                        }
                    }
                }),
            ),
        );
        paths.insert(
            format!("/entrypoints/{key}/stream"),
            json!({"post": {
                "tags": ["entrypoints"],
                "operationId": format!("stream:{key}"),
                "summary": format!("Run {key}, following its events"),
                "parameters": parameters,
                "description": "The input is checked inside the stream, as upstream does: \
                    input that breaks the entrypoint's input_schema (see invoke) answers 200 \
                    with an error event (code invalid_input) and a failed run-end.",
                "requestBody": {
                    "required": true,
                    "content": {"application/json": {
                        "schema": schema("InvokeRequest"),
                        "example": {"input": {}}
                    }}
                },
                "responses": stream_responses
            }}),
        );
    }
    paths
}

/// `event:` of `/entrypoints/{key}/stream`.
const RUN_EVENT_KINDS: &[&str] = &[
    "run-start",
    "text",
    "delta",
    "asset",
    "control",
    "error",
    "run-end",
];

/// Task states, as `GET /tasks?status=` takes them.
const TASK_STATES: &[&str] = &["running", "completed", "failed", "cancelled"];

/// `GET /tasks?status=`: one state or a comma-separated list (blanks around each are trimmed;
/// an empty value means no filter).
fn status_filter_pattern() -> String {
    let state = format!("({})", TASK_STATES.join("|"));
    format!(r"^(\s*{state}\s*(,\s*{state}\s*)*)?$")
}

/// From a created task to the operations on it: its id and its token are in the answer.
fn task_links() -> Value {
    let on_task = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": {
                "path.taskId": "$response.body#/taskId",
                "header.Task-Access-Token": "$response.body#/accessToken"
            }
        })
    };
    json!({
        "GetTask": on_task("getTask"),
        "CancelTask": on_task("cancelTask"),
        "SubscribeTask": on_task("subscribeTask"),
        "ListTasks": {
            "operationId": "listTasks",
            "parameters": {"header.Task-Access-Token": "$response.body#/accessToken"}
        }
    })
}

fn error_response(description: &str) -> Value {
    json_body(schema("Error"), description)
}

fn components() -> Value {
    let mut schemas = task_schemas();
    if let (Some(all), Value::Object(more)) = (schemas.as_object_mut(), discovery_schemas()) {
        all.extend(more);
    }
    json!({
        "parameters": parameters(),
        "responses": responses(),
        "schemas": schemas,
    })
}

fn parameters() -> Value {
    json!({
            "TaskAccessToken": {
                "name": "Task-Access-Token",
                "in": "header",
                "required": true,
                "description": "The task's ownership capability: 20 to 256 characters after \
                    trimming. Only its SHA-256 is stored. Missing: 401 task_access_required; \
                    wrong length: 400 task_access_required; another owner's task reads as \
                    404 task_not_found.",
                "schema": {"type": "string", "minLength": 20, "maxLength": 256}
            },
            "TaskAccessTokenOptional": {
                "name": "Task-Access-Token",
                "in": "header",
                "required": false,
                "description": "Your token for the new task (20 to 256 characters). Required \
                    for paid skills; free skills generate one when absent.",
                "schema": {"type": "string", "minLength": 20, "maxLength": 256}
            },
            "IdempotencyKey": {
                "name": "Idempotency-Key",
                "in": "header",
                "required": false,
                "description": "20 to 256 characters. The same key with the same request \
                    replays the stored response; with another request: 409 \
                    idempotency_key_conflict; while the first is running: 409 \
                    idempotency_in_progress with Retry-After.",
                "schema": {"type": "string", "minLength": 20, "maxLength": 256}
            },
            "IdempotencyKeyIgnored": {
                "name": "Idempotency-Key",
                "in": "header",
                "required": false,
                "description": "Accepted and not used: task creation is not deduplicated \
                    (upstream's client sends a random one with every creation). Keep the \
                    taskId and accessToken of the answer instead.",
                "schema": {"type": "string"}
            },
            "PaymentSignature": {
                "name": "PAYMENT-SIGNATURE",
                "in": "header",
                "required": false,
                "description": "x402 v2 payment for a priced entrypoint (see pricing in the \
                    Agent Card): standard base64 of the JSON payment payload answering the \
                    PAYMENT-REQUIRED challenge. Free entrypoints ignore it.",
                "schema": {"type": "string"}
            },
            "XPayment": {
                "name": "X-PAYMENT",
                "in": "header",
                "required": false,
                "description": "x402 v1 payment for a priced entrypoint: standard base64 of \
                    the JSON payment payload answering one of the 402 body's accepts.",
                "schema": {"type": "string"}
            },
            "TaskId": {
                "name": "taskId", "in": "path", "required": true,
                "schema": {"type": "string"}
            }
    })
}

fn responses() -> Value {
    json!({
            "BadRequest": error_response("Invalid request, input, token or idempotency key"),
            "Unauthorized": error_response("Task-Access-Token missing (task_access_required)"),
            "NotFound": error_response("Unknown entrypoint, skill or task (or another owner's task)"),
            "Conflict": error_response("Idempotency conflict, or the task changed meanwhile (invalid_state)"),
            "InternalError": error_response("The handler failed or returned invalid output"),
            "NotImplemented": error_response("The entrypoint has no handler"),
            "PaymentRequired": {
                "description": "The entrypoint is priced (see pricing in the Agent Card) and no \
                    valid payment came, or settlement was refused (settlement_failed, an Error \
                    body). The x402 v2 challenge is in PAYMENT-REQUIRED; the body is the x402 \
                    v1 challenge. Pay with PAYMENT-SIGNATURE (v2) or X-PAYMENT (v1) and retry.",
                "headers": {
                    "PAYMENT-REQUIRED": {
                        "description": "Standard base64 of the x402 v2 challenge: {x402Version: 2, error, resource, accepts}",
                        "schema": {"type": "string"}
                    },
                    "Cache-Control": {"schema": {"type": "string", "enum": ["no-store"]}}
                },
                "content": {"application/json": {"schema": {
                    "oneOf": [schema("X402Challenge"), schema("Error")]
                }}}
            },
            "PayloadTooLarge": error_response("The body or the input is larger than this gateway takes (invalid_request)"),
            "TooManyRequests": {
                "description": "Rate limited (rate_limited); retry after Retry-After seconds",
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": schema("Error")}}
            },
            "Unavailable": {
                "description": "The task store or registry is unreachable, or capacity is exhausted; retry",
                "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": schema("Error")}}
            }
    })
}

/// The error body and the task wire types.
fn task_schemas() -> Value {
    let status = json!({"type": "string", "enum": ["running", "completed", "failed", "cancelled"]});
    json!({
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {
                    "type": "object",
                    "required": ["code"],
                    "properties": {
                        "code": {"type": "string", "enum": ERROR_CODES},
                        "message": {"type": "string"},
                        "issues": {"description": "Validation issues (invalid_input)"}
                    }
                }}
            },
            "TaskStatus": status,
            "Task": {
                "type": "object",
                "required": ["taskId", "status", "createdAt", "updatedAt"],
                "properties": {
                    "taskId": {"type": "string"},
                    "status": schema("TaskStatus"),
                    "contextId": {"type": "string"},
                    "createdAt": {"type": "string", "format": "date-time"},
                    "updatedAt": {"type": "string", "format": "date-time"},
                    "result": {
                        "type": "object",
                        "required": ["output"],
                        "properties": {
                            "output": {},
                            "usage": {"type": "object"},
                            "model": {"type": "string"}
                        }
                    },
                    "error": {
                        "type": "object",
                        "required": ["code", "message"],
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string"},
                            "details": {}
                        }
                    },
                    "attempt": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "The current or last run's attempt number; only on a task whose handler asked for a retry (GET /tasks/{taskId})"
                    },
                    "lastError": {
                        "type": "object",
                        "required": ["code", "message"],
                        "description": "The failure of the last run that asked for a retry; only on a task whose handler asked for one (GET /tasks/{taskId})",
                        "properties": {
                            "code": {"type": "string"},
                            "message": {"type": "string"},
                            "details": {}
                        }
                    }
                }
            },
            "TaskList": {
                "type": "object",
                "required": ["tasks", "total", "hasMore"],
                "properties": {
                    "tasks": {"type": "array", "items": schema("Task")},
                    "total": {"type": "integer"},
                    "hasMore": {"type": "boolean"}
                }
            },
            "SendMessageRequest": {
                "type": "object",
                "required": ["skillId", "message"],
                "properties": {
                    "skillId": {"type": "string", "description": "An entrypoint key"},
                    "message": {
                        "type": "object",
                        "required": ["role", "content"],
                        "properties": {
                            "role": {"type": "string", "enum": ["user", "assistant", "system"]},
                            "content": {"oneOf": [
                                {
                                    "type": "object",
                                    "required": ["text"],
                                    "properties": {"text": {
                                        "type": "string",
                                        "description": "Parsed as JSON when it is JSON, else passed as a string"
                                    }}
                                },
                                {
                                    "type": "object",
                                    "required": ["parts"],
                                    "properties": {"parts": {
                                        "type": "array",
                                        "description": "The text of the first part that has one is the input, unparsed",
                                        "items": {"type": "object", "properties": {"text": {"type": ["string", "null"]}}}
                                    }}
                                }
                            ]}
                        }
                    },
                    "contextId": {"type": ["string", "null"]},
                    "metadata": {"description": "Any JSON value; kept with the task"}
                },
                "example": {
                    "skillId": "echo",
                    "message": {"role": "user", "content": {"text": "{\"x\":1}"}}
                }
            },
            "SendMessageResponse": {
                "type": "object",
                "required": ["taskId", "accessToken", "status"],
                "properties": {
                    "taskId": {"type": "string"},
                    "accessToken": {"type": "string", "description": "Keep it secret"},
                    "status": schema("TaskStatus")
                }
            },
            "TaskEvent": {
                "type": "object",
                "required": ["taskId"],
                "properties": {
                    "taskId": {"type": "string"},
                    "status": schema("TaskStatus"),
                    "result": {"type": "object"},
                    "error": {"type": "object"}
                }
            }
    })
}

/// Invocation, streaming, discovery and health bodies.
fn discovery_schemas() -> Value {
    json!({
            "InvokeRequest": {
                "description": "`{\"input\": ...}`, or (without an `input` member) the whole \
                    body is the input",
                "properties": {"input": {"description": "Checked against the entrypoint's input_schema (see the Agent Card)"}},
                "example": {"input": {"x": 1}}
            },
            "InvokeResponse": {
                "type": "object",
                "required": ["run_id", "status"],
                "properties": {
                    "run_id": {"type": "string"},
                    "status": {"type": "string", "enum": ["succeeded"]},
                    "output": {},
                    "usage": {"type": "object"},
                    "model": {"type": "string"}
                }
            },
            "RunEvent": {
                "type": "object",
                "required": ["kind", "runId", "sequence", "createdAt"],
                "properties": {
                    "kind": {"type": "string", "enum": RUN_EVENT_KINDS},
                    "runId": {"type": "string"},
                    "sequence": {"type": "integer"},
                    "createdAt": {"type": "string", "format": "date-time"}
                },
                "additionalProperties": true
            },
            "EntrypointList": {
                "type": "object",
                "required": ["items"],
                "properties": {"items": {"type": "array", "items": {
                    "type": "object",
                    "required": ["key", "description", "streaming"],
                    "properties": {
                        "key": {"type": "string"},
                        "description": {"type": "string"},
                        "streaming": {"type": "boolean"}
                    }
                }}}
            },
            "AgentCard": {
                "type": "object",
                "required": ["protocolVersion", "name", "url", "supportedInterfaces", "capabilities", "skills", "entrypoints"],
                "properties": {
                    "protocolVersion": {"type": "string", "const": "1.0"},
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "url": {"type": "string", "format": "uri"},
                    "supportedInterfaces": {"type": "array", "items": {
                        "type": "object",
                        "properties": {
                            "url": {"type": "string", "format": "uri"},
                            "protocolBinding": {"type": "string"}
                        }
                    }},
                    "version": {"type": "string"},
                    "capabilities": {"type": "object"},
                    "skills": {"type": "array", "items": {"type": "object"}},
                    "entrypoints": {"type": "object", "additionalProperties": {
                        "type": "object",
                        "properties": {
                            "description": {"type": "string"},
                            "streaming": {"type": "boolean"},
                            "input_schema": {"type": "object"},
                            "output_schema": {"type": "object"},
                            "payment_protocol": {"type": "string", "enum": ["x402", "mpp"]},
                            "network": {"type": "string", "description": "CAIP-2, e.g. eip155:84532"},
                            "pricing": {"type": "object", "properties": {
                                "invoke": {"type": "string", "description": "Decimal USDC"},
                                "stream": {"type": "string", "description": "Decimal USDC"}
                            }}
                        }
                    }},
                    "payments": {"type": "array", "items": {
                        "type": "object",
                        "required": ["method", "network"],
                        "properties": {
                            "method": {"type": "string", "enum": ["x402"]},
                            "payee": {"type": "string"},
                            "network": {"type": "string"},
                            "endpoint": {"type": "string", "format": "uri", "description": "The facilitator"},
                            "priceModel": {"type": "object", "properties": {"default": {"type": "string"}}},
                            "extensions": {"type": "object"}
                        }
                    }}
                }
            },
            "X402Challenge": {
                "type": "object",
                "required": ["x402Version", "accepts"],
                "properties": {
                    "x402Version": {"type": "integer", "const": 1},
                    "error": {"type": "string"},
                    "accepts": {"type": "array", "items": {
                        "type": "object",
                        "description": "x402 v1 PaymentRequirements",
                        "properties": {
                            "scheme": {"type": "string"},
                            "network": {"type": "string"},
                            "maxAmountRequired": {"type": "string", "description": "Atomic USDC units"},
                            "asset": {"type": "string"},
                            "payTo": {"type": "string"},
                            "resource": {"type": "string"},
                            "maxTimeoutSeconds": {"type": "integer"}
                        }
                    }}
                }
            },
            "Health": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}, "version": {"type": "string"}}
            },
            "Ready": {
                "type": "object",
                "properties": {"status": {"type": "string"}, "liveTasks": {"type": "integer"}}
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document lists each code once, by its wire name.
    #[test]
    fn error_codes_are_the_profile_codes() {
        let doc = document(&GatewayConfig::for_tests(), "http://h", &[]);
        let listed: Vec<String> = serde_json::to_value(ERROR_CODES)
            .ok()
            .and_then(|codes| serde_json::from_value(codes).ok())
            .unwrap_or_default();
        let names: Vec<&str> = ERROR_CODES.iter().map(|code| code.as_str()).collect();
        assert_eq!(listed, names);
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), names.len());
        assert!(doc.to_string().contains("\"address_capacity_exhausted\""));
    }

    /// Every `$ref` points at something defined.
    #[test]
    fn references_resolve() {
        let doc = document(&GatewayConfig::for_tests(), "http://h", &[]);
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for reference in refs {
            let pointer = reference.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{reference}");
        }
    }

    fn collect_refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("$ref", Value::String(reference)) => out.push(reference.clone()),
                        _ => collect_refs(value, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| collect_refs(item, out)),
            _ => {}
        }
    }
}
