//! `SendMessage` and `SendStreamingMessage`: a message admits a task for a skill (through the
//! payment gate when the skill is priced), or runs the next turn of a task that waits for
//! input; then the answer waits for the task, or streams it ([`super::follow`]). With the
//! A2A x402 extension activated, a priced skill is offered and paid in-band instead
//! ([`super::inband`]).

use std::time::Duration;

use a2a::{Message, SendMessageRequest, SendMessageResponse, StreamResponse};
use futures::StreamExt;
use futures::stream::BoxStream;
use store::registry::EntrypointInfo;
use store::{Durability, Phase, Resumed, StoredTask};

use super::follow::follow;
use super::message::{check_message, input_for};
use super::push_config;
use super::{Caller, Refusal, Reply, bounded, history_length, read_owned};
use crate::a2a::error::{self, A2aError};
use crate::a2a::mapping;
use crate::core::admit;
use crate::core::create::Admit;
use crate::core::pay;
use crate::core::pay::receipt::Receipt;
use crate::core::watch::{RunEvent, Watch};

/// `SendMessage`: admits a task for the message and, unless `returnImmediately`, waits for it
/// to finish (at most `--invoke-timeout-ms`; then the task as it stands).
pub async fn send(
    caller: &Caller<'_>,
    request: SendMessageRequest,
) -> Result<Reply<SendMessageResponse>, Refusal> {
    let immediately = request
        .configuration
        .as_ref()
        .and_then(|configuration| configuration.return_immediately)
        .unwrap_or(false);
    let history_length = history_length(
        request
            .configuration
            .as_ref()
            .and_then(|configuration| configuration.history_length),
    )?;
    let started = match start(caller, request).await? {
        Begun::Started(started) => started,
        Begun::Answered(task) => {
            return Ok(Reply {
                value: SendMessageResponse::Task(task),
                receipt: None,
            });
        }
    };
    let state = caller.state;
    let task_id = started.task_id.clone();
    if !immediately {
        let wait = Duration::from_millis(state.config.invoke_timeout_ms);
        let mut watch = started.watch;
        let finished = tokio::time::timeout(wait, async {
            loop {
                if let RunEvent::Finished(_) | RunEvent::InputRequired { .. } = watch.next().await?
                {
                    return Ok::<(), crate::http::error::ApiError>(());
                }
            }
        })
        .await;
        if let Ok(Err(err)) = finished {
            return Err(Refusal::A2a(err.into()));
        }
    }
    let stored = read_owned(state, &caller.owner, &task_id).await?;
    let mut value = match mapping::reply_of(&stored) {
        Some(message) => SendMessageResponse::Message(message),
        None => SendMessageResponse::Task(mapping::task_of(&stored, history_length)),
    };
    if started.in_band {
        super::inband::paid_reply(&mut value, started.receipt.as_ref());
    }
    Ok(Reply {
        value,
        receipt: started.receipt,
    })
}

/// `SendStreamingMessage`: admits a task for the message and streams it: the task first, then
/// its status and artifact updates, closing after its final status.
pub async fn stream(
    caller: &Caller<'_>,
    request: SendMessageRequest,
) -> Result<Reply<BoxStream<'static, StreamResponse>>, Refusal> {
    let started = match start(caller, request).await? {
        Begun::Started(started) => started,
        Begun::Answered(task) => {
            return Ok(Reply {
                value: futures::stream::iter([StreamResponse::Task(task)]).boxed(),
                receipt: None,
            });
        }
    };
    let first = as_admitted(read_owned(caller.state, &caller.owner, &started.task_id).await?);
    let mut events = follow(
        caller.state.store.clone(),
        caller.owner.clone(),
        first,
        started.watch,
        true,
    );
    if started.in_band {
        events = super::inband::paid_events(events, started.receipt.as_ref());
    }
    let events = bounded(caller.state, events);
    Ok(Reply {
        value: events,
        receipt: started.receipt,
    })
}

/// The task as its turn was admitted: the stream's first event. The watch subscribed before
/// the task was created (or resumed) and replays every update since, so a task that ran on, or
/// even to its end, before this read must not be shown further along than that: its stream
/// would then skip the updates in between (a fast `count` streamed only its end). Its record
/// is shown as it stood when admitted (submitted, no result yet), and the watch brings the
/// rest in order.
fn as_admitted(mut stored: StoredTask) -> StoredTask {
    if stored.task.status.is_terminal()
        || matches!(
            stored.phase,
            Phase::Prepared | Phase::Active | Phase::Waiting
        )
    {
        stored.task.status = protocol::TaskStatus::Running;
        stored.task.result = None;
        stored.task.error = None;
        stored.phase = Phase::Queued;
        stored.lease = None;
        stored.input_request = None;
    }
    stored
}

/// A task admitted for a message, followed from its first event.
pub(super) struct Started {
    pub(super) task_id: String,
    watch: Watch,
    pub(super) receipt: Option<Receipt>,
    /// Paid in-band (the A2A x402 extension): the answers carry the payment's metadata.
    pub(super) in_band: bool,
}

/// What a message began: a task, or an answer that stores nothing (the x402 extension's
/// payment-required, refused or declined payments).
pub(super) enum Begun {
    Started(Started),
    Answered(a2a::Task),
}

/// Checks a message and admits its task: the skill, the input, the payment.
async fn start(caller: &Caller<'_>, request: SendMessageRequest) -> Result<Begun, Refusal> {
    let state = caller.state;
    let in_band = super::inband::activated(caller);
    if in_band && super::inband::submitted(&request.message) {
        return super::inband::pay(caller, request).await;
    }
    let message = request.message;
    let inline = request
        .configuration
        .and_then(|configuration| configuration.task_push_notification_config);
    if let Some(waiting) = check_message(state, caller, &message).await? {
        if let Some(config) = inline {
            push_config::store_existing(caller, &waiting.task.task_id, config).await?;
        }
        return resume(caller, waiting, message).await.map(Begun::Started);
    }
    let entrypoint = skill_for(caller, &message).await?;
    let input = input_for(state, &entrypoint, &message)?;
    if in_band
        && let Some(offer) = super::inband::offer(caller, &entrypoint, &message, &input)
            .await
            .map_err(|answer| Refusal::Http(*answer))?
    {
        return Ok(Begun::Answered(offer));
    }
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let metadata = mapping::metadata_of(&message, &input);
    let admit = Admit {
        owner: caller.owner.clone(),
        entrypoint: &entrypoint.key,
        input,
        context_id: Some(context_id),
        metadata: Some(metadata),
        max_attempts: state.config.max_attempts,
        retention: None,
        source: caller.source.clone(),
        private_owner: false,
    };
    let payment = gate(caller, &entrypoint).await?;
    let task_id = uuid::Uuid::new_v4().to_string();
    admit_new(caller, payment, admit, task_id, inline)
        .await
        .map(Begun::Started)
}

/// Admits a new task (paid when `payment` is given) under `task_id`, with the send's inline
/// push config stored first when it has one.
pub(super) async fn admit_new(
    caller: &Caller<'_>,
    payment: Option<pay::Payment<'_>>,
    admit: Admit<'_>,
    task_id: String,
    inline: Option<a2a::TaskPushNotificationConfig>,
) -> Result<Started, Refusal> {
    let state = caller.state;
    let Some(config) = inline else {
        return admit_task(caller, payment, admit, task_id).await;
    };
    // The inline push config is stored before its task exists, so that none of the task's
    // events can be published before it.
    let config = push_config::store_inline(caller, &task_id, config).await?;
    let started = admit_task(caller, payment, admit, task_id.clone()).await;
    match &started {
        Ok(_) => push_config::confirm_inline(caller, &task_id, &config).await,
        Err(_) => push_config::discard_inline(state, &task_id).await,
    }
    started
}

async fn admit_task(
    caller: &Caller<'_>,
    payment: Option<pay::Payment<'_>>,
    admit: Admit<'_>,
    task_id: String,
) -> Result<Started, Refusal> {
    match payment {
        None => start_free(caller, admit, task_id).await,
        Some(payment) => start_paid(caller, payment, admit, task_id).await,
    }
}

/// The skill a new task's message asks for (its `skillId`, else the default skill, else the
/// only one), as the catalog lists it to this caller (a private skill only to a member).
pub(super) async fn skill_for(
    caller: &Caller<'_>,
    message: &Message,
) -> Result<EntrypointInfo, A2aError> {
    let state = caller.state;
    let viewer = state.viewer(caller.headers);
    let skills = admit::entrypoints(state).await.map_err(A2aError::from)?;
    let keys: Vec<&str> = skills
        .visible(viewer)
        .map(|entrypoint| entrypoint.key.as_str())
        .collect();
    let skill = mapping::skill_of(
        message.metadata.as_ref(),
        state.config.a2a_default_skill.as_deref(),
        &keys,
    )
    .map_err(|err| A2aError::invalid_params(err.to_string()))?;
    let entrypoint = admit::entrypoint(state, viewer, &skill)
        .await
        .map_err(A2aError::from)?
        .ok_or_else(|| {
            A2aError::invalid_params(format!(
                "Skill {} not found",
                serde_json::Value::String(error::truncated(&skill).to_owned())
            ))
        })?;
    admit::refuse_paused(&entrypoint).map_err(A2aError::from)?;
    Ok(entrypoint)
}

/// A free (or signed-in) task: created with its watch subscribed first, so that the run's
/// every event reaches it.
async fn start_free(
    caller: &Caller<'_>,
    admit: Admit<'_>,
    task_id: String,
) -> Result<Started, Refusal> {
    let state = caller.state;
    let entrypoint = admit.entrypoint.to_owned();
    let (task, subscription) = admit::create_watched_as(state, admit, task_id)
        .await
        .map_err(A2aError::from)?;
    tracing::info!(task_id = %task.task_id, %entrypoint, "A2A task created");
    let watch = Watch::with(
        state.store.clone(),
        &task.task_id,
        &caller.owner,
        subscription,
    );
    Ok(Started {
        task_id: task.task_id,
        watch,
        receipt: None,
        in_band: false,
    })
}

/// A paid task: admitted by the payment gate's durable admission (on a durable store only),
/// then watched from its snapshot.
async fn start_paid(
    caller: &Caller<'_>,
    payment: pay::Payment<'_>,
    admit: Admit<'_>,
    task_id: String,
) -> Result<Started, Refusal> {
    let state = caller.state;
    if state.store.durability() == Durability::Process {
        return Err(A2aError::unsupported("Paid tasks require a durable task store").into());
    }
    let entrypoint = admit.entrypoint.to_owned();
    let paid =
        match pay::admission::admit_paid_as(state.pay_context(), payment, admit, task_id).await {
            Ok(paid) => paid,
            Err(pay::admission::Refused::Answer(response)) => {
                return Err(Refusal::Http(response));
            }
            Err(pay::admission::Refused::Unconfirmed { task_id, receipt }) => {
                // Settled: the caller keeps the receipt and can read the task later.
                tracing::warn!(%task_id, "paid A2A task settled but its state is unconfirmed");
                let watch = Watch::open(state.store.clone(), &task_id, &caller.owner).await;
                return match watch {
                    Ok(watch) => Ok(Started {
                        task_id,
                        watch,
                        receipt: Some(receipt),
                        in_band: false,
                    }),
                    Err(err) => Err(Refusal::A2a(err.into())),
                };
            }
        };
    tracing::info!(task_id = %paid.task_id, %entrypoint, "paid A2A task created");
    let watch = Watch::open(state.store.clone(), &paid.task_id, &caller.owner)
        .await
        .map_err(A2aError::from)?;
    Ok(Started {
        task_id: paid.task_id,
        watch,
        receipt: Some(paid.receipt),
        in_band: false,
    })
}

/// A message answering a task that waits for input: the task's own skill runs the next turn
/// with it (a paid task's turns are part of what was paid for).
async fn resume(
    caller: &Caller<'_>,
    waiting: StoredTask,
    message: Message,
) -> Result<Started, Refusal> {
    let state = caller.state;
    let task_id = waiting.task.task_id.clone();
    let skill = waiting.invocation.entrypoint.clone();
    if let Some(named) = message
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.get("skillId"))
        && named.as_str() != Some(skill.as_str())
    {
        return Err(A2aError::invalid_params(format!(
            "Task {task_id} runs skill {}; a follow-up message cannot name another",
            serde_json::Value::String(skill.clone())
        ))
        .into());
    }
    let Some(entrypoint) = admit::entrypoint(state, state.viewer(caller.headers), &skill)
        .await
        .map_err(A2aError::from)?
    else {
        return Err(A2aError::unsupported(format!(
            "Task {task_id}'s skill is not offered any more"
        ))
        .into());
    };
    let input = input_for(state, &entrypoint, &message)?;
    let metadata = mapping::metadata_of(&message, &input);
    match state
        .store
        .resume(&task_id, &caller.owner, input, Some(metadata))
        .await
        .map_err(A2aError::from)?
    {
        Resumed::Queued { seq, .. } => {
            tracing::info!(%task_id, entrypoint = %skill, "A2A task resumed with input");
            let watch = Watch::open_after(state.store.clone(), &task_id, &caller.owner, seq)
                .await
                .map_err(A2aError::from)?;
            Ok(Started {
                task_id,
                watch,
                receipt: None,
                in_band: false,
            })
        }
        Resumed::NotFound => Err(A2aError::task_not_found(&task_id).into()),
        Resumed::NotWaiting(task) if task.status.is_terminal() => Err(A2aError::unsupported(
            format!("Task {task_id} is in a terminal state and takes no more messages"),
        )
        .into()),
        Resumed::NotWaiting(_) => {
            Err(A2aError::unsupported(format!("Task {task_id} is not waiting for input")).into())
        }
    }
}

/// The payment gate for a skill: signed in with SIWX (free), free, paid so far, or its answer.
async fn gate<'a>(
    caller: &Caller<'a>,
    entrypoint: &EntrypointInfo,
) -> Result<Option<pay::Payment<'a>>, Refusal> {
    let signed_in = pay::siwx::sign_in(
        caller.state.pay_context(),
        entrypoint,
        caller.headers,
        caller.uri,
    )
    .await
    .map_err(|answer| Refusal::Http(*answer))?;
    if signed_in.is_some() {
        return Ok(None);
    }
    pay::check(
        caller.state.pay_context(),
        entrypoint,
        pay::Priced::Task,
        caller.headers,
        caller.uri,
    )
    .await
    .map_err(|answer| Refusal::Http(*answer))
}
