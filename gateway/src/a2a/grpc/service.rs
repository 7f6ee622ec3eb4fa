//! `lf.a2a.v1.A2AService` over the A2A operations: each method identifies its caller
//! ([`super::caller`]), converts its request to the `a2a` type with `a2a_pb::pbconv`
//! ([`super::convert`] for messages), runs the same operation as the JSON-RPC and HTTP+JSON
//! bindings ([`crate::a2a::service`]) and converts the answer back; errors become statuses
//! ([`super::status`]).

use a2a_pb::a2a_service_server::A2aService;
use a2a_pb::pbconv;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::caller::{self, Metadata};
use super::convert;
use super::status;
use super::streaming::{self, Events};
use crate::a2a::extended;
use crate::a2a::service::{self, Caller, Reply, push_config};
use crate::core::pay::receipt::Receipt;
use crate::core::state::AppState;

/// The gRPC service: the gateway's state, as the HTTP bindings' handlers have it.
pub struct Grpc {
    state: AppState,
}

impl Grpc {
    pub fn new(state: AppState) -> Self {
        Grpc { state }
    }

    fn caller<'a>(&'a self, metadata: &'a Metadata) -> Caller<'a> {
        Caller {
            state: &self.state,
            owner: metadata.owner.clone(),
            headers: &metadata.headers,
            uri: &metadata.uri,
            source: metadata.source.clone(),
        }
    }
}

fn identify<T>(request: &Request<T>, method: &str) -> Result<Metadata, Status> {
    caller::of(request, method).map_err(|err| status::of(&err))
}

/// A paid answer carries its receipt as metadata, under the header name the HTTP bindings use.
fn with_receipt<T>(value: T, receipt: Option<Receipt>) -> Response<T> {
    let mut response = Response::new(value);
    if let Some(receipt) = receipt {
        let mut carrier = axum::response::Response::default();
        receipt.attach(&mut carrier);
        let headers = std::mem::take(carrier.headers_mut());
        *response.metadata_mut() = MetadataMap::from_headers(headers);
    }
    response
}

#[tonic::async_trait]
impl A2aService for Grpc {
    async fn send_message(
        &self,
        request: Request<a2a_pb::SendMessageRequest>,
    ) -> Result<Response<a2a_pb::SendMessageResponse>, Status> {
        let metadata = identify(&request, "SendMessage")?;
        let message = convert::send_message_request(request.get_ref());
        let Reply { value, receipt } = service::send(&self.caller(&metadata), message)
            .await
            .map_err(status::of_refusal)?;
        Ok(with_receipt(
            pbconv::to_proto_send_message_response(&value),
            receipt,
        ))
    }

    type SendStreamingMessageStream = Events;

    async fn send_streaming_message(
        &self,
        request: Request<a2a_pb::SendMessageRequest>,
    ) -> Result<Response<Events>, Status> {
        let metadata = identify(&request, "SendStreamingMessage")?;
        let message = convert::send_message_request(request.get_ref());
        let Reply { value, receipt } = service::stream(&self.caller(&metadata), message)
            .await
            .map_err(status::of_refusal)?;
        Ok(with_receipt(streaming::events(value), receipt))
    }

    async fn get_task(
        &self,
        request: Request<a2a_pb::GetTaskRequest>,
    ) -> Result<Response<a2a_pb::Task>, Status> {
        let metadata = identify(&request, "GetTask")?;
        let get = pbconv::from_proto_get_task_request(request.get_ref());
        let task = service::get(&self.caller(&metadata), get)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(pbconv::to_proto_task(&task)))
    }

    async fn list_tasks(
        &self,
        request: Request<a2a_pb::ListTasksRequest>,
    ) -> Result<Response<a2a_pb::ListTasksResponse>, Status> {
        let metadata = identify(&request, "ListTasks")?;
        let list = pbconv::from_proto_list_tasks_request(request.get_ref());
        let tasks = service::list(&self.caller(&metadata), list)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(pbconv::to_proto_list_tasks_response(&tasks)))
    }

    async fn cancel_task(
        &self,
        request: Request<a2a_pb::CancelTaskRequest>,
    ) -> Result<Response<a2a_pb::Task>, Status> {
        let metadata = identify(&request, "CancelTask")?;
        let cancel = pbconv::from_proto_cancel_task_request(request.get_ref());
        let task = service::cancel(&self.caller(&metadata), cancel)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(pbconv::to_proto_task(&task)))
    }

    type SubscribeToTaskStream = Events;

    async fn subscribe_to_task(
        &self,
        request: Request<a2a_pb::SubscribeToTaskRequest>,
    ) -> Result<Response<Events>, Status> {
        let metadata = identify(&request, "SubscribeToTask")?;
        let subscribe = pbconv::from_proto_subscribe_to_task_request(request.get_ref());
        let events = service::subscribe(&self.caller(&metadata), subscribe)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(streaming::events(events)))
    }

    async fn create_task_push_notification_config(
        &self,
        request: Request<a2a_pb::TaskPushNotificationConfig>,
    ) -> Result<Response<a2a_pb::TaskPushNotificationConfig>, Status> {
        let metadata = identify(&request, "CreateTaskPushNotificationConfig")?;
        let config = pbconv::from_proto_task_push_notification_config(request.get_ref());
        let stored = push_config::create(&self.caller(&metadata), config)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(
            pbconv::to_proto_task_push_notification_config(&stored),
        ))
    }

    async fn get_task_push_notification_config(
        &self,
        request: Request<a2a_pb::GetTaskPushNotificationConfigRequest>,
    ) -> Result<Response<a2a_pb::TaskPushNotificationConfig>, Status> {
        let metadata = identify(&request, "GetTaskPushNotificationConfig")?;
        let get = pbconv::from_proto_get_task_push_notification_config_request(request.get_ref());
        let stored = push_config::get(&self.caller(&metadata), get)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(
            pbconv::to_proto_task_push_notification_config(&stored),
        ))
    }

    async fn list_task_push_notification_configs(
        &self,
        request: Request<a2a_pb::ListTaskPushNotificationConfigsRequest>,
    ) -> Result<Response<a2a_pb::ListTaskPushNotificationConfigsResponse>, Status> {
        let metadata = identify(&request, "ListTaskPushNotificationConfigs")?;
        let list =
            pbconv::from_proto_list_task_push_notification_configs_request(request.get_ref());
        let configs = push_config::list(&self.caller(&metadata), list)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(
            pbconv::to_proto_list_task_push_notification_configs_response(&configs),
        ))
    }

    async fn delete_task_push_notification_config(
        &self,
        request: Request<a2a_pb::DeleteTaskPushNotificationConfigRequest>,
    ) -> Result<Response<()>, Status> {
        let metadata = identify(&request, "DeleteTaskPushNotificationConfig")?;
        let delete =
            pbconv::from_proto_delete_task_push_notification_config_request(request.get_ref());
        push_config::delete(&self.caller(&metadata), delete)
            .await
            .map_err(|err| status::of(&err))?;
        Ok(Response::new(()))
    }

    /// The caller's extended card ([`crate::a2a::extended`]), as the other bindings answer;
    /// its HTTP URLs name `--public-url` (else `--listen`): a gRPC call has no HTTP origin.
    async fn get_extended_agent_card(
        &self,
        request: Request<a2a_pb::GetExtendedAgentCardRequest>,
    ) -> Result<Response<a2a_pb::AgentCard>, Status> {
        let metadata = identify(&request, "GetExtendedAgentCard")?;
        let config = &self.state.config;
        let base = || {
            let mut base =
                crate::core::origin::security_origin(config, &metadata.headers, &metadata.uri);
            base.push_str(&config.base_path());
            base
        };
        let card = extended::card_bytes(&self.state, &metadata.headers, base)
            .await
            .and_then(|card| extended::parsed::<a2a::AgentCard>(&card))
            .map_err(|err| status::of(&err))?;
        let mut response = Response::new(pbconv::to_proto_agent_card(&card));
        response.metadata_mut().insert(
            "cache-control",
            tonic::metadata::MetadataValue::from_static(extended::CACHE_CONTROL),
        );
        Ok(response)
    }
}
